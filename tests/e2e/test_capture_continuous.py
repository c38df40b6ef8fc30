"""Continuous profiling against ``mldiag up`` and a real JAX workload on CPU.

What XProf does here (measured): starting twice is refused by the server too;
while it runs, the profiler refuses on-demand traces; a snapshot comes back
empty on a host without TPUs. So the snapshot session fails with that said,
and ``--fallback on-demand`` takes a real trace instead — never a fake success.
"""

from __future__ import annotations

import pytest

from capture_support import create_run, mldiag, mldiag_json, profile_file, register_target, session

pytestmark = pytest.mark.slow

RUN = "capture-continuous"


@pytest.fixture(scope="module")
def target(control_plane, workloads):
    create_run(control_plane, RUN)
    (workload,) = workloads(1)
    register_target(control_plane, RUN, "worker-0", workload.port)
    return workload


def run_cli(control_plane, *args: str):
    return mldiag(control_plane, *args, "--format", "json")


def capture(control_plane, session_id: str, *flags: str):
    return run_cli(control_plane, "profiler-session", "capture", session_id, "--machine-learning-run", RUN,
                   "--duration", "1s", *flags)


def test_continuous_profiling_starts_once_and_blocks_on_demand_captures(control_plane, target):
    started = run_cli(control_plane, "machine-learning-run", "start-continuous-profiling", RUN)
    assert started.returncode == 0, started.stderr
    assert '"worker-0": {\n    "state": "SUCCEEDED"' in started.stdout

    again = run_cli(control_plane, "machine-learning-run", "start-continuous-profiling", RUN)
    assert again.returncode == 1 and "ALREADY_EXISTS: continuous profiling is active for run" in again.stderr
    refused = capture(control_plane, "on-demand-while-on")
    assert refused.returncode == 1
    assert "profiler server runs one session at a time: take a snapshot (--kind snapshot)" in refused.stderr
    state = mldiag_json(control_plane, "machine-learning-run", "describe", RUN)["continuousProfiling"]
    assert state["profilerTargets"] == ["worker-0"] and state["deviceTracerLevel"] == "DEVICE_TRACER_LEVEL_ENABLED"


def test_an_empty_snapshot_fails_the_session_and_says_why(control_plane, target):
    snapshot = capture(control_plane, "snap-1", "--kind", "snapshot")
    assert snapshot.returncode == 1
    assert "the snapshot from 127.0.0.1:" in snapshot.stderr and "came back empty" in snapshot.stderr

    described = session(control_plane, RUN, "snap-1")
    assert described["kind"] == "KIND_SNAPSHOT"
    outcome = described["targetSessions"]["worker-0"]
    assert outcome["sessionPhase"] == "FAILED"
    assert outcome["error"].startswith("empty trace: the snapshot from") and "--fallback on-demand" in outcome["error"]
    assert described["hostTracerLevel"] == "HOST_TRACER_LEVEL_DISABLED"
    assert not profile_file(control_plane, RUN, "snap-1", "worker-0").exists()


def test_the_on_demand_fallback_takes_a_real_trace_and_resumes_continuous_profiling(control_plane, target):
    fallen_back = capture(control_plane, "snap-2", "--kind", "snapshot", "--fallback", "on-demand")
    assert fallen_back.returncode == 0, fallen_back.stderr
    assert "target worker-0: the snapshot came back empty" in fallen_back.stderr
    assert "took a 1000 ms on-demand trace instead; continuous profiling resumed" in fallen_back.stderr

    described = session(control_plane, RUN, "snap-2")
    assert described["kind"] == "KIND_ON_DEMAND"
    assert described["targetSessions"]["worker-0"]["sessionPhase"] == "SUCCEEDED"
    assert profile_file(control_plane, RUN, "snap-2", "worker-0").stat().st_size > 10_000
    # Resumed on the server too: a snapshot still finds continuous profiling running (empty, not NOT_FOUND).
    assert "came back empty" in capture(control_plane, "snap-3", "--kind", "snapshot").stderr


def test_stopping_frees_the_profiler_for_on_demand_captures(control_plane, target):
    stopped = run_cli(control_plane, "machine-learning-run", "stop-continuous-profiling", RUN)
    assert stopped.returncode == 0, stopped.stderr
    assert "continuousProfiling" not in mldiag_json(control_plane, "machine-learning-run", "describe", RUN)
    captured = capture(control_plane, "after-stop")
    assert captured.returncode == 0, captured.stderr  # the server no longer holds a continuous session
    assert session(control_plane, RUN, "after-stop")["targetSessions"]["worker-0"]["sessionPhase"] == "SUCCEEDED"


def test_a_profiler_held_by_someone_else_makes_the_target_busy(control_plane, target):
    from xprof.api import continuous_profiling_snapshot

    address = f"127.0.0.1:{target.port}"
    continuous_profiling_snapshot.start_continuous_profiling(address, {})  # started outside mldiag
    try:
        captured = capture(control_plane, "while-held")
    finally:
        continuous_profiling_snapshot.stop_continuous_profiling(address)
    assert captured.returncode == 1
    error = session(control_plane, RUN, "while-held")["targetSessions"]["worker-0"]["error"]
    assert error.startswith(f"busy: {address} refused the capture at once: another profiling session is active")
