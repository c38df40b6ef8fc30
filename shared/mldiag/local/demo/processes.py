"""The demo's child processes: a local ``mldiag up`` and the training workload.

Both run in their own process group, so a Ctrl-C at the terminal reaches the
demo alone, which then stops them in order (the workload first, so the SDK can
still report the run's end). Their output is read by a thread per stream, so
waiting for a line never blocks past its deadline; their logs go to files the
demo names when something fails.
"""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

STOP_TIMEOUT_S = 30
# `mldiag up`, run by this interpreter whether or not the `mldiag` script is on PATH.
MLDIAG_UP = [sys.executable, "-c", "from mldiag.cli.main import run; run()", "up"]


class DemoError(Exception):
    """A demo step could not finish; the message says what to look at."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Lines:
    """The lines a child writes to one stream, for reading with a deadline."""

    def __init__(self, stream: IO[str]):
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def next(self, deadline: float) -> str | None:
        """The next line; None once the stream has ended. Raises TimeoutError at the deadline."""
        try:
            return self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError from None


class _Child:
    def __init__(self, what: str, command: list[str], log: Path, env: dict[str, str], stdin: bool = False):
        self.what, self.log = what, log
        with log.open("w") as stderr:
            self.process = subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=stderr,
                                            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                            start_new_session=True)
        assert self.process.stdout is not None
        self.lines = _Lines(self.process.stdout)

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def read_line(self, deadline: float, waiting_for: str) -> str:
        try:
            line = self.lines.next(deadline)
        except TimeoutError:
            raise DemoError(f"{self.what} did not {waiting_for} in time; its log: {self.log}") from None
        if line is None:
            code = self.process.wait()
            raise DemoError(f"{self.what} exited (status {code}) before it could {waiting_for}; its log: {self.log}")
        return line

    def stop(self) -> None:
        """Stop (SIGTERM, then SIGKILL) and reap the process; safe to call more than once."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()


class LocalControlPlane(_Child):
    """``mldiag up`` on a free port over a fresh data dir, with a short settle window."""

    def __init__(self, data_dir: Path, log: Path, settle_seconds: float, timeout_s: float):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "MLDIAG_SETTLE_SECONDS": f"{settle_seconds:g}"}
        for inherited in ("MLDIAG_BACKEND", "MLDIAG_API_TOKEN", "MLDIAG_AUTH_AUDIENCE"):
            env.pop(inherited, None)  # the demo's own control plane is the open embedded default
        super().__init__("mldiag up", [*MLDIAG_UP, "--data", str(data_dir), "--port", "0"], log, env)
        banner = ""
        deadline = time.monotonic() + timeout_s
        try:
            while "Ctrl-C" not in banner:
                banner += self.read_line(deadline, "start")
        except BaseException:
            self.stop()
            raise
        self.url = re.search(r"DIAGON_BASE_URL=(\S+)", banner)[1]
        self.bucket_folder = Path(re.search(r"gcs_path=(\S+) ", banner)[1])


class Workload(_Child):
    """The training job of :mod:`mldiag.local.demo.workload`: commands in on stdin, JSON events out on stdout."""

    def __init__(self, name: str, api_url: str, runs_url: str, gcs_path: Path | str, token: str, log: Path):
        self.profiler_port = free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "JAX_PLATFORMS": "cpu", "DIAGON_BASE_URL": api_url}
        command = [sys.executable, "-m", "mldiag.local.demo.workload", "--name", name, "--gcs-path", str(gcs_path),
                   "--profiler-port", str(self.profiler_port), "--runs-url", runs_url]
        super().__init__("the workload", command + (["--token", token] if token else []), log, env, stdin=True)

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise DemoError(f"the workload has exited; its log: {self.log}") from None

    def wait_for(self, event: str, timeout_s: float) -> dict[str, Any]:
        """The next ``event`` the workload announces (earlier, other events are skipped)."""
        deadline = time.monotonic() + timeout_s
        while True:
            line = self.read_line(deadline, f"announce {event!r}")
            try:
                announced = json.loads(line)
            except ValueError:
                continue  # a library printing to stdout
            if isinstance(announced, dict) and announced.get("event") == event:
                return announced

    def stop(self) -> None:
        """Let the job end on its own (the SDK marks the run COMPLETED); SIGTERM, then SIGKILL, if it does not."""
        if self.process.poll() is None:
            try:
                self.send("stop")
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except (DemoError, subprocess.TimeoutExpired):
                pass
        super().stop()
