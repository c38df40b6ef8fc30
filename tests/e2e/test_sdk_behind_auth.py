"""The official SDK, unchanged, against ``mldiag up`` with a token: refused at /v1, welcome through the
capability URL, and through a node agent (``mldiag agent --sdk-port``) that forwards with its own token.

The workload is the real JAX one of ``test_sdk_registers_run.py``; the checks read the control plane's
records and its request log, as the server saw the calls.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from capture_support import MLDIAG, ControlPlane, free_port

pytestmark = pytest.mark.slow

TOKEN = "e2e-token-0123456789"
MLDIAG_UP_ENV = {"MLDIAG_API_TOKEN": TOKEN}
WORKLOAD = Path(__file__).parent / "workloads" / "sdk_workload.py"


def _workload(base_url: str, gcs_path: Path, name: str, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DIAGON_BASE_URL": base_url, "JAX_PLATFORMS": "cpu"}
    env.pop("MLDIAG_API_TOKEN", None)  # the workload holds no credential of its own
    return subprocess.run([sys.executable, str(WORKLOAD), "--name", name, "--gcs-path", str(gcs_path), *flags],
                          env=env, capture_output=True, text=True, timeout=300)


def _described(control_plane: ControlPlane, display_name: str) -> dict | None:
    result = subprocess.run([MLDIAG, "machine-learning-run", "list", "--format", "json", "--api-url",
                             control_plane.url], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return next((run for run in json.loads(result.stdout) if run["displayName"] == display_name), None)


def _sdk_calls(control_plane: ControlPlane) -> list[dict]:
    lines = [json.loads(line) for line in control_plane.log.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("message") == "request" and "/v1/machineLearningRuns" in line["path"]]


def _capability_url(control_plane: ControlPlane) -> str:
    return re.search(r"DIAGON_BASE_URL=(\S+)", control_plane.banner)[1]


def test_the_banner_gives_workloads_the_capability_url(control_plane):
    url = _capability_url(control_plane)
    assert url.startswith(f"{control_plane.url}/sdk/") and len(url.rsplit("/", 1)[1]) == 64


def test_without_the_capability_the_sdk_registers_nothing(control_plane):
    _workload(control_plane.url, control_plane.bucket_folder, "sdk-auth-refused")
    assert _described(control_plane, "sdk-auth-refused") is None
    assert {call["status"] for call in _sdk_calls(control_plane)} == {401}


def test_through_the_capability_url_the_sdk_works_unchanged(control_plane):
    finished = _workload(_capability_url(control_plane), control_plane.bucket_folder, "sdk-auth-capability",
                         "--profile")
    assert finished.returncode == 0, finished.stderr[-3000:]
    run = _described(control_plane, "sdk-auth-capability")
    assert run["runPhase"] == "COMPLETED" and run["registeredBy"] == "sdk-capability"
    assert run["artifacts"]["gcsPath"] == "gs://mldiag-profiles"
    secret = _capability_url(control_plane).rsplit("/", 1)[1]
    assert secret not in control_plane.log.read_text()
    assert any(call["path"].startswith("/sdk/<secret>/v1/") and call["status"] == 200
               for call in _sdk_calls(control_plane))


@pytest.fixture
def agent(control_plane: ControlPlane, tmp_path: Path) -> Iterator[str]:
    """``mldiag agent`` with the SDK's routes on a free local port; yields the DIAGON_BASE_URL it prints."""
    stderr = tmp_path / "agent.log"
    with stderr.open("w") as log:
        process = subprocess.Popen(
            [MLDIAG, "agent", "--machine-learning-run", "sdk-auth-agent", "--sdk-port", "0",
             "--port", str(free_port()), "--heartbeat-interval", "1", "--poll-interval", "0.5",
             "--api-url", control_plane.url, "--token", TOKEN],
            env={**os.environ, "MLDIAG_DATA_DIR": str(control_plane.bucket_folder.parents[1])}, stderr=log,
            stdout=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"DIAGON_BASE_URL=(http://127\.0\.0\.1:\d+)", stderr.read_text())):
            assert process.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.2)
        yield found[1]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, stderr.read_text()[-2000:]


def test_through_the_node_agent_the_sdk_works_with_the_agents_credentials(control_plane, agent):
    before = len(_sdk_calls(control_plane))
    finished = _workload(agent, control_plane.bucket_folder, "sdk-auth-agent", "--profile")
    assert finished.returncode == 0, finished.stderr[-3000:]
    run = _described(control_plane, "sdk-auth-agent")
    # The control plane took the forwarded calls as the API token's: the agent's credential.
    assert run["runPhase"] == "COMPLETED" and run["registeredBy"] == "api-token"
    forwarded = _sdk_calls(control_plane)[before:]
    assert [call["status"] for call in forwarded] == [200] * len(forwarded) and len(forwarded) >= 2
    assert all(call["path"].startswith("/v1/machineLearningRuns") for call in forwarded)
