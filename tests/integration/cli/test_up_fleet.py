"""After ``mldiag up`` analyses sessions, ``mldiag fleet top-waste`` and the console's fleet page agree.

Two committed fixture profiles land in the bucket folder as two runs' sessions, as a workload's
uploads would; once both are analysed and their fleet records written, the CLI's table and the
``/ui/fleet`` page must list both runs with the same lost accelerator time, share and time per cause.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import requests

from up_process_support import UpProcess

PROFILES = Path(__file__).resolve().parents[2] / "fixtures" / "profiles"
UPLOADS = {  # run -> the fixture its session's file is
    "fleet-input": PROFILES / "input_bound" / "plugins" / "profile" / "input_bound" / "fixture-host.xplane.pb",
    "fleet-healthy": PROFILES / "demo_healthy" / "plugins" / "profile" / "demo_healthy" / "fixture-host.xplane.pb",
}
LOST_CAUSES = ("collectives", "transfers", "compilation", "dispatch", "host_work", "waiting", "interpreter", "untraced")
CLI = (sys.executable, "-c", "from mldiag.cli.main import run; run()")


def _cli(url: str, *arguments: str) -> str:
    done = subprocess.run([*CLI, "fleet", "top-waste", "--since", "7d", "--api-url", url, *arguments],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _seconds(ms: float) -> str:
    return f"{ms / 1000:,.1f}"


def _cell(page: str, run: str, column: str) -> str:
    row = page.split(f'<tr data-run="{run}">', 1)[1].split("</tr>", 1)[0]
    found = re.search(rf'data-column="{column}">([^<]*)<', row)
    return found.group(1) if found else ""


def test_the_fleet_lists_the_analysed_runs_alike_in_the_cli_and_the_console(tmp_path):
    data = tmp_path / "data"
    up = UpProcess.start(data, env={"MLDIAG_SETTLE_SECONDS": None, "MLDIAG_MAINTENANCE_INTERVAL_SECONDS": None})
    try:
        url = up.wait_for("mldiag control plane at ").split(" at ", 1)[1].split()[0]
        up.wait_for("Full log, as JSON lines: ")
        for run, profile in UPLOADS.items():
            session = data / "buckets" / "mldiag-profiles" / run / "plugins" / "profile" / "s1"
            session.mkdir(parents=True)
            shutil.copyfile(profile, session / "host-0.xplane.pb.part")
            (session / "host-0.xplane.pb.part").rename(session / "host-0.xplane.pb")
        deadline = time.monotonic() + 240
        rows: list[dict] = []
        while time.monotonic() < deadline and len(rows) < len(UPLOADS):
            time.sleep(0.5)
            rows = json.loads(_cli(url, "--format", "json"))
        assert len(rows) == len(UPLOADS), f"the fleet lists {rows} 240 s after the uploads: {up.lines[-10:]}"
        table = _cli(url)
        page = requests.get(f"{url}/ui/fleet?since=7d", timeout=30)
    finally:
        up.stop()

    assert page.status_code == 200, page.text[:2000]
    html = page.text
    assert {row["display_name"] for row in rows} == set(UPLOADS)
    assert re.findall(r'<tr data-run="([^"]+)">', html) == [row["run"].rsplit("/", 1)[-1] for row in rows]
    input_bound = next(row for row in rows if row["display_name"] == "fleet-input")
    assert input_bound["lost_device_ms"] > 0 and input_bound["host_work_device_ms"] > 0
    for row in rows:
        run = row["run"].rsplit("/", 1)[-1]
        lost = _seconds(row["lost_device_ms"])
        share = f"{row['lost_share'] * 100:.1f}%"
        line = next(line for line in table.splitlines() if row["display_name"] in line)
        assert lost in line and share in line, (line, lost, share)
        assert _cell(html, run, "lost_device_ms") == lost
        assert _cell(html, run, "lost_share") == share
        for cause in LOST_CAUSES:
            if any(other[f"{cause}_device_ms"] for other in rows):
                assert _cell(html, run, f"{cause}_device_ms") == _seconds(row[f"{cause}_device_ms"] or 0.0)
        report = f'href="/ui/runs/{run}/sessions/s1/report/summary.html"'
        assert report in html
