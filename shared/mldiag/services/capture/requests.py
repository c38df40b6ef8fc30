"""Capture requests: on-demand and snapshot captures, and continuous profiling of a run.

Each request becomes one long-running operation with one task per target
(:mod:`mldiag.services.capture.tasks`), written in one transaction together with the
new session or the run's continuous-profiling state, and announced with one
message per target on ``capture-requests`` through the outbox. Targets are
named by id and must be registered for the run (:mod:`mldiag.services.capture.targets`).

The managed product's rules hold: one continuous profiling per run; no
on-demand capture while it is on (409: the profiler server runs one session at
a time); snapshots only while it is on, at its fixed tracer levels (device
only).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, Protocol, TypeVar

from pydantic import Field, ValidationError, field_validator

from mldiag.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, invalid_argument
from mldiag.domain.messages import CaptureTaskRequest
from mldiag.domain.names import SESSIONS, RunName
from mldiag.domain.resources import (
    ContinuousProfiling,
    DeviceTracerLevel,
    HostTracerLevel,
    Kind,
    MachineLearningRun,
    Operation,
    OperationMetadata,
    ProfilerSession,
    ProfilerTarget,
    PythonTracerLevel,
    SessionPhase,
    TargetSession,
    TargetState,
)
from mldiag.domain.types import CamelModel, Duration, bounded_duration
from mldiag.domain.clock import format_timestamp
from mldiag.ports import Transaction
from mldiag.services import unit_of_work
from mldiag.services.capture import tasks
from mldiag.services.capture.targets import MAX_TARGETS_PER_RUN, select_targets
from mldiag.services.dependencies import Configured, Publishing, Stored
from mldiag.services.resources.sessions import session_location
from mldiag.services.unit_of_work import UnitOfWork


class CaptureRequestPorts(Stored, Publishing, Configured, Protocol):
    """What accepting a capture request uses."""


MIN_DURATION = timedelta(milliseconds=100)
MAX_DURATION = timedelta(minutes=5)
DEFAULT_DURATION = timedelta(seconds=2)
FALLBACK_ON_DEMAND = "on-demand"


class CaptureRequest(CamelModel):
    """The body of ``profilerSessions:capture``."""

    kind: Kind = Kind.KIND_ON_DEMAND
    profiler_targets: list[str] = Field(default_factory=list)
    duration: Duration = DEFAULT_DURATION
    host_tracer_level: HostTracerLevel | None = None
    device_tracer_level: DeviceTracerLevel | None = None
    python_tracer_level: PythonTracerLevel | None = None
    fallback: Literal["", "on-demand"] = ""
    auto_captured: bool = False
    monitored_events: list[str] = Field(default_factory=list)

    @field_validator("kind")
    @classmethod
    def _capturable(cls, kind: Kind) -> Kind:
        if kind not in (Kind.KIND_ON_DEMAND, Kind.KIND_SNAPSHOT):
            raise ValueError("a capture is KIND_ON_DEMAND or KIND_SNAPSHOT")
        return kind

    @field_validator("duration")
    @classmethod
    def _bounded(cls, duration: timedelta) -> timedelta:
        return bounded_duration(duration, MIN_DURATION, MAX_DURATION)


class ContinuousRequest(CamelModel):
    """The body of ``machineLearningRuns/R:startContinuousProfiling``."""

    profiler_targets: list[str] = Field(default_factory=list)
    device_tracer_level: DeviceTracerLevel = DeviceTracerLevel.DEVICE_TRACER_LEVEL_ENABLED


Body = TypeVar("Body", bound=CamelModel)


def parse(model: type[Body], body: dict[str, Any]) -> Body:
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise invalid_argument(error) from None


def _ids(targets: list[ProfilerTarget]) -> list[str]:
    return [t.name.rsplit("/", 1)[-1] for t in targets]


def _new_operation(services: CaptureRequestPorts, run_name: RunName, target: str, verb: str) -> Operation:
    return Operation(
        name=run_name.parent.operation(f"operation-{uuid.uuid4().hex}"),
        metadata=OperationMetadata(create_time=services.now(), target=target, verb=verb),
    )


def _current_run(services: CaptureRequestPorts, transaction: Transaction, run_name: RunName) -> MachineLearningRun:
    run = services.runs.find_in(transaction, str(run_name))
    if run is None:
        raise NotFound(f"{run_name} was deleted")
    return run


def _refuse_while_continuous(run: MachineLearningRun) -> None:
    state = run.continuous_profiling
    if state is not None:
        raise AlreadyExists(
            f"continuous profiling is active for run {run.id} (since {format_timestamp(state.start_time)}, "
            f"targets {', '.join(state.profiler_targets)}), and a profiler server runs one session at a time: "
            "take a snapshot (--kind snapshot) or stop continuous profiling first")


def capture(services: CaptureRequestPorts, run_name: RunName, session_id: str, request: CaptureRequest) -> Operation:
    """Create the session (every target ACTIVE) and start capturing it; returns the pending operation."""
    run = services.runs.get(str(run_name))
    if not run.artifacts.gcs_path:
        raise FailedPrecondition(f"run {run.id} has no artifacts.gcsPath: a capture needs a place to store profiles")
    snapshot = request.kind is Kind.KIND_SNAPSHOT
    if snapshot:
        host, device, python = _snapshot_levels(run, request)
        wanted = request.profiler_targets or _continuous_targets(run)
    else:
        _refuse_while_continuous(run)
        host = request.host_tracer_level or HostTracerLevel.HOST_TRACER_LEVEL_INFO
        device = request.device_tracer_level or DeviceTracerLevel.DEVICE_TRACER_LEVEL_ENABLED
        python = request.python_tracer_level or PythonTracerLevel.PYTHON_TRACER_LEVEL_DISABLED
        wanted = request.profiler_targets
    targets = select_targets(services, run_name, wanted)
    ids = _ids(targets)
    now = services.now()
    session_id = session_id or now.strftime("%Y%m%d_%H%M%S_%f")
    name = str(run_name.child(SESSIONS, session_id))
    folder, dashboard = session_location(services.settings, run, session_id)
    session = ProfilerSession(
        name=name, kind=request.kind, profiler_targets=ids,
        target_sessions={t: TargetSession(start_time=now, session_phase=SessionPhase.ACTIVE) for t in ids},
        duration=request.duration, host_tracer_level=host, device_tracer_level=device,
        python_tracer_level=python, storage_folder_uri=folder, dashboard_uri=dashboard,
        auto_captured=request.auto_captured, monitored_events=request.monitored_events,
    )
    operation = _new_operation(services, run_name, name, "capture")
    action = tasks.Action.SNAPSHOT if snapshot else tasks.Action.TRACE
    work = [tasks.new_task(
        operation.name, str(run_name), target.name.rsplit("/", 1)[-1], ids, action, now, session=name,
        duration_ms=int(request.duration.total_seconds() * 1000), host_tracer_level=host,
        device_tracer_level=device, python_tracer_level=python, agent=target.agent,
        fallback_on_demand=request.fallback == FALLBACK_ON_DEMAND,
    ) for target in targets]

    def write(transaction: Transaction) -> None:
        current = _current_run(services, transaction, run_name)
        if services.sessions.find_in(transaction, name) is not None:
            raise AlreadyExists(f"{name} already exists", resource_name=name)
        if snapshot:
            _snapshot_levels(current, request)
        else:
            _refuse_while_continuous(current)
        services.sessions.create_in(transaction, session)

    return _submit(services, operation, work, write)


def _continuous_targets(run: MachineLearningRun) -> list[str]:
    return list(run.continuous_profiling.profiler_targets) if run.continuous_profiling else []


def _snapshot_levels(run: MachineLearningRun, request: CaptureRequest) -> tuple[
        HostTracerLevel, DeviceTracerLevel, PythonTracerLevel]:
    """The continuous profiling's own levels; a request for others is refused (they are fixed while on)."""
    state = run.continuous_profiling
    if state is None:
        raise FailedPrecondition(f"continuous profiling is not active for run {run.id}: start it "
                                 "(start-continuous-profiling) or capture on demand")
    levels = (HostTracerLevel.HOST_TRACER_LEVEL_DISABLED, state.device_tracer_level,
              PythonTracerLevel.PYTHON_TRACER_LEVEL_DISABLED)
    asked = (request.host_tracer_level, request.device_tracer_level, request.python_tracer_level)
    if any(a is not None and a != level for a, level in zip(asked, levels)):
        raise FailedPrecondition(
            "tracer levels are fixed while continuous profiling is active: device "
            f"{state.device_tracer_level.name.rsplit('_', 1)[-1]}, host and python tracers DISABLED")
    outside = set(request.profiler_targets) - set(state.profiler_targets)
    if outside:
        raise InvalidArgument(f"{', '.join(sorted(outside))} not under continuous profiling "
                              f"(targets: {', '.join(state.profiler_targets)})", field="profilerTargets")
    return levels


def start_continuous(services: CaptureRequestPorts, run_name: RunName, request: ContinuousRequest) -> Operation:
    """Turn continuous profiling on for the run's targets; 409 if it is on already."""
    _refuse_while_continuous(services.runs.get(str(run_name)))
    targets = select_targets(services, run_name, request.profiler_targets)
    ids = _ids(targets)
    now = services.now()
    operation = _new_operation(services, run_name, str(run_name), "startContinuousProfiling")
    work = [tasks.new_task(operation.name, str(run_name), target_id, ids, tasks.Action.START, now,
                           device_tracer_level=request.device_tracer_level, agent=target.agent)
            for target_id, target in zip(ids, targets)]

    def write(transaction: Transaction) -> None:
        current = _current_run(services, transaction, run_name)
        _refuse_while_continuous(current)
        updated = current.model_copy(deep=True)
        updated.continuous_profiling = ContinuousProfiling(
            profiler_targets=ids, device_tracer_level=request.device_tracer_level, start_time=now,
            operation=operation.name)
        services.runs.save_in(transaction, current, updated)

    return _submit(services, operation, work, write)


def stop_continuous(services: CaptureRequestPorts, run_name: RunName) -> Operation:
    """Turn continuous profiling off on every target it runs on (targets gone meanwhile are skipped)."""
    run = services.runs.get(str(run_name))
    if run.continuous_profiling is None:
        raise FailedPrecondition(f"continuous profiling is not active for run {run.id}")
    registered = {t.name.rsplit("/", 1)[-1]: t
                  for t in services.targets.list(str(run_name), page_size=MAX_TARGETS_PER_RUN).items}
    targets = [registered[t] for t in run.continuous_profiling.profiler_targets
               if t in registered and registered[t].state is TargetState.ACTIVE]
    ids = _ids(targets)
    now = services.now()
    operation = _new_operation(services, run_name, str(run_name), "stopContinuousProfiling")
    work = [tasks.new_task(operation.name, str(run_name), target_id, ids, tasks.Action.STOP, now, agent=target.agent)
            for target_id, target in zip(ids, targets)]

    def write(transaction: Transaction) -> None:
        current = _current_run(services, transaction, run_name)
        if current.continuous_profiling is None:
            raise FailedPrecondition(f"continuous profiling is not active for run {current.id}")
        updated = current.model_copy(deep=True)
        updated.continuous_profiling = None
        services.runs.save_in(transaction, current, updated)

    return _submit(services, operation, work, write)


def _outbox_key(task: tasks.CaptureTask) -> str:
    return f"capture:{task.key}"


def _submit(services: CaptureRequestPorts, operation: Operation, work: list[tasks.CaptureTask],
            write: Callable[[Transaction], None]) -> Operation:
    """Commit ``write`` (reads first), the operation, its tasks and their messages in one unit of work."""
    now = services.now()
    if not work:
        operation.done = True
        operation.metadata.end_time = now
        operation.response = {"targets": {}}

    def transact(unit: UnitOfWork) -> Operation:
        write(unit.transaction)
        created = unit.operations.create(operation)
        for task in work:
            tasks.stage(unit.transaction, task)
            message = CaptureTaskRequest(task=task.key, operation=task.operation, target=task.target,
                                         session=task.session, action=task.action.value, run=task.run,
                                         agent=task.agent)
            unit.publish(_outbox_key(task), message.outgoing())
        return created

    return unit_of_work.run(services, transact)
