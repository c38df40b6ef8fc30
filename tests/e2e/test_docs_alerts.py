"""docs/alerts.md's *Try it*, word for word against ``mldiag up``: the Alertmanager notification it shows,
naming the run by its display name, opens a monitored event on that run.

Only the URL is substituted (``mldiag up`` runs on a free port); the run is
registered as the Quickstart's job registers it: a generated id, the display
name ``my-experiment``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from capture_support import ControlPlane, mldiag_json, wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PRINTED_URL = "http://127.0.0.1:8080"
RUN_ID = "run-5d41402abc4b"


def try_it_blocks(language: str) -> list[str]:
    """The fenced code blocks in ``language`` of the *Try it* section, in order."""
    text = (REPO / "docs" / "alerts.md").read_text(encoding="utf-8")
    section = text.split("\n## Try it", 1)[1].split("\n## ", 1)[0]
    return [code for fence, code in re.findall(r"^```(\w+)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
            if fence == language]


def shell(command: str, cwd: Path, control_plane: ControlPlane) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "MLDIAG_API_URL": control_plane.url, "COLUMNS": "1000"}
    result = subprocess.run(["bash", "-c", command.replace(PRINTED_URL, control_plane.url)], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result.stdout


def test_the_documented_alert_opens_an_event_on_the_run_its_display_name_names(control_plane: ControlPlane,
                                                                              tmp_path: Path):
    mldiag_json(control_plane, "machine-learning-run", "create", RUN_ID, "--display-name", "my-experiment",
                "--gcs-path", str(control_plane.bucket_folder))
    (payload,) = try_it_blocks("json")
    (tmp_path / "alert.json").write_text(payload, encoding="utf-8")
    post, listing = try_it_blocks("bash")[0].strip().splitlines()

    (answer,) = json.loads(shell(post, tmp_path, control_plane))["alerts"]
    assert answer["run"].endswith(f"/machineLearningRuns/{RUN_ID}") and answer["state"] == "open"
    event_id = answer["monitoredEvent"].rsplit("/", 1)[-1]
    wait_for(lambda: event_id in shell(listing, tmp_path, control_plane), "the monitored event in the list")
