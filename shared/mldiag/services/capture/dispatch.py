"""The ``dispatch_capture`` handler: a message on ``capture-requests`` names a task; run it.

The message carries the task's key and nothing the capture trusts: the task
was written by the request's transaction, and the address comes from the
run's registered target (:mod:`mldiag.services.capture.targets`), resolved and checked
once, and the capture dials the checked IP address. Tasks of targets
served by a node agent are left for that agent to claim.

Multi-host profiles are only comparable when they cover the same window, so
the first delivery of an operation claims every direct task of it that is
still pending and captures them all at once; the deliveries for the others
then find their task taken and acknowledge.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import structlog
from mldiag.domain.capture import CaptureFailed, Failure
from mldiag.domain.errors import InvalidArgument, PermanentFailure
from mldiag.domain.messages import CaptureTaskRequest
from mldiag.services.capture import tasks
from mldiag.services.capture.execute import Executor
from mldiag.services.capture.targets import resolve_address
from mldiag.services.dependencies import Blobs, Dialling, Publishing, Stored


class DispatchPorts(Stored, Publishing, Blobs, Dialling, Protocol):
    """What dispatching a capture task uses."""


MAX_PARALLEL_CAPTURES = 32

log = structlog.get_logger(__name__)


def dispatch(services: DispatchPorts, request: CaptureTaskRequest) -> str:
    """Handle one capture request; returns a one-line account for the event archive."""
    key = request.task
    task = tasks.load(services, key)
    if task is None:
        raise PermanentFailure(f"no capture task {key!r}; capture requests come from the control plane only")
    if task.final:
        return f"{key} already {task.state.value}"
    if task.agent:
        return f"{key} waits for node agent {task.agent}"
    claimed = [t for t in (tasks.claim(services, k) for k in _direct_siblings(services, task)) if t is not None]
    if not any(t.key == key for t in claimed):
        return f"{key} is being captured by another delivery"
    with ThreadPoolExecutor(max_workers=min(len(claimed), MAX_PARALLEL_CAPTURES),
                            thread_name_prefix="capture") as pool:
        results = list(pool.map(lambda t: (t, run_direct(services, t)), claimed))
    for claimed_task, result in results:
        tasks.finish(services, claimed_task.key, result)
    return "; ".join(f"{t.target}: {r.error or 'captured'}" for t, r in results)


def _direct_siblings(services: DispatchPorts, task: tasks.CaptureTask) -> list[str]:
    """This task's key first, then the other pending tasks of its operation that no agent serves."""
    others = [t for t in task.operation_targets if t != task.target]
    keys = [task.key]
    for target in others:
        sibling = tasks.load(services, tasks.task_key(task.operation, target))
        if sibling is not None and not sibling.agent and not sibling.final:
            keys.append(sibling.key)
    return keys


def run_direct(services: DispatchPorts, task: tasks.CaptureTask) -> tasks.TaskResult:
    """Capture from the target's registered address, the server writing straight into the bucket."""
    try:
        address, folder = _resolve(services, task)
        log.info("capturing", task=task.key, action=task.action.value, address=address)
        return Executor(services.blobs, write_direct=True).run(task, services.profiler(address), folder)
    except CaptureFailed as failed:
        return tasks.TaskResult.failed(failed)
    except Exception as error:  # noqa: BLE001 - recorded on the target rather than lost with the thread
        log.exception("capture task crashed", task=task.key)
        return tasks.TaskResult.failed(CaptureFailed(Failure.ERROR, f"{type(error).__name__}: {error}"))


def _resolve(services: DispatchPorts, task: tasks.CaptureTask) -> tuple[str, str]:
    """The checked address to dial for the registered one, and the session folder (``""`` for continuous
    profiling)."""
    target = services.targets.find(f"{task.run}/profilerTargets/{task.target}")
    if target is None:
        raise CaptureFailed(Failure.ERROR, f"profiler target {task.target} was deleted")
    session = services.sessions.find(task.session) if task.session else None
    if task.session and session is None:
        raise CaptureFailed(Failure.ERROR, f"profiler session {task.session_id} was deleted")
    try:
        address = resolve_address(target.profiler_address)
    except InvalidArgument as refused:
        raise CaptureFailed(Failure.ERROR, f"refusing to connect to the registered address: {refused}") from None
    except OSError as error:
        raise CaptureFailed(Failure.UNREACHABLE, f"cannot resolve {target.profiler_address} "
                            f"({error.strerror or error})") from None
    return address, session.storage_folder_uri if session is not None else ""
