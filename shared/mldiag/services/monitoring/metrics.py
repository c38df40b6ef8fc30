"""Metrics ingest: workloads report step times, the degradation analyzer watches them.

Each report runs the run's detector (:mod:`mldiag.domain.degradation`) in one
transaction with its stored state. When a degradation opens, an open
MonitoredEvent message (:class:`~mldiag.domain.messages.AlertMessage`) goes to
``monitoring-alerts``; when the run recovers, a closing one — the same messages an
external monitoring system would send, so ``on_alert`` treats both alike. Messages
leave through the outbox.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import Field

from mldiag.domain.degradation import DetectorParams, DetectorState, MetricPoint, Transition, observe
from mldiag.domain.errors import InvalidArgument, NotFound
from mldiag.domain.messages import AlertMessage
from mldiag.domain.resources import AnalyzerReport, DetectionState, EventType, MonitoredEvent
from mldiag.domain.clock import format_timestamp
from mldiag.services import unit_of_work
from mldiag.services.dependencies import Publishing, Stored
from mldiag.services.repository import document_key
from mldiag.services.run_state import PerRunState, RunState
from mldiag.services.unit_of_work import UnitOfWork


class MetricPorts(Stored, Publishing, Protocol):
    """What taking in metrics uses."""


COLLECTION = "detectors"
ANALYZER = "mldiag-degradation"
MAX_POINTS_PER_REPORT = 10_000


class RunDetector(PerRunState):
    """What is stored per run: its parameters, the detector's memory, and the event it has open."""

    params: DetectorParams = Field(default_factory=DetectorParams)
    state: DetectorState = Field(default_factory=DetectorState)
    opened: int = 0
    open_event: str = ""
    last_step: int = -1


DETECTORS = RunState(COLLECTION, RunDetector)


def alert_message(run_name: str, event_id: str, transition: Transition, reason: str, when: str) -> AlertMessage:
    """The alert that the run's degradation opened (``transition``) or ended at ``when``."""
    detected = transition is Transition.OPENED
    event = MonitoredEvent(
        type=EventType.PERFORMANCE_DEGRADATION,
        display_name=f"Step time degradation of {run_name.rsplit('/', 1)[-1]}",
        analyzer_reports=[AnalyzerReport(
            analyzer=ANALYZER, detection_state=DetectionState.DETECTED if detected else DetectionState.NOT_DETECTED,
            details=reason)],
        **{"start_time" if detected else "end_time": when},
    )
    return AlertMessage(run=run_name, monitored_event_id=event_id, monitored_event=event)


def report_metrics(services: MetricPorts, run_name: str, points: Sequence[MetricPoint],
                   *, new_steps_only: bool = False) -> list[dict[str, Any]]:
    """Feed points to the run's detector; returns the alert messages this report caused.

    ``new_steps_only`` skips points of steps the detector has had already: an OpenTelemetry gauge is
    exported again every interval until the workload sets it anew.
    """
    if not points:
        raise InvalidArgument("report at least one point", field="points")
    if len(points) > MAX_POINTS_PER_REPORT:
        raise InvalidArgument(f"at most {MAX_POINTS_PER_REPORT} points per report", field="points")
    if services.runs.find(run_name) is None:
        raise NotFound(f"{run_name} not found")
    def work(unit: UnitOfWork) -> list[AlertMessage]:
        sent = []
        detector = DETECTORS.load(unit.transaction, run_name)
        for point in points:
            if new_steps_only and point.step <= detector.last_step:
                continue
            detector.last_step = max(detector.last_step, point.step)
            transition = observe(detector.state, point, detector.params)
            if transition is Transition.NONE:
                continue
            if transition is Transition.OPENED:
                detector.opened += 1
                detector.open_event = f"degradation-{detector.opened}"
            when = format_timestamp(point.time or services.now())
            message = alert_message(run_name, detector.open_event, transition, detector.state.last_reason, when)
            key = f"alert:{document_key(run_name)}:{detector.open_event}:{transition.value}"
            unit.publish(key, message.outgoing())
            sent.append(message)
        DETECTORS.save(unit.transaction, run_name, detector)
        return sent

    return [message.wire() for message in unit_of_work.run(services, work)]


def set_detector_params(services: MetricPorts, run_name: str, params: DetectorParams) -> DetectorParams:
    return DETECTORS.update(services, run_name, lambda detector: setattr(detector, "params", params)).params
