"""``/v1alpha/alerts:*`` — webhooks where monitoring systems send their alerts.

* ``POST /v1alpha/alerts:alertmanager`` — a Prometheus Alertmanager ``webhook_config`` notification (version 4);
* ``POST`` (or ``PUT``) ``/v1alpha/alerts:grafana`` — a Grafana alerting webhook contact point's notification;
* ``POST /v1alpha/alerts:cloudMonitoring`` — a Cloud Monitoring webhook notification channel's incident.

Each answers with the monitored event every alert lands on; the alerts go on
to ``on_alert`` through ``monitoring-alerts`` (:mod:`mldiag.services.monitoring.alert_webhooks`).
The app checks the alert token before these routes run (:mod:`mldiag.entrypoints.http.auth`).
"""

from __future__ import annotations

from flask import Blueprint, Response

from mldiag.entrypoints.http.rest import json_body, ok, services
from mldiag.services.monitoring import alert_webhooks

blueprint = Blueprint("alerts", __name__, url_prefix="/v1alpha")


@blueprint.post("/alerts:alertmanager")
def alertmanager() -> Response:
    return ok({"alerts": alert_webhooks.receive_prometheus(services(), "alertmanager", json_body())})


@blueprint.route("/alerts:grafana", methods=["POST", "PUT"])  # a contact point may send either
def grafana() -> Response:
    return ok({"alerts": alert_webhooks.receive_prometheus(services(), "grafana", json_body())})


@blueprint.post("/alerts:cloudMonitoring")
def cloud_monitoring() -> Response:
    return ok({"alerts": alert_webhooks.receive_incident(services(), json_body())})
