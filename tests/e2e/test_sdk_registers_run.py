"""A real JAX workload with the official SDK against ``mldiag up``: runs, their final phase, profiles.

``mldiag up`` runs as a subprocess on a free port with a fresh data dir; the
workload (``workloads/sdk_workload.py``) reaches it through ``DIAGON_BASE_URL``
and writes profiles into the local bucket folder; the checks use the ``mldiag``
CLI, as a user would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WORKLOAD = Path(__file__).parent / "workloads" / "sdk_workload.py"
MLDIAG = str(Path(sys.executable).parent / "mldiag")
START_TIMEOUT_S = 60


@dataclass
class ControlPlane:
    url: str
    bucket_folder: Path
    log: Path

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request the server has logged so far."""
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]
        return [(line["method"], line["path"]) for line in lines if line.get("message") == "request"]


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    state = tmp_path_factory.mktemp("mldiag-up")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MLDIAG_LOG_FORMAT": "json"}
    env.pop("MLDIAG_BACKEND", None)
    log = state / "up.log"
    with log.open("wb") as errors:
        process = subprocess.Popen([MLDIAG, "up", "--data", str(state / "data"), "--port", "0"], env=env,
                                   stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        banner = ""
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Ctrl-C" not in banner:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                pytest.fail(f"mldiag up exited with {process.returncode}:\n{log.read_text()}", pytrace=False)
            banner += line
            assert time.monotonic() < deadline, f"mldiag up did not start:\n{banner}"
        url = re.search(r"DIAGON_BASE_URL=(\S+)", banner)[1]
        folder = Path(re.search(r"gcs_path=(\S+) ", banner)[1])
        yield ControlPlane(url, folder, log)
    finally:
        process.terminate()  # SIGTERM: the clean shutdown path
        assert process.wait(timeout=30) == 0, log.read_text()[-2000:]
    assert '"stopping"' in log.read_text()


def _workload(control_plane: ControlPlane, name: str, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DIAGON_BASE_URL": control_plane.url, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, str(WORKLOAD), "--name", name, "--gcs-path",
                           str(control_plane.bucket_folder), *flags],
                          env=env, capture_output=True, text=True, timeout=300)


def _mldiag(control_plane: ControlPlane, *args: str):
    result = subprocess.run([MLDIAG, *args, "--format", "json", "--api-url", control_plane.url],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _run_named(control_plane: ControlPlane, display_name: str) -> dict:
    (run,) = [r for r in _mldiag(control_plane, "machine-learning-run", "list") if r["displayName"] == display_name]
    return run


def test_a_finished_workload_registers_its_run_and_ends_it_succeeded(control_plane):
    finished = _workload(control_plane, "sdk-e2e-ok", "--profile")
    assert finished.returncode == 0, finished.stderr[-3000:]

    run = _run_named(control_plane, "sdk-e2e-ok")
    run_id = run["name"].rsplit("/", 1)[1]
    assert f"registered run {run_id}" in finished.stdout  # the SDK took the id from our answer
    described = _mldiag(control_plane, "machine-learning-run", "describe", run_id)
    # The SDK reports STATE_SUCCEEDED; Google's v1alpha model calls that run phase COMPLETED.
    assert described["runPhase"] == "COMPLETED" and described["endTime"]
    assert described["clusterId"] == "default" and described["creator"] == "CREATOR_MANUAL"
    assert described["artifacts"]["gcsPath"] == "gs://mldiag-profiles"


def test_the_profile_written_by_xprof_becomes_a_session_of_the_run(control_plane):
    run_id = _run_named(control_plane, "sdk-e2e-ok")["name"].rsplit("/", 1)[1]
    folder = control_plane.bucket_folder / run_id / "plugins" / "profile" / "steps-2-4"
    assert list(folder.glob("*.xplane.pb")), "the SDK's xprof() wrote no profile under the run's folder"

    deadline = time.monotonic() + 60
    while not (sessions := _mldiag(control_plane, "profiler-session", "list", "--machine-learning-run", run_id)):
        assert time.monotonic() < deadline, "the profile was not registered as a session"
        time.sleep(0.5)
    (session,) = sessions
    assert session["name"].endswith("/profilerSessions/steps-2-4")
    assert session["storageFolderUri"] == f"gs://mldiag-profiles/{run_id}/plugins/profile/steps-2-4"


def test_a_workload_that_raises_ends_failed(control_plane):
    crashed = _workload(control_plane, "sdk-e2e-crash", "--fail")
    assert crashed.returncode != 0 and "simulated crash" in crashed.stderr

    run = _run_named(control_plane, "sdk-e2e-crash")
    described = _mldiag(control_plane, "machine-learning-run", "describe", run["name"].rsplit("/", 1)[1])
    assert described["runPhase"] == "FAILED" and described["endTime"]


def test_self_hosted_mode_reports_runs_only_never_sessions(control_plane):
    """The SDK's self-hosted client has no session calls: xprof() start/stop sends nothing,
    and sessions come from the files alone (registration)."""
    sdk_calls = [call for call in control_plane.requests() if call[1].startswith("/v1/")]
    assert sdk_calls and all(method == "PATCH" for method, _ in sdk_calls)
    assert all(re.fullmatch(r"/v1/machineLearningRuns(/[\w-]+)?", path) for _, path in sdk_calls)
