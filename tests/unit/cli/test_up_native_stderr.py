"""``mldiag up``'s terminal keeps one line per event: what native libraries write to descriptor 2
(XProf's C++ logging) goes to the log file as JSON lines of ``mldiag.native``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

XPROF_LINE = "I0000 00:00:1796500922.680955   18938 profiler_client.cc:172] Asynchronous gRPC Profile() to 127.0.0.1:1"

PROCESS = f"""
import os, sys
from pathlib import Path
import structlog
from mldiag import logs
from mldiag.local.native_stderr import NativeStderr

native = NativeStderr()
native.install()
logs.configure(sys.argv[1], log_file=Path(sys.argv[2]))
os.write(2, b"{XPROF_LINE}\\n")
structlog.get_logger("mldiag.local.server").info("session s1 registered", notice=True)
native.restore()
logs.close()
os.write(2, b"descriptor 2 is the terminal again\\n")
"""


def run(log_format: str, tmp_path: Path) -> tuple[str, list[dict]]:
    log_file = tmp_path / "mldiag.log"
    done = subprocess.run([sys.executable, "-c", PROCESS, log_format, str(log_file)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr, [json.loads(line) for line in log_file.read_text().splitlines()]


def test_native_lines_go_to_the_log_file_and_not_between_the_terminals_lines(tmp_path):
    terminal, logged = run("console", tmp_path)
    assert "session s1 registered" in terminal and "descriptor 2 is the terminal again" in terminal
    assert "profiler_client.cc" not in terminal
    native = [line for line in logged if line.get("logger") == "mldiag.native"]
    assert [(line["message"], line["severity"]) for line in native] == [(XPROF_LINE, "INFO")]


def test_a_terminal_showing_json_shows_them_as_json_lines(tmp_path):
    terminal, _ = run("json", tmp_path)
    native = [json.loads(line) for line in terminal.splitlines() if "profiler_client.cc" in line]
    assert [line["logger"] for line in native] == ["mldiag.native"]
