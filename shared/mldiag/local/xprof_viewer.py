"""The XProf viewer of ``mldiag up --viewer``: xprof's own web app over the local bucket, on 127.0.0.1.

The stock ``xprof server`` command binds its web server and its gRPC worker
service to every interface, and has no flag to change that. Here the same
pieces (xprof's profile plugin and its WSGI app, the UI it serves) run in a
child process whose web server listens on 127.0.0.1 only, without the worker
service (conversions run in the process, as the single-machine server does
anyway). The UI's capture button is hidden: captures go through mldiag.

The child prints ``listening <url>`` once bound, and exits when its standard
input closes, so it cannot outlive ``mldiag up`` even when that is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

READY_PREFIX = "listening "
START_TIMEOUT_S = 90.0  # importing xprof and its converters takes seconds on a busy machine
STOP_TIMEOUT_S = 10.0


class ViewerFailed(RuntimeError):
    """The viewer did not start; the message carries the end of its log."""


class XprofViewer:
    """The viewer as a child process of this one."""

    def __init__(self, logdir: Path, port: int, log_file: Path):
        self.logdir, self.port, self.log_file = logdir, port, log_file
        self.url = ""
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> str:
        """Start the child and wait until it listens; its URL."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, "--logdir", str(self.logdir), "--port", str(self.port)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            )
        line = _first_line(self._process.stdout, START_TIMEOUT_S)
        if not line.startswith(READY_PREFIX):
            self.stop()
            tail = self.log_file.read_text(errors="replace")[-2000:]
            raise ViewerFailed(f"the XProf viewer did not start (log {self.log_file}):\n{tail}")
        self.url = line.removeprefix(READY_PREFIX).strip()
        return self.url

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()  # type: ignore[union-attr]  # the child's cue to stop
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()  # type: ignore[union-attr]


def _first_line(stream: IO[str] | None, timeout_s: float) -> str:
    """The first line of ``stream``, or ``""`` if none came within ``timeout_s`` (or it closed)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    return lines[0] if lines else ""


def serve(logdir: Path, port: int) -> None:
    """The child: serve xprof's app on 127.0.0.1:``port`` until standard input closes."""
    from cheroot import wsgi
    from xprof import server as xprof_server

    context = xprof_server.TBContext(str(logdir), xprof_server.DataProvider(str(logdir)),
                                     xprof_server.TBContext.Flags(False))
    context.hide_capture_profile_button = True
    plugin = xprof_server.ProfilePluginLoader().load(context)
    httpd = wsgi.Server(("127.0.0.1", port), xprof_server.make_wsgi_app(plugin))
    httpd.prepare()

    def stop_when_parent_goes() -> None:
        sys.stdin.read()
        httpd.stop()

    threading.Thread(target=stop_when_parent_goes, name="parent-watch", daemon=True).start()
    print(f"{READY_PREFIX}http://127.0.0.1:{httpd.bind_addr[1]}", flush=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # nobody reads the pipe any more: a full one would block
    httpd.serve()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    serve(args.logdir.resolve(), args.port)


if __name__ == "__main__":
    main()
