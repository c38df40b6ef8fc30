"""Capture tasks: leases, outcomes landing in the session, the run and the operation, and abandonment."""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from mldiag.services.capture import tasks
from mldiag.services import unit_of_work
from mldiag.domain.capture import CaptureFailed, Failure
from mldiag.services.capture.tasks import TaskResult
from mldiag.config import ANALYSIS_REQUESTS
from mldiag.domain import AnalysisState, Kind, SessionPhase
from mldiag.domain.envelopes import storage_finalized_event
from mldiag.domain.resources import TargetState
from mldiag.entrypoints import handlers
from mldiag.services.capture.requests import CaptureRequest, ContinuousRequest, capture, start_continuous

UNREACHABLE = TaskResult.failed(CaptureFailed(Failure.UNREACHABLE, "cannot connect"))


@pytest.fixture
def two_target_capture(embedded, run, add_target):
    add_target("h-0")
    add_target("h-1")
    return capture(embedded, run, "s1", CaptureRequest())


def write_profile(services, target: str, session: str = "s1") -> None:
    """What the workload's profiler server does, and the finalize event the bucket then sends."""
    info = services.blobs.write_bytes(f"gs://profiles/runs/r1/plugins/profile/{session}/{target}.xplane.pb", b"x" * 64)
    handlers.register_session(services, storage_finalized_event({
        "bucket": "profiles", "name": info.uri.removeprefix("gs://profiles/"), "generation": info.generation,
        "size": str(info.size)}))


def key(operation, target: str) -> str:
    return tasks.task_key(operation.name, target)


def test_a_task_is_claimed_once_until_its_lease_runs_out(embedded, clock, two_target_capture):
    task_key = key(two_target_capture, "h-0")
    claimed = tasks.claim(embedded, task_key)
    assert claimed.state is tasks.TaskState.RUNNING and claimed.attempts == 1
    assert tasks.claim(embedded, task_key) is None
    clock.advance(2 + tasks.LEASE_GRACE.total_seconds())
    assert tasks.claim(embedded, task_key).attempts == 2


def test_outcomes_land_per_target_and_the_operation_completes_with_the_last(embedded, two_target_capture):
    session_name = "projects/p/locations/l/machineLearningRuns/r1/profilerSessions/s1"
    write_profile(embedded, "h-0")
    tasks.finish(embedded, key(two_target_capture, "h-0"), TaskResult())
    session = embedded.sessions.get(session_name)
    assert session.target_sessions["h-0"].session_phase is SessionPhase.SUCCEEDED
    assert session.session_phase is SessionPhase.ACTIVE
    assert not embedded.operations.get(two_target_capture.name).done

    tasks.finish(embedded, key(two_target_capture, "h-1"), UNREACHABLE)
    session = embedded.sessions.get(session_name)
    assert session.target_sessions["h-1"].session_phase is SessionPhase.FAILED
    assert session.target_sessions["h-1"].error == "unreachable: cannot connect"
    assert session.session_phase is SessionPhase.SUCCEEDED
    operation = embedded.operations.get(two_target_capture.name)
    assert operation.done and operation.error is None
    assert operation.response["targets"] == {
        "h-0": {"state": "SUCCEEDED"}, "h-1": {"state": "FAILED", "error": "unreachable: cannot connect"}}
    # The failed target sends no file, so the session is analysed on what it has, right away.
    assert session.analysis.state is AnalysisState.PENDING
    assert [json.loads(m.data)["hostFiles"] for m in embedded.bus.published[ANALYSIS_REQUESTS]] == [
        {"h-0": "gs://profiles/runs/r1/plugins/profile/s1/h-0.xplane.pb"}]


def test_each_finished_task_is_told_and_a_failure_with_its_reason(embedded, two_target_capture):
    write_profile(embedded, "h-0")
    with capture_logs() as logged:
        tasks.finish(embedded, key(two_target_capture, "h-0"), TaskResult())
        tasks.finish(embedded, key(two_target_capture, "h-1"), UNREACHABLE)
        tasks.finish(embedded, key(two_target_capture, "h-1"), UNREACHABLE)  # already final: nothing to tell
    assert [(line["log_level"], line["event"], line["error"]) for line in logged if line.get("notice")] == [
        ("info", "trace of target h-0 for r1/s1 succeeded", ""),
        ("warning", "trace of target h-1 for r1/s1 failed", "unreachable: cannot connect")]


def test_a_file_that_arrives_after_the_last_outcome_still_requests_analysis(embedded, two_target_capture):
    tasks.finish(embedded, key(two_target_capture, "h-1"), UNREACHABLE)
    embedded.blobs.write_bytes("gs://profiles/runs/r1/plugins/profile/s1/h-0.xplane.pb", b"x")  # not yet announced
    tasks.finish(embedded, key(two_target_capture, "h-0"), TaskResult())
    assert embedded.bus.published[ANALYSIS_REQUESTS] == []
    write_profile(embedded, "h-0")
    assert len(embedded.bus.published[ANALYSIS_REQUESTS]) == 1


def test_success_without_a_file_is_a_failure_and_all_failed_fails_the_operation(embedded, two_target_capture):
    tasks.finish(embedded, key(two_target_capture, "h-0"), TaskResult())
    tasks.finish(embedded, key(two_target_capture, "h-1"), UNREACHABLE)
    session = embedded.sessions.get("projects/p/locations/l/machineLearningRuns/r1/profilerSessions/s1")
    assert "h-0.xplane.pb does not exist (can the workload write to the bucket?)" in session.target_sessions["h-0"].error
    assert session.session_phase is SessionPhase.FAILED
    operation = embedded.operations.get(two_target_capture.name)
    assert operation.error.code == 2 and operation.error.message.startswith("every target failed")
    assert operation.error.details[0]["targets"]["h-1"]["state"] == "FAILED"


def test_finishing_twice_changes_nothing(embedded, two_target_capture):
    task_key = key(two_target_capture, "h-1")
    assert tasks.finish(embedded, task_key, UNREACHABLE) is not None
    assert tasks.finish(embedded, task_key, TaskResult()) is None
    assert tasks.load(embedded, task_key).state is tasks.TaskState.FAILED


def test_a_fallback_turns_the_session_into_an_on_demand_one(embedded, run, add_target):
    add_target("h-0")
    start_continuous(embedded, run, ContinuousRequest())
    operation = capture(embedded, run, "snap", CaptureRequest(kind=Kind.KIND_SNAPSHOT, fallback="on-demand"))
    write_profile(embedded, "h-0", session="snap")
    tasks.finish(embedded, key(operation, "h-0"), TaskResult(note="snapshot empty; traced", fell_back=True))
    session = embedded.sessions.get(f"{run}/profilerSessions/snap")
    assert session.kind is Kind.KIND_ON_DEMAND and session.session_phase is SessionPhase.SUCCEEDED
    assert embedded.operations.get(operation.name).response["targets"]["h-0"]["note"] == "snapshot empty; traced"


def test_a_target_that_could_not_start_leaves_the_runs_continuous_profiling(embedded, run, add_target):
    add_target("h-0")
    add_target("h-1")
    operation = start_continuous(embedded, run, ContinuousRequest())
    tasks.finish(embedded, key(operation, "h-1"), UNREACHABLE)
    assert embedded.runs.get(str(run)).continuous_profiling.profiler_targets == ["h-0"]
    tasks.finish(embedded, key(operation, "h-0"), UNREACHABLE)
    assert embedded.runs.get(str(run)).continuous_profiling is None
    assert embedded.operations.get(operation.name).error.code == 14


def test_maintenance_fails_tasks_nobody_finished_and_those_of_gone_agents(embedded, clock, run, add_target):
    add_target("h-0")
    add_target("h-1", agent="node-b")
    operation = capture(embedded, run, "s1", CaptureRequest())
    assert tasks.fail_overdue(embedded) == 0

    unit_of_work.change(embedded, lambda unit: unit.targets.update(
        f"{run}/profilerTargets/h-1", lambda t: setattr(t, "state", TargetState.GONE)))
    assert tasks.fail_overdue(embedded) == 1
    assert tasks.load(embedded, key(operation, "h-1")).error == (
        "unreachable: node agent node-b serving h-1 stopped sending heartbeats")

    clock.advance(2 + tasks.DEADLINE_GRACE.total_seconds())
    assert tasks.fail_overdue(embedded) == 1
    assert tasks.load(embedded, key(operation, "h-0")).error.startswith(
        "timeout: the capture function had not finished the capture by")
    assert embedded.operations.get(operation.name).done
