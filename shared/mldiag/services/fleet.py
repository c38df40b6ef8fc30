"""The fleet view: a record per finished analysis, published beside the notification, and what reads them.

:func:`fleet_record` turns an analysis, its session and its run into a
:class:`~mldiag.domain.fleet.FleetRecord`; :func:`stage_record` puts it in the
outbox, in the transaction that records the analysis, for ``analysis-events``.
The record travels as a binary-mode CloudEvent (the record itself is the
message data, its ``ce-*`` attributes say what it is), which is the shape a
Pub/Sub BigQuery subscription writes to a table as it is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from pydantic import ValidationError

from mldiag.analysis.evidence import Analysis
from mldiag.analysis.host_evidence import HostEvidence, TimeCause
from mldiag.analysis.rules.frameworks import detect
from mldiag.config import ANALYSIS_EVENTS
from mldiag.domain.errors import FailedPrecondition, PermanentFailure
from mldiag.domain.fleet import FLEET_RECORD_TYPE, CauseTime, FindingCost, FleetRecord, Label
from mldiag.domain.messages import message_from_cloud_event
from mldiag.domain.names import parent_of
from mldiag.domain.resources import FindingCategory, MachineLearningRun, Priority, ProfilerSession
from mldiag.domain.types import format_timestamp
from mldiag.ports import FleetRecords, Transaction
from mldiag.services import outbox
from mldiag.services.dependencies import Configured, Fleet, Stored
from mldiag.services.repository import document_key

if TYPE_CHECKING:
    from cloudevents.http import CloudEvent

# The causes of loop time a finding's category is about: its cost is their time.
CATEGORY_CAUSES: dict[FindingCategory, tuple[TimeCause, ...]] = {
    FindingCategory.INPUT_BOUND: (TimeCause.HOST_WORK, TimeCause.WAITING),
    FindingCategory.DISPATCH_OVERHEAD: (TimeCause.DISPATCH,),
    FindingCategory.RECOMPILATION: (TimeCause.COMPILATION,),
    FindingCategory.COMMUNICATION: (TimeCause.COLLECTIVES,),
    FindingCategory.DATA_MOVEMENT: (TimeCause.TRANSFERS,),
}
COSTED_PRIORITIES = (Priority.P0, Priority.P1)


def capture_kind(session: ProfilerSession) -> str:
    if session.auto_captured:
        return "automatic"
    return session.kind.value.removeprefix("KIND_").lower()


def _attribution(hosts: Iterable[HostEvidence]) -> tuple[list[CauseTime], float, float]:
    """Each cause's time summed over hosts, largest first; the loop time and accelerator loop time summed too."""
    ms: dict[TimeCause, float] = defaultdict(float)
    device_ms: dict[TimeCause, float] = defaultdict(float)
    useful: dict[TimeCause, bool] = {}
    loop_ms = loop_device_ms = 0.0
    for host in hosts:
        if host.attribution is None:
            continue
        devices = max(host.devices, 1)
        loop_ms += host.attribution.loop_ms
        loop_device_ms += host.attribution.loop_ms * devices
        for part in host.attribution.parts:
            ms[part.cause] += part.ms
            device_ms[part.cause] += part.ms * devices
            useful[part.cause] = useful.get(part.cause, False) or part.useful
    causes = [CauseTime(cause=cause.value, ms=ms[cause], share=ms[cause] / loop_ms if loop_ms else 0.0,
                        device_ms=device_ms[cause], useful=useful[cause])
              for cause in sorted(ms, key=lambda cause: -ms[cause])]
    return causes, loop_ms, loop_device_ms


def _finding_costs(analysis: Analysis, causes: list[CauseTime], loop_ms: float) -> list[FindingCost]:
    by_cause = {cause.cause: cause.ms for cause in causes}
    costed = []
    for finding in analysis.findings:
        if finding.priority not in COSTED_PRIORITIES:
            continue
        named = CATEGORY_CAUSES.get(finding.category)
        cost = sum(by_cause.get(cause.value, 0.0) for cause in named) if named else None
        costed.append(FindingCost(priority=finding.priority.value, category=finding.category.value,
                                  title=finding.title, cost_ms=cost,
                                  cost_share=cost / loop_ms if cost is not None and loop_ms else None))
    return costed


def fleet_record(analysis: Analysis, session: ProfilerSession, run: MachineLearningRun | None,
                 analyzed_at: datetime) -> FleetRecord:
    """The fleet record of ``session``'s analysis (``run`` is ``None`` when it was deleted meanwhile)."""
    causes, loop_ms, loop_device_ms = _attribution(analysis.hosts)
    lost = [cause for cause in causes if not cause.useful]
    lost_device_ms = sum(cause.device_ms for cause in lost)
    steps = [host.step_ms for host in analysis.hosts if host.step_ms is not None]
    slowest = max(steps, key=lambda distribution: distribution.median, default=None)
    top = analysis.findings[0] if analysis.findings else None
    hardware = analysis.metrics.hardware or next((host.device_type for host in analysis.hosts if host.device_type), "")
    return FleetRecord(
        record_id=f"{session.name}@{session.analysis.generation_set}",
        analyzed_at=analyzed_at,
        run=parent_of(session.name),
        run_display_name=run.display_name if run else "",
        session=session.name,
        generation_set=session.analysis.generation_set,
        session_created_at=session.create_time,
        capture_kind=capture_kind(session),
        status=analysis.status.value,
        top_finding=f"{top.priority.value} {top.title}" if top else "",
        host_count=len(analysis.hosts),
        device_count=sum(host.devices for host in analysis.hosts),
        device_kind=analysis.hosts[0].device_kind.value if analysis.hosts else "",
        hardware=hardware,
        framework=detect(analysis.hosts).value,
        steps=analysis.metrics.steps,
        step_time_ms=analysis.metrics.step_time_ms,
        step_time_mean_ms=slowest.mean if slowest else None,
        step_time_median_ms=slowest.median if slowest else None,
        step_time_p90_ms=slowest.p90 if slowest else None,
        step_time_min_ms=min(d.min for d in steps) if steps else None,
        step_time_max_ms=max(d.max for d in steps) if steps else None,
        mfu=analysis.metrics.mfu,
        busy_fraction=analysis.metrics.busy_fraction,
        loop_ms=loop_ms,
        loop_device_ms=loop_device_ms,
        lost_ms=sum(cause.ms for cause in lost),
        lost_device_ms=lost_device_ms,
        lost_share=lost_device_ms / loop_device_ms if loop_device_ms else None,
        attribution=causes,
        findings=_finding_costs(analysis, causes, loop_ms),
        labels=[Label(key=key, value=value) for key, value in sorted((run.labels if run else {}).items())],
    )


class RecordPorts(Stored, Configured, Protocol):
    """What staging a record uses."""


def stage_record(transaction: Transaction, services: RecordPorts, record: FleetRecord) -> str:
    """Stage ``record`` for ``analysis-events`` in ``transaction``; returns the outbox key."""
    settings = services.settings
    key = f"{ANALYSIS_EVENTS}:{document_key(record.record_id)}:record"
    attributes = {"ce-specversion": "1.0", "ce-type": FLEET_RECORD_TYPE, "ce-id": f"{record.record_id}/record",
                  "ce-source": f"//mldiag/projects/{settings.project}/locations/{settings.location}",
                  "ce-subject": record.session, "ce-time": format_timestamp(record.analyzed_at) or "",
                  "ce-datacontenttype": "application/json"}
    outbox.stage(transaction, key, ANALYSIS_EVENTS, record.row(), attributes, services.now())
    return key


def table(services: Fleet) -> FleetRecords:
    if services.fleet is None:
        raise FailedPrecondition("this deployment keeps no fleet table")
    return services.fleet


def record_delivered(services: Fleet, event: CloudEvent) -> str:
    """The embedded ``record_fleet`` handler body: an ``analysis-events`` record into the fleet table.

    Every other event on the topic is left alone. The row is keyed by session and generation set, so a
    redelivery writes the same row again.
    """
    message = message_from_cloud_event(event)
    if message.attributes.get("ce-type") != FLEET_RECORD_TYPE:
        return f"{message.attributes.get('ce-type') or 'untyped'}: not a fleet record"
    try:
        record = FleetRecord.model_validate(message.json())
    except ValidationError as error:
        raise PermanentFailure(f"a fleet record that does not validate: {error.errors()[0]['msg']}") from None
    table(services).insert(record.row())
    return f"recorded {record.record_id}"
