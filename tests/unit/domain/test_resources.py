"""The resource model: Google's JSON shape, clear validation errors, and lifecycle rules."""

from datetime import datetime, timedelta, timezone

import pytest

from mldiag.domain import (
    AnalysisState, InvalidArgument, InvalidTransition, Kind, MachineLearningRun, MonitoredEvent,
    Operation, ProfilerSession, RunPhase, SessionPhase,
)


def test_session_json_uses_google_field_names_and_enum_spellings():
    session = ProfilerSession.from_json({
        "kind": "on-demand",
        "duration": "1500ms",
        "hostTracerLevel": "VERBOSE",
        "targetSessions": {"host0-0": {"sessionPhase": "ACTIVE", "startTime": "2026-01-02T03:04:05Z"}},
    })
    wire = session.to_json_dict()
    assert wire["kind"] == "KIND_ON_DEMAND"
    assert wire["duration"] == "1.500s"
    assert wire["hostTracerLevel"] == "HOST_TRACER_LEVEL_VERBOSE"
    assert wire["targetSessions"]["host0-0"]["startTime"] == "2026-01-02T03:04:05.000000Z"
    assert ProfilerSession.from_json(wire) == session


def test_sdk_payload_is_accepted_as_sent():
    # What google-cloud-mldiagnostics 1.0 sends when it creates a programmatic session.
    payload = {
        "profilerTargets": ["vm"],
        "targetSessions": {"vm": {"startTime": "2026-01-02T03:04:05Z", "sessionPhase": "ACTIVE",
                                  "endTime": "0001-01-01T00:00:00Z"}},
        "storageFolderUri": "gs://b/run/plugins/profile/s1",
        "dashboardUri": "",
        "duration": "0.001s",
        "kind": "KIND_PROGRAMMATIC",
        "hostTracerLevel": "HOST_TRACER_LEVEL_INFO",
        "deviceTracerLevel": "DEVICE_TRACER_LEVEL_ENABLED",
        "pythonTracerLevel": "PYTHON_TRACER_LEVEL_DISABLED",
    }
    session = ProfilerSession.from_json(payload)
    assert session.kind is Kind.KIND_PROGRAMMATIC
    assert session.target_sessions["vm"].end_time is None  # year 1 means "not set"
    assert session.duration == timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"kind": "SOMETIMES"}, "kind"),
        ({"duration": "soon"}, "duration"),
        ({"autoCaptured": "maybe"}, "autoCaptured"),
        ({"targetSessions": {"h": {"sessionPhase": "DONE"}}}, "targetSessions.h.sessionPhase"),
        ({"hostFiles": {"h": {}}}, "hostFiles.h.uri"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_input_names_the_field(payload, field):
    with pytest.raises(InvalidArgument) as raised:
        ProfilerSession.from_json(payload)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")


def test_unknown_field_is_called_unknown():
    with pytest.raises(InvalidArgument, match="runPhaze: unknown field"):
        MachineLearningRun.from_json({"runPhaze": "ACTIVE"})


def _session(phase: str, analysis: str = "NOT_STARTED") -> ProfilerSession:
    return ProfilerSession.from_json({
        "targetSessions": {"h": {"sessionPhase": phase}}, "analysis": {"state": analysis},
    })


@pytest.mark.parametrize(("before", "after"), [("ACTIVE", "SUCCEEDED"), ("ACTIVE", "FAILED"), ("SUCCEEDED", "SUCCEEDED")])
def test_possible_session_phase_moves(before, after):
    _session(after).check_transition(_session(before))


@pytest.mark.parametrize(("before", "after"), [("SUCCEEDED", "ACTIVE"), ("FAILED", "SUCCEEDED"), ("SUCCEEDED", "FAILED")])
def test_impossible_session_phase_moves_are_refused(before, after):
    with pytest.raises(InvalidTransition) as raised:
        _session(after).check_transition(_session(before))
    assert raised.value.field == "targetSessions.h.sessionPhase"
    assert f"from {before} to {after}" in str(raised.value)


def test_analysis_can_rerun_but_not_skip_the_queue():
    _session("SUCCEEDED", "PENDING").check_transition(_session("SUCCEEDED", "DONE"))
    with pytest.raises(InvalidTransition, match="analysis.state"):
        _session("SUCCEEDED", "DONE").check_transition(_session("SUCCEEDED", "NOT_STARTED"))


def test_an_ended_run_may_become_active_again_but_never_the_other_outcome():
    active = MachineLearningRun(run_phase=RunPhase.ACTIVE)
    MachineLearningRun(run_phase="COMPLETED").check_transition(active)
    active.check_transition(MachineLearningRun(run_phase="COMPLETED"))  # the same job started again
    active.check_transition(MachineLearningRun(run_phase="FAILED"))
    with pytest.raises(InvalidTransition, match="runPhase: cannot change from COMPLETED to FAILED"):
        MachineLearningRun(run_phase="FAILED").check_transition(MachineLearningRun(run_phase="COMPLETED"))


def test_a_restart_clears_the_end_and_counts():
    run = MachineLearningRun(run_phase="FAILED", end_time="2026-01-01T00:00:00Z")
    run.restart(datetime(2026, 1, 2, tzinfo=timezone.utc))
    assert (run.run_phase, run.end_time, run.restart_count) == (RunPhase.ACTIVE, None, 1)
    assert run.last_restart_time == datetime(2026, 1, 2, tzinfo=timezone.utc) and not run.ended


def test_ended_event_cannot_reopen_and_done_operation_cannot_undo():
    ended = MonitoredEvent.from_json({"endTime": "2026-01-01T00:00:00Z"})
    with pytest.raises(InvalidTransition):
        MonitoredEvent().check_transition(ended)
    with pytest.raises(InvalidTransition):
        Operation(done=False).check_transition(Operation(done=True))


def test_session_phase_follows_targets():
    session = ProfilerSession.from_json({"targetSessions": {
        "a": {"sessionPhase": "SUCCEEDED"}, "b": {"sessionPhase": "FAILED"}}})
    assert session.session_phase is SessionPhase.SUCCEEDED
    session.target_sessions["a"].session_phase = SessionPhase.FAILED
    assert session.session_phase is SessionPhase.FAILED
    assert ProfilerSession().session_phase is SessionPhase.ACTIVE


def test_session_phase_is_in_the_json_and_output_only():
    failed = ProfilerSession.from_json({"targetSessions": {"a": {"sessionPhase": "FAILED"}}})
    wire = failed.to_json_dict()
    assert wire["sessionPhase"] == "FAILED"
    assert ProfilerSession.from_json({**wire, "sessionPhase": "SUCCEEDED"}) == failed
    assert ProfilerSession.from_json({"sessionPhase": "not even a phase"}).session_phase is SessionPhase.ACTIVE


def _analysed(session_id: str, created: str, step_time_ms: float) -> ProfilerSession:
    return ProfilerSession.from_json({
        "name": f"projects/p/locations/l/machineLearningRuns/r1/profilerSessions/{session_id}", "createTime": created,
        "analysis": {"state": "DONE", "health": "OPTIMAL", "stepTimeMs": step_time_ms, "topFinding": "P2 x",
                     "endTime": "2026-01-02T00:00:00Z"}})


def test_the_run_keeps_the_analysis_of_its_newest_analysed_session():
    run = MachineLearningRun(name="projects/p/locations/l/machineLearningRuns/r1")
    old, new = _analysed("old", "2026-01-01T00:00:00Z", 20.0), _analysed("new", "2026-01-01T01:00:00Z", 10.0)
    run.record_analysis(new)
    latest = run.to_json_dict()["latestAnalysis"]
    assert latest == {"profilerSession": new.name, "sessionCreateTime": "2026-01-01T01:00:00.000000Z",
                      "endTime": "2026-01-02T00:00:00.000000Z", "health": "OPTIMAL", "stepTimeMs": 10.0,
                      "topFinding": "P2 x"}
    run.record_analysis(old)  # an older session analysed again later does not take its place
    assert run.latest_analysis.profiler_session == new.name
    new.analysis.step_time_ms = 9.0
    run.record_analysis(new)  # the same session analysed again does
    assert run.latest_analysis.step_time_ms == 9.0


def test_session_folder_is_the_xprof_layout():
    run = MachineLearningRun(name="projects/p/locations/l/machineLearningRuns/r1",
                             artifacts={"gcsPath": "gs://bucket/prefix/"})
    assert run.session_folder("s1") == "gs://bucket/prefix/r1/plugins/profile/s1"
    with pytest.raises(InvalidArgument, match="artifacts.gcsPath"):
        MachineLearningRun(name="projects/p/locations/l/machineLearningRuns/r1").session_folder("s1")


def test_analysis_state_enum_rejects_unknown():
    with pytest.raises(ValueError):
        AnalysisState("FINISHED")
