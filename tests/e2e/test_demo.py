"""``mldiag demo`` end to end: four capture modes on a real JAX job, four analysed sessions, nothing left running.

Once as a newcomer runs it (the demo starts and stops its own ``mldiag up``),
once against the ``control_plane`` fixture (``--api-url``), where the reports
come back as share links served by that control plane.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

from capture_support import MLDIAG, ControlPlane

pytestmark = pytest.mark.slow

DEMO_TIMEOUT_S = 420


def run_demo(work_dir: Path, *flags: str) -> list[dict]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("MLDIAG_")}
    demo = subprocess.run([MLDIAG, "demo", "--work-dir", str(work_dir), "--format", "json", *flags],
                          capture_output=True, text=True, timeout=DEMO_TIMEOUT_S, env={**env, "COLUMNS": "200"})
    assert demo.returncode == 0, demo.stderr[-4000:]
    assert "the SDK reported its end: run phase COMPLETED" in demo.stderr
    return json.loads(demo.stdout)


def processes_mentioning(*texts: str) -> list[str]:
    """Command lines of the live processes that mention every one of ``texts``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # ended meanwhile
        if all(text in command for text in texts):
            found.append(command)
    return found


def check_sessions(sessions: list[dict]) -> dict[str, dict]:
    by_mode = {session["mode"]: session for session in sessions}
    assert list(by_mode) == ["programmatic", "on-demand", "snapshot", "automatic"]
    assert by_mode["programmatic"]["kind"] in ("KIND_PROGRAMMATIC", "KIND_SCANNED")
    assert by_mode["on-demand"]["kind"] == "KIND_ON_DEMAND"
    snapshot = by_mode["snapshot"]
    if snapshot["kind"] != "KIND_SNAPSHOT":  # a host without TPUs: the explained fall-back
        assert snapshot["kind"] == "KIND_ON_DEMAND"
        assert "the snapshot came back empty" in snapshot["note"]
        assert "on-demand trace instead" in snapshot["note"]
    automatic = by_mode["automatic"]
    assert automatic["autoCaptured"] is True
    (event,) = automatic["monitoredEvents"]
    assert "/monitoredEvents/degradation-" in event
    assert sum(session["autoCaptured"] for session in sessions) == 1
    for session in sessions:
        assert session["state"] == "SUCCEEDED", session
        assert session["analysisState"] == "DONE", session
        assert session["health"] in ("OPTIMAL", "NEEDS_ATTENTION") and session["topFinding"], session
    return by_mode


def test_the_demo_on_its_own_control_plane_ends_with_four_analysed_reports_and_nothing_running(tmp_path):
    sessions = check_sessions(run_demo(tmp_path / "demo"))

    for session in sessions.values():
        report = Path(session["report"])
        assert report.name == "summary.html" and tmp_path in report.parents
        assert "<html" in report.read_text().lower()
    assert processes_mentioning(str(tmp_path)) == []  # the children name the work dir: data, gcs path


def test_the_demo_against_a_running_control_plane_shares_its_reports(control_plane: ControlPlane, tmp_path):
    sessions = check_sessions(run_demo(tmp_path / "demo", "--api-url", control_plane.url,
                                       "--gcs-path", str(control_plane.bucket_folder)))

    for session in sessions.values():
        assert session["report"].startswith(f"{control_plane.url}/share/")
        shared = requests.get(session["report"], timeout=10)
        assert shared.status_code == 200 and shared.headers["Content-Type"].startswith("text/html")
    assert processes_mentioning("mldiag.local.demo.workload", str(control_plane.bucket_folder)) == []

    # The fleet lists the demo's run with its lost accelerator time by cause, as the console's fleet page does.
    rows: list[dict] = []
    deadline = time.monotonic() + 60  # each record follows its analysis through the bus
    while time.monotonic() < deadline and not [row for row in rows if row["analyses"] == len(sessions)]:
        listed = subprocess.run([MLDIAG, "fleet", "top-waste", "--since", "1d", "--format", "json",
                                 "--api-url", control_plane.url], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        time.sleep(0.5)
    (row,) = [row for row in rows if row["analyses"] == len(sessions)]
    assert row["lost_device_ms"] > 0 and row["host_work_device_ms"] + row["waiting_device_ms"] > 0
    page = requests.get(f"{control_plane.url}/ui/fleet?since=1d", timeout=30).text
    run_id = row["run"].rsplit("/", 1)[-1]
    shown = page.split(f'<tr data-run="{run_id}">', 1)[1].split("</tr>", 1)[0]
    assert f'data-column="lost_device_ms">{row["lost_device_ms"] / 1000:,.1f}<' in shown
