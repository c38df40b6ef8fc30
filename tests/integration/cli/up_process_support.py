"""``mldiag up`` started as a process of its own, its output collected line by line as it comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class UpProcess:
    process: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @classmethod
    def start(cls, data: Path, *code: str, env: dict[str, str | None] | None = None,
              options: tuple[str, ...] = ()) -> UpProcess:
        """``mldiag up --port 0 --data DATA [options]``, after running ``code`` in its interpreter (to patch a
        default).

        ``env`` adds settings; a setting given as None is left unset, so that ``mldiag up``'s default holds.
        """
        merged = {**os.environ, "MLDIAG_SETTLE_SECONDS": "3600", "MLDIAG_LOG_FORMAT": None, **(env or {})}
        environment = {key: value for key, value in merged.items() if value is not None}
        program = "; ".join([*code, "from mldiag.cli.main import run", "run()"])
        up = cls(subprocess.Popen([sys.executable, "-c", program, "up", "--port", "0", "--data", str(data), *options],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment))
        up.reader = threading.Thread(target=lambda: up.lines.extend(line.rstrip("\n") for line in up.process.stdout),
                                     daemon=True)
        up.reader.start()
        return up

    def wait_for(self, wanted: str, seconds: float = 60) -> str:
        """The first line holding ``wanted``, once printed; fails after ``seconds`` or if the process ended."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.process.poll() is None:
            found = next((line for line in self.lines if wanted in line), None)
            if found:
                return found
            time.sleep(0.1)
        raise AssertionError(f"no line with {wanted!r} in {self.lines}")

    def stop(self) -> None:
        """Ctrl-C, and every line it printed read."""
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=30)
        if self.reader is not None:
            self.reader.join(timeout=10)
        self.process.stdout.close()
