"""``mldiag up`` as its own process: calm over maintenance ticks, and a session registered from any bucket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request


def _wait_for(lines: list[str], wanted: str, process: subprocess.Popen, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        found = next((line for line in lines if wanted in line), None)
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no line with {wanted!r} in {lines}")


def _read(stream, into: list[str]) -> None:
    for line in stream:
        into.append(line.rstrip("\n"))


def test_mldiag_up_is_calm_over_maintenance_ticks_and_registers_a_session_in_any_bucket(tmp_path):
    data = tmp_path / "data"
    env = {**os.environ, "MLDIAG_MAINTENANCE_INTERVAL_SECONDS": "0.2", "MLDIAG_SETTLE_SECONDS": "3600"}
    env.pop("MLDIAG_LOG_FORMAT", None)
    process = subprocess.Popen(
        [sys.executable, "-c", "from mldiag.cli.main import run; run()", "up", "--port", "0", "--data", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=_read, args=(process.stdout, lines), daemon=True)
    reader.start()
    try:
        url = _wait_for(lines, "mldiag control plane at ", process).split(" at ", 1)[1].split()[0]
        _wait_for(lines, "Full log, as JSON lines: ", process)
        log_file = data / "logs" / "mldiag.log"
        deadline = time.monotonic() + 30
        while log_file.read_text().count('"function": "maintenance"') < 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # a few ticks, each handled and logged

        profile = data / "buckets" / "other" / "exp" / "run-1" / "plugins" / "profile" / "first-steps"
        profile.mkdir(parents=True)
        (profile / "host-0.xplane.pb").write_bytes(b"an xplane")
        registered = _wait_for(lines, "registered from", process)
        with urllib.request.urlopen(registered.rsplit("  ", 1)[1], timeout=30) as page:
            opened = page.status, page.read().decode()
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        reader.join(timeout=10)
        process.stdout.close()

    assert registered.endswith("session run-1/first-steps registered from gs://other/exp/run-1/plugins/profile/"
                               f"first-steps  {url}/ui/runs/run-1/sessions/first-steps")
    assert opened[0] == 200 and "first-steps" in opened[1]
    assert process.returncode == 0
    assert not [line for line in lines if line.lstrip().startswith("{")], lines
    assert lines[-1].endswith("  stopping")
    assert log_file.read_text().count('"function": "maintenance"') >= 3
