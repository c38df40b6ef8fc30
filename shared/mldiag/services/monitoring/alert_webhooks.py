"""Alerts in over HTTP: Alertmanager, Grafana and Cloud Monitoring webhook notifications onto ``monitoring-alerts``.

A notification is checked whole before anything is sent: every alert in it
must name an existing run (label ``mldiag_run``: its id, full name or a display
name one run has), or the sender gets one clear error (several runs sharing the
display name are named) and nothing is published; ``on_alert`` looks the run
up the same way. Each alert then goes to ``monitoring-alerts``
on its own (a grouped notification becomes one message per alert) through the
outbox, so ``on_alert`` records, archives, storm-controls and captures it
exactly as it does an alert from Pub/Sub — and ``mldiag events replay`` can
send it again.
"""

from __future__ import annotations

from typing import Any, Protocol

from mldiag.config import MONITORING_ALERTS
from mldiag.domain.alerts import (
    PROMETHEUS_SOURCES,
    Alert,
    prometheus_event_id,
    read_prometheus_alert,
)
from mldiag.domain.errors import InvalidArgument, PermanentFailure
from mldiag.domain.names import EVENTS, parse_run
from mldiag.ports import Transaction
from mldiag.services import outbox
from mldiag.services.dependencies import Configured, Publishing, Stored
from mldiag.services.monitoring.alert_runs import read_alert
from mldiag.services.repository import document_key


class AlertWebhookPorts(Stored, Publishing, Configured, Protocol):
    """What receiving an alert webhook uses."""


ALERTMANAGER_VERSION = "4"
MAX_ALERTS = 1000


def receive_prometheus(services: AlertWebhookPorts, source: str, notification: dict[str, Any]) -> list[dict]:
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
    messages = []
    for index, raw in enumerate(raw_alerts):
        try:
            alert = read_prometheus_alert(raw)
        except InvalidArgument as bad:
            raise InvalidArgument(str(bad), field=f"alerts[{index}]") from None
        messages.append((f"{source}:{prometheus_event_id(source, alert)}:{alert.status}",
                         {"source": source, "prometheusAlert": alert.model_dump(mode="json", by_alias=True)}))
    return _publish(services, messages)


def receive_incident(services: AlertWebhookPorts, notification: dict[str, Any]) -> list[dict]:
    """A Cloud Monitoring webhook notification: the incident JSON its Pub/Sub channel would publish."""
    if not isinstance(notification.get("incident"), dict):
        raise InvalidArgument("the notification has no incident object", field="incident")
    incident = notification["incident"]
    key = f"cloudMonitoring:{incident.get('incident_id')}:{incident.get('state')}"
    return _publish(services, [(key, notification)])


def _publish(services: AlertWebhookPorts, messages: list[tuple[str, dict]]) -> list[dict]:
    """Check every message reads as an alert of an existing run, then stage and send them all."""
    checked: list[tuple[str, dict, Alert]] = []
    for key, message in messages:
        try:
            alert = read_alert(services, message)
        except PermanentFailure as bad:
            raise InvalidArgument(str(bad)) from None
        checked.append((f"webhook:{document_key(alert.run)}:{key}", message, alert))

    def work(transaction: Transaction) -> None:
        for key, message, alert in checked:
            outbox.stage(transaction, key, MONITORING_ALERTS, message, {"run": alert.run}, services.now(),
                         ordering_key=alert.run)

    services.store.transaction(work)
    for key, _, _ in checked:
        outbox.flush(services.store, services.bus, key)
    return [{"run": alert.run, "monitoredEvent": str(parse_run(alert.run).child(EVENTS, alert.event_id)),
             "state": "open" if alert.open else "closed"} for _, _, alert in checked]

