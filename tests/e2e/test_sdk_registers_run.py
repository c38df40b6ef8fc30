"""A real JAX workload with the official SDK against ``mldiag up``: runs, their final phase, profiles, reruns.

``mldiag up`` runs as a subprocess on a free port with a fresh data dir (the
``control_plane`` fixture of ``conftest.py``); the workload
(``workloads/sdk_workload.py``) reaches it through ``DIAGON_BASE_URL`` and
writes profiles into the local bucket folder; the checks use the ``mldiag``
CLI, as a user would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from capture_support import MLDIAG, ControlPlane

pytestmark = pytest.mark.slow

WORKLOAD = Path(__file__).parent / "workloads" / "sdk_workload.py"


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


def _session(control_plane: ControlPlane, run_id: str, session_id: str) -> dict | None:
    sessions = _mldiag(control_plane, "profiler-session", "list", "--machine-learning-run", run_id)
    return next((s for s in sessions if s["name"].endswith(f"/profilerSessions/{session_id}")), None)


def _wait_for(condition, what: str, timeout_s: float = 240):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)
    return value


def test_running_the_same_job_again_reopens_its_run_and_keeps_the_first_report(control_plane):
    first = _workload(control_plane, "sdk-e2e-rerun", "--profile")
    assert first.returncode == 0, first.stderr[-3000:]
    run_id = _run_named(control_plane, "sdk-e2e-rerun")["name"].rsplit("/", 1)[1]

    def analysed(earlier: int) -> dict | None:
        session = _session(control_plane, run_id, "steps-2-4")
        done = session and session["analysis"]["state"] == "DONE"
        return session if done and len(session.get("earlierAnalyses", [])) == earlier else None

    first_report = _wait_for(lambda: analysed(0), "the first profile's analysis")["analysis"]["reportUri"]
    ended = _mldiag(control_plane, "machine-learning-run", "describe", run_id)

    second = _workload(control_plane, "sdk-e2e-rerun", "--profile")
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"registered run {run_id}" in second.stdout  # the SDK derives the run from the name: the same run
    rerun = _mldiag(control_plane, "machine-learning-run", "describe", run_id)
    assert rerun["runPhase"] == "COMPLETED" and rerun["restartCount"] == 1
    assert ended["endTime"] < rerun["lastRestartTime"] < rerun["endTime"]

    session = _wait_for(lambda: analysed(1), "the second profile's analysis, with the first one kept")
    assert session["earlierAnalyses"][0]["reportUri"] == first_report
    assert session["analysis"]["reportUri"] != first_report
    for report in (first_report, session["analysis"]["reportUri"]):
        assert (control_plane.bucket_folder / report.removeprefix("gs://mldiag-profiles/")).is_file()
    log = control_plane.log.read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert [line["restart_count"] for line in lines if line.get("run") == run_id
            and line["message"].startswith("run started again under the same name")] == [1]
    assert "session steps-2-4 of run" in log and f"the earlier analysis is kept at {first_report}" in log


def test_self_hosted_mode_reports_runs_only_never_sessions(control_plane):
    """The SDK's self-hosted client has no session calls: xprof() start/stop sends nothing,
    and sessions come from the files alone (registration)."""
    sdk_calls = [call for call in control_plane.requests() if call[1].startswith("/v1/")]
    assert sdk_calls and all(method == "PATCH" for method, _ in sdk_calls)
    assert all(re.fullmatch(r"/v1/machineLearningRuns(/[\w-]+)?", path) for _, path in sdk_calls)
