"""Capture requests: what one request writes, and the managed rules of continuous profiling."""

from __future__ import annotations

import json

import pytest

from mldiag.services.capture import tasks
from mldiag.services import unit_of_work
from mldiag.config import CAPTURE_REQUESTS
from mldiag.domain import (
    AlreadyExists, FailedPrecondition, InvalidArgument, Kind, SessionPhase,
)
from mldiag.domain.resources import DeviceTracerLevel, HostTracerLevel
from mldiag.services.capture.requests import CaptureRequest, ContinuousRequest, capture, parse, start_continuous, stop_continuous


def messages(services) -> list[dict]:
    return [json.loads(m.data) for m in services.bus.published[CAPTURE_REQUESTS]]


def test_a_capture_writes_the_session_an_operation_and_one_task_and_message_per_target(embedded, run, add_target):
    add_target("h-0")
    add_target("h-1", agent="node-b")
    request = parse(CaptureRequest, {"duration": "1500ms", "hostTracerLevel": "verbose"})
    operation = capture(embedded, run, "s1", request)

    assert not operation.done and operation.metadata.verb == "capture"
    session = embedded.sessions.get(f"{run}/profilerSessions/s1")
    assert session.kind is Kind.KIND_ON_DEMAND
    assert session.profiler_targets == ["h-0", "h-1"]
    assert {t: s.session_phase for t, s in session.target_sessions.items()} == {
        "h-0": SessionPhase.ACTIVE, "h-1": SessionPhase.ACTIVE}
    assert session.storage_folder_uri == "gs://profiles/runs/r1/plugins/profile/s1"
    assert session.host_tracer_level is HostTracerLevel.HOST_TRACER_LEVEL_VERBOSE

    work = {t: tasks.load(embedded, tasks.task_key(operation.name, t)) for t in ("h-0", "h-1")}
    assert work["h-0"].duration_ms == 1500 and work["h-0"].levels.host == 3 and work["h-0"].agent == ""
    assert work["h-1"].agent == "node-b" and work["h-1"].operation_targets == ["h-0", "h-1"]
    # Messages name the task; nothing in them is an address.
    assert sorted(m["task"] for m in messages(embedded)) == sorted(t.key for t in work.values())
    assert all("Address" not in json.dumps(m) for m in messages(embedded))
    assert embedded.store.query("outbox") == []


def test_a_session_id_is_used_once(embedded, run, add_target):
    add_target("h-0")
    capture(embedded, run, "s1", CaptureRequest())
    with pytest.raises(AlreadyExists):
        capture(embedded, run, "s1", CaptureRequest())


@pytest.mark.parametrize(("body", "field"), [
    ({"duration": "50ms"}, "duration"),
    ({"duration": "6m"}, "duration"),
    ({"kind": "programmatic"}, "kind"),
    ({"fallback": "snapshot"}, "fallback"),
    ({"hostTracerLevel": "loud"}, "hostTracerLevel"),
])
def test_bad_requests_name_the_field(body, field):
    with pytest.raises(InvalidArgument, match=field):
        parse(CaptureRequest, body)


@pytest.mark.parametrize(("duration", "message"), [
    ("50ms", "duration: must be at least 100ms"),
    ("6m", "duration: must be at most 5m"),
    ("99999999999999999s", "duration: too long a duration: '99999999999999999s' (at most 3652500d)"),
    (1e308, "duration: too long a duration: 1e+308 (at most 3652500d)"),
    ("soon", "duration: not a duration: 'soon' (numbers with units ms, s, m, h or d, largest first,"),
])
def test_a_bad_duration_is_one_clear_line(duration, message):
    with pytest.raises(InvalidArgument) as error:
        parse(CaptureRequest, {"duration": duration})
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_run_without_a_gcs_path_cannot_be_captured(embedded, add_target, run):
    unit_of_work.change(embedded, lambda unit: unit.runs.update(str(run),
                                                                lambda r: setattr(r.artifacts, "gcs_path", "")))
    add_target("h-0")
    with pytest.raises(FailedPrecondition, match="gcsPath"):
        capture(embedded, run, "s1", CaptureRequest())


def test_continuous_profiling_is_one_per_run_and_blocks_on_demand_captures(embedded, run, add_target):
    add_target("h-0")
    add_target("h-1")
    start_continuous(embedded, run, ContinuousRequest(profiler_targets=["h-0"]))
    state = embedded.runs.get(str(run)).continuous_profiling
    assert state.profiler_targets == ["h-0"] and state.device_tracer_level is DeviceTracerLevel.DEVICE_TRACER_LEVEL_ENABLED

    with pytest.raises(AlreadyExists, match="continuous profiling is active for run r1") as again:
        start_continuous(embedded, run, ContinuousRequest())
    assert again.value.http_code == 409
    with pytest.raises(AlreadyExists, match="take a snapshot"):
        capture(embedded, run, "s1", CaptureRequest())

    stop_continuous(embedded, run)
    assert embedded.runs.get(str(run)).continuous_profiling is None
    assert not capture(embedded, run, "s1", CaptureRequest()).done


def test_snapshots_need_continuous_profiling_and_keep_its_tracer_levels(embedded, run, add_target):
    add_target("h-0")
    add_target("h-1")
    with pytest.raises(FailedPrecondition, match="not active"):
        capture(embedded, run, "snap", CaptureRequest(kind=Kind.KIND_SNAPSHOT))
    start_continuous(embedded, run, ContinuousRequest(profiler_targets=["h-0"],
                                                      device_tracer_level=DeviceTracerLevel.DEVICE_TRACER_LEVEL_ENABLED))
    with pytest.raises(FailedPrecondition, match="fixed while continuous profiling is active"):
        capture(embedded, run, "snap", parse(CaptureRequest, {"kind": "snapshot", "hostTracerLevel": "info"}))
    with pytest.raises(InvalidArgument, match="h-1 not under continuous profiling"):
        capture(embedded, run, "snap", parse(CaptureRequest, {"kind": "snapshot", "profilerTargets": ["h-1"]}))

    operation = capture(embedded, run, "snap", parse(CaptureRequest, {"kind": "snapshot", "fallback": "on-demand"}))
    session = embedded.sessions.get(f"{run}/profilerSessions/snap")
    assert session.kind is Kind.KIND_SNAPSHOT and session.profiler_targets == ["h-0"]
    assert session.host_tracer_level is HostTracerLevel.HOST_TRACER_LEVEL_DISABLED
    task = tasks.load(embedded, tasks.task_key(operation.name, "h-0"))
    assert task.action is tasks.Action.SNAPSHOT and task.fallback_on_demand


def test_stopping_what_is_not_running_is_refused(embedded, run, add_target):
    add_target("h-0")
    with pytest.raises(FailedPrecondition, match="not active"):
        stop_continuous(embedded, run)
