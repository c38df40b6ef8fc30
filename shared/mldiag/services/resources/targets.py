"""Profiler targets: the hosts of a run that serve the XProf profiler (``host:9999``).

A target's id defaults to ``<hostname>-<nodeIndex>``, so a host that registers
twice (an agent restart) finds its record instead of adding another.
"""

from __future__ import annotations

from typing import Any

from mldiag.domain.errors import InvalidArgument
from mldiag.domain.names import TARGETS, RunName
from mldiag.domain.resources import ProfilerTarget
from mldiag.services import unit_of_work
from mldiag.services.capture.targets import check_address
from mldiag.services.dependencies import Stored
from mldiag.services.resources.masks import apply_update

MUTABLE_FIELDS = frozenset({"hostname", "nodeIndex", "isMaster", "profilerAddress", "state", "lastHeartbeatTime"})


def create(services: Stored, run_name: RunName, target_id: str, body: dict[str, Any]) -> ProfilerTarget:
    services.runs.get(str(run_name))  # a target belongs to an existing run
    target = apply_update(ProfilerTarget(), body, "", mutable=MUTABLE_FIELDS)
    if target.profiler_address:
        check_address(target.profiler_address)
    if not target_id:
        if not target.hostname:
            raise InvalidArgument("a target needs a hostname (or an explicit id)", field="hostname")
        target_id = ProfilerTarget.default_id(target.hostname, target.node_index)
    target.name = str(run_name.child(TARGETS, target_id))
    return services.targets.create(target)


def delete(services: Stored, name: str, *, etag: str = "") -> None:
    """Delete the target (etag-checked when given)."""
    unit_of_work.change(services, lambda unit: unit.targets.delete(name, etag=etag))
