"""The official SDK's self-hosted contract (``google-cloud-mldiagnostics`` with ``base_url``).

The SDK registers a run with ``PATCH /v1/machineLearningRuns?allow_missing=true``
and a body keyed by its ``logicalId``; it reads the run id from the last segment
of the response's ``name`` and keeps a non-empty ``clusterId``. Later it reports
the workload's state (``STATE_RUNNING|SUCCEEDED|FAILED``) with
``PATCH /v1/machineLearningRuns/{id}?update_mask=workload.state``. Runs arrive
under the configured default project and location, with a stable id derived from
the logical id, so a restarted workload finds its run again. The SDK derives the
logical id from the run's name (a UUID of namespace/workload/cluster, the
workload being the name unless ``DIAGON_WORKLOAD_ID`` says otherwise), so the
same job started again under the same name registers the same run: a
registration of an ended run makes it ACTIVE again and counts the restart
(:func:`mldiag.services.resources.runs.normalize`). Two registrations racing to create
the same run: one wins, the other gets ``ALREADY_EXISTS`` (409), on which the
SDK falls back to a state update, as it expects to.

A run belongs to the credential that registered it (``registeredBy``): through
these routes only that caller, or an administrator (the API token, the open
mode), may change it. All workloads that use one capability URL are one
caller; node agents calling with their own service accounts' ID tokens are
one caller each (see docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

import structlog
from pydantic import Field, ValidationError
from pydantic.alias_generators import to_snake

from mldiag.domain.callers import Caller
from mldiag.domain.errors import Aborted, InvalidArgument, NotFound, PermissionDenied, invalid_argument
from mldiag.domain.names import LocationName, id_from_text, validate_id
from mldiag.domain.resources import MachineLearningRun, RunPhase
from mldiag.domain.types import CamelModel, Timestamp
from mldiag.domain.clock import format_timestamp
from mldiag.services import unit_of_work
from mldiag.services.dependencies import Blobs, Configured, Publishing, Stored
from mldiag.services.resources import runs
from mldiag.services.unit_of_work import UnitOfWork


class SelfHostedPorts(Stored, Publishing, Blobs, Configured, Protocol):
    """What the self-hosted run helpers use."""


SDK_NAME_PREFIX = "machineLearningRuns/"
log = structlog.get_logger(__name__)


class WorkloadState(StrEnum):
    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    STATE_RUNNING = "STATE_RUNNING"
    STATE_SUCCEEDED = "STATE_SUCCEEDED"
    STATE_FAILED = "STATE_FAILED"


_PHASE_OF_STATE = {
    WorkloadState.STATE_RUNNING: RunPhase.ACTIVE,
    WorkloadState.STATE_SUCCEEDED: RunPhase.COMPLETED,
    WorkloadState.STATE_FAILED: RunPhase.FAILED,
}
_STATE_OF_PHASE = {phase: state for state, phase in _PHASE_OF_STATE.items()}


class Workload(CamelModel):
    workload_id: str = ""
    display_name: str = ""
    state: WorkloadState = WorkloadState.STATE_UNSPECIFIED


class SelfHostedRun(CamelModel):
    """The run as the SDK's self-hosted client sends and reads it."""

    name: str = ""
    logical_id: str = ""
    display_name: str = ""
    creator: str = ""
    cluster_id: str = ""
    workload: Workload = Field(default_factory=Workload)
    base_blob_path: str = ""
    create_time: Timestamp = None
    update_time: Timestamp = None
    etag: str = ""


def _custom(run: MachineLearningRun, key: str, value: str) -> None:
    run.workload_details.custom = {**(run.workload_details.custom or {}), key: value}


def _set_state(run: MachineLearningRun, sdk: SelfHostedRun) -> None:
    if sdk.workload.state is WorkloadState.STATE_UNSPECIFIED:
        raise InvalidArgument("a state is required", field="workload.state")
    run.run_phase = _PHASE_OF_STATE[sdk.workload.state]


# update_mask path (as the SDK spells it) → how it changes the stored run.
_MASK: dict[str, Callable[[MachineLearningRun, SelfHostedRun], None]] = {
    "display_name": lambda run, sdk: setattr(run, "display_name", sdk.display_name),
    "creator": lambda run, sdk: setattr(run, "creator", sdk.creator),
    "cluster_id": lambda run, sdk: setattr(run, "cluster_id", sdk.cluster_id),
    "logical_id": lambda run, sdk: setattr(run, "logical_id", sdk.logical_id),
    "workload.workload_id": lambda run, sdk: _custom(run, "workloadId", sdk.workload.workload_id),
    "workload.display_name": lambda run, sdk: _custom(run, "displayName", sdk.workload.display_name),
    "workload.state": _set_state,
    "base_blob_path": lambda run, sdk: setattr(run.artifacts, "gcs_path", sdk.base_blob_path),
}


def _mask_paths(update_mask: str, sdk: SelfHostedRun) -> list[str]:
    if update_mask.strip():
        paths = [".".join(to_snake(part) for part in raw.strip().split(".")) for raw in update_mask.split(",")]
        for path in paths:
            if path not in _MASK:
                raise InvalidArgument(f"{path!r} cannot be updated (allowed: {', '.join(_MASK)})",
                                      field="update_mask")
        return paths
    present = [field for field in sdk.model_fields_set if field != "workload"]
    if "workload" in sdk.model_fields_set:
        present += [f"workload.{field}" for field in sdk.workload.model_fields_set]
    return [path for path in present if path in _MASK]


def _parse(body: dict[str, Any], default_cluster_id: str) -> SelfHostedRun:
    try:
        sdk = SelfHostedRun.model_validate(body)
    except ValidationError as error:
        raise invalid_argument(error) from None
    if not sdk.cluster_id:
        sdk.cluster_id = default_cluster_id
    return sdk


def _check_owner(caller: Caller, run: MachineLearningRun) -> None:
    if caller.admin or run.registered_by == caller.principal:
        return
    # The SDK's runs from before runs recorded their registrant (or from the open mode): the first caller claims it.
    if not run.registered_by and run.logical_id:
        return
    raise PermissionDenied(f"{SDK_NAME_PREFIX}{run.id} was registered by another credential; "
                           "only it, or the API token, may change it")


def upsert(
    services: SelfHostedPorts,
    body: dict[str, Any],
    update_mask: str,
    caller: Caller,
    *,
    run_id: str = "",
    allow_missing: bool = False,
) -> MachineLearningRun:
    """Create or update the run the SDK names (by ``run_id``, else by the body's ``logicalId``) for ``caller``."""
    settings = services.settings
    sdk = _parse(body, settings.cluster_id)
    registration = not run_id  # the SDK's create_ml_run: the workload has just started
    if run_id:
        validate_id(run_id, field="name")
        if sdk.name and sdk.name != SDK_NAME_PREFIX + run_id:
            raise InvalidArgument(f"{sdk.name!r} does not match the run in the path", field="name")
    elif not sdk.logical_id:
        raise InvalidArgument("a run needs a logicalId or an id in the path", field="logicalId")
    elif not allow_missing:
        raise InvalidArgument("creating a run by logicalId needs allow_missing=true", field="allow_missing")
    else:
        run_id = id_from_text(sdk.logical_id)
    name = str(LocationName(settings.project, settings.location).run(run_id))
    paths = _mask_paths(update_mask, sdk)

    def work(unit: UnitOfWork) -> tuple[MachineLearningRun, bool]:
        previous = unit.runs.find(name)
        if previous is None and not allow_missing:
            raise NotFound(f"{SDK_NAME_PREFIX}{run_id} not found")
        if previous is not None:
            _check_owner(caller, previous)
        if previous is not None and sdk.etag and sdk.etag != previous.etag:
            raise Aborted(f"etag mismatch for {SDK_NAME_PREFIX}{run_id}")
        run = previous.model_copy(deep=True) if previous else MachineLearningRun(name=name, cluster_id=sdk.cluster_id)
        if not run.registered_by:
            run.registered_by = caller.principal
        for path in paths:
            _MASK[path](run, sdk)
        if registration:
            run.run_phase = RunPhase.ACTIVE
        runs.normalize(run, services, previous)
        restarted = previous is not None and run.restart_count > previous.restart_count
        return unit.runs.save(previous, run), restarted

    stored, restarted = unit_of_work.run(services, work)
    runs.targets_follow(services, stored)
    if restarted:
        log.info("run started again under the same name: ACTIVE again, its new profiles join it "
                 "(a unique name gives a new run)", run=stored.id, display_name=stored.display_name,
                 restart_count=stored.restart_count)
    return stored


def to_wire(run: MachineLearningRun) -> dict[str, Any]:
    """The run as the SDK reads it: ``name`` is ``machineLearningRuns/<id>``."""
    custom = run.workload_details.custom or {}
    return {
        "name": SDK_NAME_PREFIX + run.id,
        "logicalId": run.logical_id,
        "displayName": run.display_name,
        "creator": run.creator,
        "clusterId": run.cluster_id,
        "workload": {
            "workloadId": custom.get("workloadId", ""),
            "displayName": custom.get("displayName", ""),
            "state": _STATE_OF_PHASE.get(run.run_phase, WorkloadState.STATE_UNSPECIFIED).value,
        },
        "baseBlobPath": run.artifacts.gcs_path,
        "createTime": format_timestamp(run.create_time),
        "updateTime": format_timestamp(run.update_time),
        "etag": run.etag,
    }


def agent_info(services: SelfHostedPorts) -> dict[str, str]:
    """``GET /v1/agent-info``: what the SDK asks a node agent for (``DIAGON_AGENT_URL``)."""
    return {"cluster_id": services.settings.cluster_id}
