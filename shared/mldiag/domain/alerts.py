"""Alerts as they arrive on ``monitoring-alerts``, in three shapes, read into one :class:`Alert`.

1. Our MonitoredEvent message (:class:`mldiag.domain.messages.AlertMessage`: the degradation detector and the
   alert webhooks send it; so can any system)::

       {"run": "projects/P/locations/L/machineLearningRuns/R",   # or "R", or a display name
        "monitoredEventId": "degradation-1",
        "monitoredEvent": {"type": "PERFORMANCE_DEGRADATION", "startTime": ..., "endTime": ...,
                           "targets": [...], "analyzerReports": [{"analyzer", "detectionState", ...}]}}

   It is open while it has no ``endTime`` and some report says DETECTED.

2. A Cloud Monitoring incident, as a Pub/Sub notification channel publishes it
   (``{"incident": {...}, "version": "1.2"}``). It names its run through a label
   ``mldiag_run`` (a run id, full name or display name), looked up in this order: the
   metric's labels, the monitored resource's labels, the policy's user labels.
   A label ``mldiag_targets`` (comma-separated target ids) localises it; without
   one, every target of the run is affected. ``state`` is ``open`` or ``closed``.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from mldiag.domain.errors import InvalidArgument, PermanentFailure, invalid_argument
from mldiag.domain.names import id_from_text, validate_id
from mldiag.domain.resources import (
    AnalyzerReport,
    DetectionState,
    EventType,
    MonitoredEvent,
    RecommendedAction,
)
from mldiag.domain.types import CamelModel, Timestamp
from mldiag.domain.clock import format_timestamp

RUN_LABEL = "mldiag_run"
TARGETS_LABEL = "mldiag_targets"
MAX_TEXT = 4000
PROMETHEUS_SOURCES = ("alertmanager", "grafana")


class Alert(CamelModel):
    """One alert, whatever its source: which run, which event, open or closed, and why."""

    run: str  # as the alert names it (an id, a full name or a display name) until the run is looked up
    event_id: str
    open: bool
    type: EventType = EventType.PERFORMANCE_DEGRADATION
    display_name: str = ""
    start_time: Timestamp = None
    end_time: Timestamp = None
    targets: list[str] = Field(default_factory=list)
    reports: list[AnalyzerReport] = Field(default_factory=list)
    source: str = ""


def _run_reference(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PermanentFailure(f"the alert names no run (expected '{RUN_LABEL}' or 'run')")
    return value.strip()


def alert_from_monitored_event(run: Any, event_id: str, event: MonitoredEvent) -> Alert:
    """The alert a MonitoredEvent message (:class:`mldiag.domain.messages.AlertMessage`) reports."""
    detected = any(r.detection_state is DetectionState.DETECTED for r in event.analyzer_reports)
    return Alert(
        run=_run_reference(run), event_id=validate_id(event_id, field="monitoredEventId"),
        open=event.end_time is None and detected, type=event.type, display_name=event.display_name,
        start_time=event.start_time, end_time=event.end_time, targets=event.targets,
        reports=event.analyzer_reports, source="monitoredEvent",
    )


def _label(incident: dict[str, Any], name: str) -> str:
    for holder in (incident.get("metric"), incident.get("resource"), incident):
        labels = (holder or {}).get("labels" if holder is not incident else "policy_user_labels") or {}
        if isinstance(labels, dict) and labels.get(name):
            return str(labels[name])
    return ""


def _targets(label: str) -> list[str]:
    return [target.strip() for target in label.split(",") if target.strip()]


def _epoch(value: Any) -> datetime | None:
    if value in (None, "", 0):
        return None
    try:
        return datetime.fromtimestamp(float(value), timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        raise PermanentFailure(f"incident time {value!r} is not epoch seconds") from None


def alert_from_incident(incident: dict[str, Any]) -> Alert:
    """The alert a Cloud Monitoring incident reports; :class:`PermanentFailure` naming what it lacks."""
    incident_id = str(incident.get("incident_id") or "")
    if not incident_id:
        raise PermanentFailure("the incident has no incident_id")
    state = str(incident.get("state") or "").lower()
    if state not in ("open", "closed"):
        raise PermanentFailure(f"incident state {state!r} is neither 'open' nor 'closed'")
    policy = str(incident.get("policy_name") or "")[:MAX_TEXT]
    condition = str(incident.get("condition_name") or "")[:MAX_TEXT]
    documentation = incident.get("documentation") or {}
    actions = []
    if isinstance(documentation, dict) and documentation.get("content"):
        actions.append(RecommendedAction(description=str(documentation["content"])[:MAX_TEXT],
                                         documentation_url=str(incident.get("url") or "")[:MAX_TEXT]))
    return Alert(
        run=_run_reference(_label(incident, RUN_LABEL)),
        event_id=id_from_text(f"incident-{incident_id}"),
        open=state == "open",
        display_name=" / ".join(filter(None, (policy, condition))) or f"incident {incident_id}",
        start_time=_epoch(incident.get("started_at")),
        end_time=_epoch(incident.get("ended_at")),
        targets=_targets(_label(incident, TARGETS_LABEL)),
        reports=[AnalyzerReport(
            analyzer=f"cloud-monitoring: {policy}"[:MAX_TEXT],
            detection_state=DetectionState.DETECTED if state == "open" else DetectionState.NOT_DETECTED,
            details=str(incident.get("summary") or "")[:MAX_TEXT],
            recommended_actions=actions,
        )],
        source="cloudMonitoringIncident",
    )


class PrometheusAlert(CamelModel):
    """One entry of ``alerts[]`` in an Alertmanager or Grafana webhook notification (other fields ignored)."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: Timestamp
    ends_at: Timestamp = None
    fingerprint: str = ""
    generator_url: str = Field(default="", alias="generatorURL")

    @property
    def identity(self) -> str:
        """The fingerprint the sender computed, else the same idea: a hash of the label set."""
        if self.fingerprint:
            return self.fingerprint
        return hashlib.sha256(json.dumps(self.labels, sort_keys=True).encode()).hexdigest()[:16]


def read_prometheus_alert(raw: Any) -> PrometheusAlert:
    """One ``alerts[]`` entry, checked; :class:`InvalidArgument` names what is wrong with it."""
    try:
        alert = PrometheusAlert.model_validate(raw)
    except ValidationError as error:
        raise invalid_argument(error) from None
    if alert.starts_at is None:
        raise InvalidArgument("the alert has no startsAt", field="startsAt")
    if not alert.labels.get(RUN_LABEL):
        raise InvalidArgument(f"the alert has no label '{RUN_LABEL}' naming its run", field="labels")
    return alert


def prometheus_event_id(source: str, alert: PrometheusAlert) -> str:
    return id_from_text(f"{source}-{alert.identity}-{format_timestamp(alert.starts_at)}")


def _event_from_prometheus(payload: dict[str, Any]) -> Alert:
    source = payload.get("source")
    if source not in PROMETHEUS_SOURCES:
        raise PermanentFailure(f"source {source!r} is not one of {', '.join(PROMETHEUS_SOURCES)}")
    return alert_from_prometheus(str(source), read_prometheus_alert(payload["prometheusAlert"]))


def alert_from_prometheus(source: str, alert: PrometheusAlert) -> Alert:
    """The alert one checked entry of an Alertmanager or Grafana notification reports."""
    firing = alert.status == "firing"
    name = alert.labels.get("alertname", "")
    summary = alert.annotations.get("summary", "")
    details = (alert.annotations.get("description") or summary)[:MAX_TEXT]
    link = alert.annotations.get("runbook_url") or alert.generator_url
    actions = [RecommendedAction(description=details or name or "see the alert's source",
                                 documentation_url=link[:MAX_TEXT])] if link else []
    return Alert(
        run=_run_reference(alert.labels[RUN_LABEL]),
        event_id=prometheus_event_id(source, alert),
        open=firing,
        display_name=(" / ".join(filter(None, (name, summary))) or f"{source} alert {alert.identity}")[:MAX_TEXT],
        start_time=alert.starts_at,
        end_time=None if firing else alert.ends_at,
        targets=_targets(alert.labels.get(TARGETS_LABEL, "")),
        reports=[AnalyzerReport(
            analyzer=f"{source}: {name}"[:MAX_TEXT],
            detection_state=DetectionState.DETECTED if firing else DetectionState.NOT_DETECTED,
            details=details,
            recommended_actions=actions,
        )],
        source=source,
    )


def parse_alert(payload: Any) -> Alert:
    """Read a Cloud Monitoring incident or a Prometheus alert; :class:`PermanentFailure` for anything that can
    never become an alert.

    The alert's ``run`` is as the alert names it: the caller looks the run up."""
    if not isinstance(payload, dict):
        raise PermanentFailure("the alert is not a JSON object")
    try:
        if isinstance(payload.get("incident"), dict):
            return alert_from_incident(payload["incident"])
        if isinstance(payload.get("prometheusAlert"), dict):
            return _event_from_prometheus(payload)
    except InvalidArgument as bad:
        raise PermanentFailure(str(bad)) from None
    raise PermanentFailure("neither a MonitoredEvent message, a Cloud Monitoring incident nor a Prometheus alert")
