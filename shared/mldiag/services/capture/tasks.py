"""Capture tasks: one target's part of one capture request, and where its outcome lands.

A request (a capture, a snapshot, starting or stopping continuous profiling)
is one long-running operation with one task per target, all written in the
request's transaction. A task is executed by whoever claims it — the
``dispatch_capture`` function or the node agent named in ``agent`` — under a
lease, so a redelivered message never runs a capture twice. :func:`finish`
records the outcome in the same transaction everywhere: the task, the target's
entry in the session (``ACTIVE`` → ``SUCCEEDED``/``FAILED`` with the error), the
run's continuous-profiling state, and — once every task of the operation is
final — the operation itself, plus the session's analysis request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

import structlog

from mldiag.domain.capture import DEADLINE_GRACE, CaptureFailed, Failure, TracerLevels
from mldiag.domain.errors import InvalidArgument
from mldiag.domain.layout import XPLANE_SUFFIX
from mldiag.domain.names import short_name
from mldiag.domain.resources import (
    DeviceTracerLevel,
    HostTracerLevel,
    Kind,
    MachineLearningRun,
    Operation,
    ProfilerSession,
    PythonTracerLevel,
    SessionPhase,
    Status,
    TargetSession,
    TargetState,
)
from mldiag.domain.types import CamelModel, Timestamp
from mldiag.domain.clock import format_timestamp
from mldiag.ports import Transaction, Where
from mldiag.services import analysis_requests, unit_of_work
from mldiag.services.dependencies import Blobs, Publishing, Stored
from mldiag.services.unit_of_work import UnitOfWork


class TaskPorts(Stored, Publishing, Blobs, Protocol):
    """What keeping the capture tasks uses."""


COLLECTION = "captureTasks"
# How long a claimed task may run past its duration before another worker may take it over.
LEASE_GRACE = timedelta(minutes=2)
MAX_ERROR_CHARS = 2000

log = structlog.get_logger(__name__)


class Action(StrEnum):
    TRACE = "trace"
    SNAPSHOT = "snapshot"
    START = "start-continuous-profiling"
    STOP = "stop-continuous-profiling"


class TaskState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


OPEN_STATES = (TaskState.PENDING, TaskState.RUNNING)


class CaptureTask(CamelModel):
    key: str
    operation: str
    run: str
    target: str
    operation_targets: list[str]
    action: Action
    session: str = ""
    duration_ms: int = 0
    host_tracer_level: HostTracerLevel = HostTracerLevel.HOST_TRACER_LEVEL_INFO
    device_tracer_level: DeviceTracerLevel = DeviceTracerLevel.DEVICE_TRACER_LEVEL_ENABLED
    python_tracer_level: PythonTracerLevel = PythonTracerLevel.PYTHON_TRACER_LEVEL_DISABLED
    fallback_on_demand: bool = False
    agent: str = ""
    state: TaskState = TaskState.PENDING
    attempts: int = 0
    create_time: Timestamp = None
    lease_expire_time: Timestamp = None
    deadline: Timestamp = None
    end_time: Timestamp = None
    failure: Failure | None = None
    error: str = ""
    note: str = ""

    @property
    def final(self) -> bool:
        return self.state not in OPEN_STATES

    @property
    def levels(self) -> TracerLevels:
        return TracerLevels(self.host_tracer_level.profiler_option, self.device_tracer_level.profiler_option,
                            self.python_tracer_level.profiler_option)

    @property
    def session_id(self) -> str:
        return self.session.rsplit("/", 1)[-1]

    def claimable(self, now: datetime) -> bool:
        return self.state is TaskState.PENDING or (
            self.state is TaskState.RUNNING and self.lease_expire_time is not None and self.lease_expire_time <= now)


def task_key(operation: str, target: str) -> str:
    return f"{operation.rsplit('/', 1)[-1]}:{target}"


def new_task(operation: str, run: str, target: str, operation_targets: list[str], action: Action,
             now: datetime, **fields: Any) -> CaptureTask:
    duration = timedelta(milliseconds=fields.get("duration_ms", 0))
    return CaptureTask(key=task_key(operation, target), operation=operation, run=run, target=target,
                       operation_targets=operation_targets, action=action, create_time=now,
                       deadline=now + duration + DEADLINE_GRACE, **fields)


def stage(transaction: Transaction, task: CaptureTask) -> None:
    transaction.create(COLLECTION, task.key, task.to_json_dict())


def load(services: TaskPorts, key: str) -> CaptureTask | None:
    document = services.store.get(COLLECTION, key)
    return None if document is None else CaptureTask.model_validate(document)


def open_tasks(services: TaskPorts, *where: Where, limit: int = 500) -> list[CaptureTask]:
    documents = services.store.query(COLLECTION, where=[Where("state", "in", [s.value for s in OPEN_STATES]), *where],
                                     limit=limit)
    return [CaptureTask.model_validate(d) for d in documents]


def claim(services: TaskPorts, key: str) -> CaptureTask | None:
    """Take the task for execution under a lease; ``None`` if it is final or held by another worker."""

    def work(unit: UnitOfWork) -> CaptureTask | None:
        document = unit.transaction.get(COLLECTION, key)
        if document is None:
            return None
        task = CaptureTask.model_validate(document)
        now = services.now()
        if not task.claimable(now):
            return None
        task.state = TaskState.RUNNING
        task.attempts += 1
        task.lease_expire_time = now + timedelta(milliseconds=task.duration_ms) + LEASE_GRACE
        unit.transaction.set(COLLECTION, key, task.to_json_dict())
        return task

    return unit_of_work.run(services, work)


@dataclass(frozen=True)
class TaskResult:
    """What executing a task came to; no ``failure`` means it produced what it should."""

    failure: Failure | None = None
    error: str = ""
    note: str = ""
    fell_back: bool = False  # a snapshot came back empty and an on-demand trace was taken instead

    @classmethod
    def failed(cls, failed: CaptureFailed, note: str = "") -> TaskResult:
        return cls(failure=failed.failure, error=str(failed), note=note)

    def to_json(self) -> dict[str, Any]:
        return {"failure": self.failure.value if self.failure else "", "error": self.error, "note": self.note,
                "fellBack": self.fell_back}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskResult:
        failure = str(data.get("failure") or "")
        if failure and failure not in {f.value for f in Failure}:
            raise InvalidArgument(f"{failure!r} is not one of {', '.join(f.value for f in Failure)}",
                                  field="result.failure")
        return cls(failure=Failure(failure) if failure else None, error=str(data.get("error") or "")[:MAX_ERROR_CHARS],
                   note=str(data.get("note") or "")[:MAX_ERROR_CHARS], fell_back=bool(data.get("fellBack")))


def profile_uri(session_folder: str, target: str) -> str:
    return f"{session_folder.rstrip('/')}/{target}{XPLANE_SUFFIX}"


def _verified(services: TaskPorts, task: CaptureTask, result: TaskResult) -> TaskResult:
    """A capture that claims success must have left its profile in the session folder."""
    if result.failure or task.action not in (Action.TRACE, Action.SNAPSHOT):
        return result
    session = services.sessions.find(task.session)
    uri = profile_uri(session.storage_folder_uri if session else "", task.target)
    if session is not None and services.blobs.stat(uri) is not None:
        return result
    return TaskResult.failed(CaptureFailed(Failure.ERROR, f"the capture reported success but {uri} does not "
                                           "exist (can the workload write to the bucket?)"), note=result.note)


def finish(services: TaskPorts, key: str, result: TaskResult) -> CaptureTask | None:
    """Record ``result`` for the task; a no-op (returning ``None``) if the task is already final."""
    task = load(services, key)
    if task is None or task.final:
        return None
    result = _verified(services, task, result)

    def work(unit: UnitOfWork) -> CaptureTask | None:
        document = unit.transaction.get(COLLECTION, key)
        if document is None:
            return None
        task = CaptureTask.model_validate(document)
        if task.final:
            return None
        siblings = [CaptureTask.model_validate(d) for t in task.operation_targets if t != task.target
                    if (d := unit.transaction.get(COLLECTION, task_key(task.operation, t))) is not None]
        operation = unit.operations.find(task.operation)
        session = unit.sessions.find(task.session) if task.session else None
        run = unit.runs.find(task.run) if task.action is Action.START else None

        now = services.now()
        task.state = TaskState.FAILED if result.failure else TaskState.SUCCEEDED
        task.failure, task.error, task.note = result.failure, result.error, result.note
        task.end_time, task.lease_expire_time = now, None
        unit.transaction.set(COLLECTION, key, task.to_json_dict())

        updated_session = _record_in_session(session, task, result, now)
        if run is not None and result.failure and run.continuous_profiling is not None:
            updated_run = run.model_copy(deep=True)
            _drop_failed_start(updated_run, task.target)
            unit.runs.save(run, updated_run)

        everyone = [task, *siblings]
        if operation is not None and not operation.done and all(t.final for t in everyone):
            if updated_session is not None and _every_success_registered(updated_session):
                analysis_requests.request_analysis(unit, updated_session)
            finished = operation.model_copy(deep=True)
            _complete(finished, everyone, updated_session, now)
            unit.operations.save(operation, finished)
        if session is not None and updated_session is not None:
            unit.sessions.save(session, updated_session)
        return task

    finished_task = unit_of_work.run(services, work)
    if finished_task is not None:
        failed = finished_task.state is TaskState.FAILED
        where = short_name(finished_task.session or finished_task.run)
        (log.warning if failed else log.info)(
            f"{finished_task.action.value} of target {finished_task.target} for {where} "
            + ("failed" if failed else "succeeded"),
            notice=True, task=key, state=finished_task.state.value, error=finished_task.error,
            **({"session": finished_task.session} if finished_task.session else {}))
    return finished_task


def _record_in_session(session: ProfilerSession | None, task: CaptureTask, result: TaskResult,
                       now: datetime) -> ProfilerSession | None:
    if session is None:
        return None
    updated = session.model_copy(deep=True)
    entry = updated.target_sessions.get(task.target) or TargetSession(start_time=task.create_time)
    if entry.session_phase is SessionPhase.ACTIVE:
        entry.session_phase = SessionPhase.FAILED if result.failure else SessionPhase.SUCCEEDED
        entry.end_time = now
        entry.error = result.error
    updated.target_sessions[task.target] = entry
    if result.fell_back:
        # The file is an on-demand trace now, taken at the on-demand defaults.
        updated.kind = Kind.KIND_ON_DEMAND
        updated.host_tracer_level = HostTracerLevel.HOST_TRACER_LEVEL_INFO
    return updated


def _every_success_registered(session: ProfilerSession) -> bool:
    """Whether the files of every target that succeeded are in the session (their finalize events arrived)."""
    succeeded = {t for t, e in session.target_sessions.items() if e.session_phase is SessionPhase.SUCCEEDED}
    return bool(succeeded) and succeeded <= set(session.host_files)


def _drop_failed_start(run: MachineLearningRun, target: str) -> None:
    state = run.continuous_profiling
    if state is None:
        return
    state.profiler_targets = [t for t in state.profiler_targets if t != target]
    if not state.profiler_targets:
        run.continuous_profiling = None


def _complete(operation: Operation, tasks: list[CaptureTask], session: ProfilerSession | None, now: datetime) -> None:
    tasks = sorted(tasks, key=lambda t: t.target)
    outcomes = {t.target: {"state": t.state.value, **({"error": t.error} if t.error else {}),
                           **({"note": t.note} if t.note else {})} for t in tasks}
    operation.done = True
    operation.metadata.end_time = now
    failed = [t for t in tasks if t.state is TaskState.FAILED]
    if len(failed) == len(tasks):
        code = (failed[0].failure or Failure.ERROR).status[0]
        summary = "; ".join(f"{t.target}: {t.error}" for t in failed)
        operation.error = Status(code=code, message=f"every target failed — {summary}"[:MAX_ERROR_CHARS],
                                 details=[{"targets": outcomes}])
        return
    operation.response = {"targets": outcomes, **({"session": session.to_json_dict()} if session else {})}


def fail_overdue(services: TaskPorts) -> int:
    """Fail open tasks past their deadline, and agent tasks whose target is gone; returns how many."""
    now = services.now()
    failed = 0
    for task in open_tasks(services):
        if task.agent and _target_gone(services, task):
            result = TaskResult.failed(CaptureFailed(
                Failure.UNREACHABLE, f"node agent {task.agent} serving {task.target} stopped sending heartbeats"))
        elif task.deadline is not None and task.deadline <= now:
            worker = f"node agent {task.agent}" if task.agent else "the capture function"
            result = TaskResult.failed(CaptureFailed(
                Failure.TIMEOUT, f"{worker} had not finished the capture by {format_timestamp(task.deadline)}"))
        else:
            continue
        failed += finish(services, task.key, result) is not None
    return failed


def _target_gone(services: TaskPorts, task: CaptureTask) -> bool:
    target = services.targets.find(f"{task.run}/profilerTargets/{task.target}")
    return target is None or target.state is TargetState.GONE
