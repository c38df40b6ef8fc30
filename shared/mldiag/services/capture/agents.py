"""The control plane's side of the node agent: heartbeats register targets; agents pull their capture tasks.

The protocol is plain HTTP against the control plane, the same in the embedded
setup and in the cloud (no Pub/Sub subscription per node, no inbound port on
the node):

* ``POST .../machineLearningRuns/R/profilerTargets/T:heartbeat`` registers or
  refreshes a target the agent serves; a target whose heartbeats stop for
  :data:`GONE_AFTER` is marked GONE by maintenance (:func:`mark_gone`), and its
  open tasks fail as unreachable;
* ``POST .../captureTasks:claim`` leases the agent's pending tasks;
* ``POST .../captureTasks:complete`` records a task's outcome once the agent
  has uploaded what it captured;
* ``GET /v1alpha/agentConfig`` (an operator route: the installation's, behind
  the credential) tells an agent where to upload: the control plane's own blob
  store, so an agent next to ``mldiag up --data X`` writes under X whatever its
  own environment says.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from pydantic import Field

from mldiag.config import Settings
from mldiag.domain.errors import NotFound, PermissionDenied
from mldiag.domain.names import TARGETS, LocationName, RunName, validate_id
from mldiag.domain.resources import ProfilerTarget, TargetState
from mldiag.domain.types import CamelModel
from mldiag.domain.capture import split_address
from mldiag.domain.clock import format_timestamp
from mldiag.ports import Where
from mldiag.services import unit_of_work
from mldiag.services.capture import tasks
from mldiag.services.capture.requests import parse
from mldiag.services.dependencies import Blobs, Publishing, Stored
from mldiag.services.unit_of_work import Repositories, UnitOfWork


class AgentPorts(Stored, Publishing, Blobs, Protocol):
    """What serving the node agents uses."""


GONE_AFTER = timedelta(seconds=60)
MAX_CLAIM = 64


class Heartbeat(CamelModel):
    agent: str
    hostname: str
    node_index: int = Field(default=0, ge=0)
    is_master: bool = False
    profiler_address: str


class Claim(CamelModel):
    agent: str
    max_tasks: int = Field(default=16, ge=1, le=MAX_CLAIM)


class Completion(CamelModel):
    agent: str
    task: str
    result: dict[str, Any] = Field(default_factory=dict)


def heartbeat(services: AgentPorts, run_name: RunName, target_id: str, body: dict[str, Any]) -> ProfilerTarget:
    """Register the target (or refresh it, bringing it back from GONE) as served by the agent."""
    beat = parse(Heartbeat, body)
    validate_id(beat.agent, field="agent")
    split_address(beat.profiler_address)
    services.runs.get(str(run_name))
    name = str(run_name.child(TARGETS, target_id))

    def beat_on(target: ProfilerTarget) -> None:
        target.hostname, target.node_index, target.is_master = beat.hostname, beat.node_index, beat.is_master
        target.profiler_address, target.agent = beat.profiler_address, beat.agent
        target.state, target.last_heartbeat_time = TargetState.ACTIVE, services.now()

    def work(unit: UnitOfWork) -> ProfilerTarget:
        return unit.targets.mutate(name, beat_on, new=lambda: ProfilerTarget(name=name))[0]

    return unit_of_work.run(services, work)


def _in(location: LocationName, task: tasks.CaptureTask) -> bool:
    return task.run.startswith(f"{location}/")


def claim(services: AgentPorts, location: LocationName, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Lease up to ``maxTasks`` of the agent's open tasks in ``location``; each with its session's folder."""
    request = parse(Claim, body)
    now = services.now()
    candidates = [t for t in tasks.open_tasks(services, Where("agent", "==", request.agent))
                  if _in(location, t) and t.claimable(now)]
    claimed = []
    for candidate in candidates[:request.max_tasks]:
        task = tasks.claim(services, candidate.key)
        if task is None:
            continue
        session = services.sessions.find(task.session) if task.session else None
        claimed.append({"task": task.to_json_dict(),
                        "sessionFolder": session.storage_folder_uri if session is not None else ""})
    return claimed


def complete(services: AgentPorts, location: LocationName, body: dict[str, Any]) -> tasks.CaptureTask:
    """Record the outcome an agent reports for a task it claimed."""
    completion = parse(Completion, body)
    task = tasks.load(services, completion.task)
    if task is None or not _in(location, task):
        raise NotFound(f"capture task {completion.task} not found")
    if task.agent != completion.agent:
        raise PermissionDenied(f"capture task {task.key} belongs to node agent {task.agent or '(none)'}")
    return tasks.finish(services, task.key, tasks.TaskResult.from_json(completion.result)) or task


def agent_config(settings: Settings) -> dict[str, Any]:
    """What an agent needs to upload where this control plane reads: its backend and that backend's place."""
    if settings.backend == "gcp":
        return {"storage": {"backend": "gcp", "project": settings.project}}
    return {"storage": {"backend": "embedded", "dataDir": str(settings.data_dir)}}


def mark_gone(services: AgentPorts) -> int:
    """Mark agent-served targets GONE whose last heartbeat is older than :data:`GONE_AFTER`."""
    cutoff = services.now() - GONE_AFTER
    stale = services.targets.find_where([Where("lastHeartbeatTime", "<", format_timestamp(cutoff))], limit=1000)

    def expire(target: ProfilerTarget) -> None:
        if target.last_heartbeat_time is not None and target.last_heartbeat_time < cutoff:  # no fresher beat
            target.state = TargetState.GONE

    gone = 0
    for target in stale:
        if target.agent and target.state is TargetState.ACTIVE:

            def work(unit: Repositories, name: str = target.name) -> bool:
                return unit.targets.update(name, expire).state is TargetState.GONE

            gone += unit_of_work.change(services, work)
    return gone
