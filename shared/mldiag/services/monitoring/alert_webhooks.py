"""Alerts in over HTTP: Alertmanager, Grafana and Cloud Monitoring webhook notifications onto ``monitoring-alerts``.

A notification is checked whole before anything is sent: every alert in it
must name an existing run (label ``mldiag_run``: its id, full name or a display
name one run has), or the sender gets one clear error (several runs sharing the
display name are named) and nothing is published; ``on_alert`` looks the run
up the same way. Each alert, read once here, then goes to ``monitoring-alerts``
on its own as an :class:`~mldiag.domain.messages.AlertMessage` (a grouped
notification becomes one message per alert) through the outbox, so
``on_alert`` records, archives, storm-controls and captures it exactly as it
does an alert from Pub/Sub — and ``mldiag events replay`` can send it again.
"""

from __future__ import annotations

from typing import Any, Protocol

from mldiag.domain.alerts import (
    PROMETHEUS_SOURCES,
    Alert,
    alert_from_incident,
    alert_from_prometheus,
    prometheus_event_id,
    read_prometheus_alert,
)
from mldiag.domain.errors import InvalidArgument, PermanentFailure
from mldiag.domain.messages import AlertMessage
from mldiag.domain.names import EVENTS, parse_run
from mldiag.services import unit_of_work
from mldiag.services.dependencies import Configured, Publishing, Stored
from mldiag.services.monitoring.alert_runs import with_run_found
from mldiag.services.repository import document_key
from mldiag.services.unit_of_work import UnitOfWork


class AlertWebhookPorts(Stored, Publishing, Configured, Protocol):
    """What receiving an alert webhook uses."""


ALERTMANAGER_VERSION = "4"
MAX_ALERTS = 1000


def receive_prometheus(services: AlertWebhookPorts, source: str, notification: dict[str, Any]) -> list[dict[str, Any]]:
    """An Alertmanager (``webhook_config``, version 4) or Grafana webhook notification: one message per alert."""
    if source not in PROMETHEUS_SOURCES:
        raise InvalidArgument(f"unknown alert source {source!r}", field="source")
    if source == "alertmanager" and str(notification.get("version", ALERTMANAGER_VERSION)) != ALERTMANAGER_VERSION:
        raise InvalidArgument(f"Alertmanager webhook payload version {notification.get('version')!r} is not "
                              f"supported (expected {ALERTMANAGER_VERSION!r})", field="version")
    raw_alerts = notification.get("alerts")
    if not isinstance(raw_alerts, list) or not raw_alerts:
        raise InvalidArgument("the notification has no alerts[]", field="alerts")
    if len(raw_alerts) > MAX_ALERTS:
        raise InvalidArgument(f"at most {MAX_ALERTS} alerts per notification", field="alerts")
    alerts = []
    for index, raw in enumerate(raw_alerts):
        try:
            alert = read_prometheus_alert(raw)
        except InvalidArgument as bad:
            raise InvalidArgument(str(bad), field=f"alerts[{index}]") from None
        alerts.append((f"{source}:{prometheus_event_id(source, alert)}:{alert.status}",
                       alert_from_prometheus(source, alert)))
    return _publish(services, alerts)


def receive_incident(services: AlertWebhookPorts, notification: dict[str, Any]) -> list[dict[str, Any]]:
    """A Cloud Monitoring webhook notification: the incident its Pub/Sub channel would publish."""
    if not isinstance(notification.get("incident"), dict):
        raise InvalidArgument("the notification has no incident object", field="incident")
    incident = notification["incident"]
    key = f"cloudMonitoring:{incident.get('incident_id')}:{incident.get('state')}"
    try:
        alert = alert_from_incident(incident)
    except PermanentFailure as bad:
        raise InvalidArgument(str(bad)) from None
    return _publish(services, [(key, alert)])


def _publish(services: AlertWebhookPorts, alerts: list[tuple[str, Alert]]) -> list[dict[str, Any]]:
    """Check every alert names an existing run, then stage and send them all, each as an :class:`AlertMessage`."""
    checked = [(key, with_run_found(services, alert)) for key, alert in alerts]

    def work(unit: UnitOfWork) -> None:
        for key, alert in checked:
            unit.publish(f"webhook:{document_key(alert.run)}:{key}", AlertMessage.of(alert).outgoing())

    unit_of_work.run(services, work)
    return [{"run": alert.run, "monitoredEvent": str(parse_run(alert.run).child(EVENTS, alert.event_id)),
             "state": "open" if alert.open else "closed"} for _, alert in checked]
