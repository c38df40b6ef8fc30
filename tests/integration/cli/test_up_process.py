"""``mldiag up`` as its own process: calm over maintenance ticks, and a session registered from any bucket."""

from __future__ import annotations

import time
import urllib.request

from up_process_support import UpProcess


def test_mldiag_up_is_calm_over_maintenance_ticks_and_registers_a_session_in_any_bucket(tmp_path):
    data = tmp_path / "data"
    up = UpProcess.start(data, env={"MLDIAG_MAINTENANCE_INTERVAL_SECONDS": "0.2"})
    try:
        url = up.wait_for("mldiag control plane at ").split(" at ", 1)[1].split()[0]
        up.wait_for("Full log, as JSON lines: ")
        log_file = data / "logs" / "mldiag.log"
        deadline = time.monotonic() + 30
        while log_file.read_text().count('"function": "maintenance"') < 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # a few ticks, each handled and logged

        profile = data / "buckets" / "other" / "exp" / "run-1" / "plugins" / "profile" / "first-steps"
        profile.mkdir(parents=True)
        (profile / "host-0.xplane.pb").write_bytes(b"an xplane")
        registered = up.wait_for("registered from")
        with urllib.request.urlopen(registered.rsplit("  ", 1)[1], timeout=30) as page:
            opened = page.status, page.read().decode()
    finally:
        up.stop()

    assert registered.endswith("session run-1/first-steps registered from gs://other/exp/run-1/plugins/profile/"
                               f"first-steps  {url}/ui/runs/run-1/sessions/first-steps")
    assert opened[0] == 200 and "first-steps" in opened[1]
    assert up.process.returncode == 0
    assert not [line for line in up.lines if line.lstrip().startswith("{")], up.lines
    assert up.lines[-1].endswith("  stopping")
    assert log_file.read_text().count('"function": "maintenance"') >= 3
