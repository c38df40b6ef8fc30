"""Machine learning runs: create, read, list, update (update_mask + etag), delete.

Whichever path a run arrives by (API, CLI, SDK), :func:`normalize` applies the
server's rules: ``endTime`` is stamped when the phase becomes final; an ended
run that becomes ACTIVE again (its workload started once more) loses its
``endTime`` and counts the restart (``restartCount``, ``lastRestartTime``); and a
``gcsPath`` that names a local bucket folder (a workload next to ``mldiag up``
writes profiles there) is stored as the ``gs://`` URI it stands for, and must
lie in a bucket of the deployment (``MLDIAG_BUCKET`` and ``MLDIAG_OWNED_BUCKETS``):
captures write there, so a run may not send them elsewhere. Deleting a run deletes the records of its sessions,
targets and monitored events; the profiles in the bucket stay where they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from mldiag.domain.errors import InvalidArgument, NotFound, PermissionDenied
from mldiag.domain.names import LocationName, RunName, is_id, parse_run
from mldiag.domain.resources import MachineLearningRun, ProfilerTarget, RunPhase, TargetState
from mldiag.ports import LocalBuckets, Where
from mldiag.services import fan_out, unit_of_work
from mldiag.services.capture.targets import MAX_TARGETS_PER_RUN
from mldiag.services.dependencies import Blobs, Configured, Stored
from mldiag.services.repository import Repository
from mldiag.services.resources.masks import apply_update, assign
from mldiag.services.unit_of_work import Repositories


class RunPorts(Stored, Blobs, Configured, Protocol):
    """What managing runs uses."""


# The fields a client may set; the rest (name, times, etag, state) belong to the server.
MUTABLE_FIELDS = frozenset({
    "displayName", "runSet", "labels", "configs", "tools", "artifacts", "orchestrator",
    "workloadDetails", "runPhase", "logicalId", "clusterId", "creator",
})

# A display name several runs share is refused with this many of their ids shown.
MAX_CANDIDATES_SHOWN = 5


def find_named(services: Stored, location: LocationName, reference: str) -> MachineLearningRun:
    """The run ``reference`` names, read as the CLI reads a run: a full name, an id of a run in ``location``,
    else the display name of exactly one run there. :class:`NotFound` when none has it; several give
    :class:`InvalidArgument` naming their ids."""
    if reference.startswith("projects/"):
        return services.runs.get(str(parse_run(reference)))
    if is_id(reference) and (run := services.runs.find(str(location.run(reference)))) is not None:
        return run
    named = services.runs.list(str(location), [Where("displayName", "==", reference)],
                               page_size=MAX_CANDIDATES_SHOWN + 1).items
    if not named:
        raise NotFound(f"run {reference} not found: no run in {location} has it as id or display name")
    if len(named) > 1:
        ids = [run.name.rsplit("/", 1)[-1] for run in named]
        shown = ", ".join(ids[:MAX_CANDIDATES_SHOWN]) + (", …" if len(ids) > MAX_CANDIDATES_SHOWN else "")
        raise InvalidArgument(f"{reference!r} is the display name of several runs (ids {shown}); give the id")
    return named[0]


def normalize(run: MachineLearningRun, services: RunPorts, previous: MachineLearningRun | None = None) -> None:
    """Apply the server-side rules to a run about to replace ``previous`` (in place)."""
    if previous is not None and previous.ended and run.run_phase is RunPhase.ACTIVE:
        run.restart(services.now())
    if run.ended and run.end_time is None:
        run.end_time = services.now()
    gcs_path = run.artifacts.gcs_path
    if gcs_path != (previous.artifacts.gcs_path if previous else ""):
        refuse_escaping_path(gcs_path)
    if gcs_path and not gcs_path.startswith("gs://") and isinstance(services.blobs, LocalBuckets):
        try:
            run.artifacts.gcs_path = services.blobs.uri_for(Path(gcs_path)).rstrip("/")
        except ValueError:
            pass  # a folder outside the buckets: refused below
    if run.artifacts.gcs_path and run.artifacts.gcs_path != (previous.artifacts.gcs_path if previous else ""):
        check_storage_path(run.artifacts.gcs_path, services.settings.storage_buckets)


def refuse_escaping_path(gcs_path: str) -> None:
    """Refuse a storage path with a ``..`` segment (``/`` or ``\\`` apart) or a NUL: captures and analyses
    would write where the path leads, not where it seems to point."""
    if "\x00" in gcs_path or ".." in gcs_path.replace("\\", "/").split("/"):
        raise InvalidArgument(f"the storage path {gcs_path!r} holds '..' or NUL; give the folder itself",
                              field="artifacts.gcsPath")


def check_storage_path(gcs_path: str, buckets: Sequence[str]) -> None:
    """Refuse a storage path outside the deployment's buckets: captures and analyses write there."""
    bucket = gcs_path.removeprefix("gs://").split("/", 1)[0] if gcs_path.startswith("gs://") else ""
    if bucket not in buckets:
        allowed = ", ".join(f"gs://{name}" for name in buckets)
        raise PermissionDenied(f"{gcs_path!r} is not in a bucket of this deployment (allowed: {allowed}; "
                               "an operator adds buckets with MLDIAG_OWNED_BUCKETS)")


def create(services: RunPorts, parent: LocationName, run_id: str, body: dict[str, Any], *,
           registered_by: str = "") -> MachineLearningRun:
    """A new run ``parent/machineLearningRuns/run_id`` from ``body`` (its mutable fields), made by the
    credential ``registered_by`` names (see :mod:`mldiag.services.resources.self_hosted`)."""
    name = str(parent.run(run_id))
    run = apply_update(MachineLearningRun(name=name), body, "", mutable=MUTABLE_FIELDS)
    run.registered_by = registered_by
    normalize(run, services)
    return services.runs.create(run)


def update(
    services: RunPorts,
    name: RunName,
    body: dict[str, Any],
    update_mask: str,
    *,
    allow_missing: bool = False,
    registered_by: str = "",
) -> MachineLearningRun:
    """Apply the masked fields of ``body``; the body's ``etag``, when set, must be current.

    With ``allow_missing`` a run that does not exist is created instead (AIP-134 upsert), by ``registered_by``.
    """
    etag = str(body.get("etag") or "")

    def mutate(run: MachineLearningRun) -> None:
        updated = apply_update(run, body, update_mask, mutable=MUTABLE_FIELDS)
        normalize(updated, services, run)
        assign(run, updated)

    try:
        updated = unit_of_work.change(services, lambda unit: unit.runs.update(str(name), mutate, etag=etag))
    except NotFound:
        if not allow_missing:
            raise
        return create(services, name.parent, name.run, body, registered_by=registered_by)
    targets_follow(services, updated)
    return updated


def targets_follow(services: Stored, run: MachineLearningRun) -> None:
    """Targets registered without a node agent follow their run: GONE once it has ended (the workload that served
    them ended with it), ACTIVE again when it starts again. A node agent's targets follow its heartbeats.

    Called after every update of the run, not only when its phase changes, so that a redelivered update mends
    targets a crash left behind between the run's commit and theirs."""
    wanted = TargetState.GONE if run.ended else TargetState.ACTIVE

    def follow(target: ProfilerTarget) -> None:
        if not target.agent:
            target.state = wanted

    for target in services.targets.list(run.name, page_size=MAX_TARGETS_PER_RUN).items:
        if not target.agent and target.state is not wanted:

            def work(unit: Repositories, name: str = target.name) -> None:
                unit.targets.update(name, follow)

            unit_of_work.change(services, work)


def delete(services: RunPorts, name: RunName, *, etag: str = "") -> None:
    """Delete the run (etag-checked when given), then its children's records."""
    run_name = str(name)
    unit_of_work.change(services, lambda unit: unit.runs.delete(run_name, etag=etag))
    while sessions := services.sessions.list(run_name, page_size=500).items:
        for session in sessions:
            fan_out.forget(services.store, session.name)
            _delete(services, services.sessions, session.name)
    for children in (services.targets, services.monitored_events):
        while page := children.list(run_name, page_size=500).items:
            for child in page:
                _delete(services, children, child.name)


def _delete(services: Stored, repository: Repository[Any], name: str) -> None:
    unit_of_work.change(services, lambda unit: repository.within(unit.transaction).delete(name))
