"""Alerts in over HTTP: Alertmanager, Grafana and Cloud Monitoring webhooks, through monitoring-alerts to on_alert.

The payloads follow the examples of Alertmanager's ``webhook_config`` (version 4)
and Grafana's webhook contact point documentation, with the labels a team adds
to point an alert at a run.
"""

from __future__ import annotations

import base64
import copy
import json

import pytest

from mldiag.entrypoints import handlers
from mldiag.entrypoints.http.app import create_app
from mldiag.services.dependencies import Services
from mldiag.config import MONITORING_ALERTS
from mldiag.domain import MachineLearningRun, MonitoredEvent, ProfilerSession, ProfilerTarget
from mldiag.services.event_archive import Outcome
from mldiag.services import unit_of_work
from mldiag.domain.envelopes import pubsub_cloud_event
from mldiag.services.operator import archive

RUN = "projects/p/locations/l/machineLearningRuns/r1"
TOKEN = "alert-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}

ALERTMANAGER = {
    "version": "4",
    "groupKey": '{}/{severity="critical"}:{alertname="StepTimeHigh"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "mldiag",
    "groupLabels": {"alertname": "StepTimeHigh"},
    "commonLabels": {"alertname": "StepTimeHigh", "severity": "critical", "mldiag_run": "r1"},
    "commonAnnotations": {"summary": "Step time 30% above its baseline"},
    "externalURL": "http://alertmanager.example.org:9093",
    "alerts": [{
        "status": "firing",
        "labels": {"alertname": "StepTimeHigh", "severity": "critical", "mldiag_run": "r1",
                   "mldiag_targets": "host1-0", "instance": "host1:9100"},
        "annotations": {"summary": "Step time 30% above its baseline",
                        "description": "p50 step time 260 ms against 200 ms over 10m",
                        "runbook_url": "https://runbooks.example.org/step-time"},
        "startsAt": "2026-01-01T00:00:00.828912345Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus.example.org:9090/graph?g0.expr=step_time",
        "fingerprint": "1a30ba71cca2921f",
    }],
}

GRAFANA = {
    "receiver": "mldiag",
    "status": "firing",
    "orgId": 1,
    "alerts": [{
        "status": "firing",
        "labels": {"alertname": "Low duty cycle", "team": "blue", "mldiag_run": RUN},
        "annotations": {"description": "TPU duty cycle under 60%", "runbook_url": "https://myrunbook.com/runbook/1",
                        "summary": "This alert was triggered for r1"},
        "startsAt": "2026-01-01T01:51:03.157076+02:00",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "https://grafana.example.org/alerting/1afz29v7z/edit",
        "fingerprint": "c6eadffa33fcdf37",
        "silenceURL": "https://grafana.example.org/alerting/silence/new?alertmanager=grafana",
        "dashboardURL": "",
        "panelURL": "",
        "values": {"B": 44.23943737541908, "C": 1},
    }],
    "groupLabels": {},
    "commonLabels": {"team": "blue"},
    "commonAnnotations": {},
    "externalURL": "https://grafana.example.org/",
    "version": "1",
    "groupKey": "{}:{}",
    "truncatedAlerts": 0,
    "title": "[FIRING:1]  (blue)",
    "state": "alerting",
    "message": "**Firing**",
}

INCIDENT = {"version": "1.2", "incident": {
    "incident_id": "0.opqiw61fsv7p", "state": "open", "started_at": 1767225600,
    "policy_name": "Training duty cycle", "condition_name": "Duty cycle < 70%", "summary": "duty cycle 52%",
    "resource": {"type": "tpu_worker", "labels": {"mldiag_run": "r1", "mldiag_targets": "host0-0"}},
}}


def resolved(payload: dict) -> dict:
    """The same notification once its alerts resolve (Alertmanager keeps startsAt and sets endsAt)."""
    notification = copy.deepcopy(payload)
    notification["status"] = "resolved"
    for alert in notification["alerts"]:
        alert.update(status="resolved", endsAt="2026-01-01T00:20:00Z")
    return notification


@pytest.fixture
def services(embedded: Services) -> Services:
    embedded.settings.alert_token = TOKEN
    embedded.runs.create(MachineLearningRun(name=RUN, artifacts={"gcsPath": "gs://profiles/exp"}))
    for host in ("host0", "host1"):
        embedded.targets.create(ProfilerTarget(name=f"{RUN}/profilerTargets/{host}-0", hostname=host,
                                               profiler_address=f"{host}.internal:9999"))
    return embedded


@pytest.fixture
def client(services: Services):
    return create_app(services).test_client()


def deliver(services: Services) -> list[Outcome]:
    """Hand what the receivers published on monitoring-alerts to on_alert, as the subscription would."""
    published = services.bus.published[MONITORING_ALERTS]
    outcomes = [handlers.on_alert(services, pubsub_cloud_event(
        project="p", topic=MONITORING_ALERTS, subscription="on_alert-monitoring-alerts", message=message,
        published=services.now())) for message in published]
    published.clear()
    return outcomes


def monitored_events(services: Services) -> list[MonitoredEvent]:
    return [MonitoredEvent.model_validate({k: v for k, v in d.items() if not k.startswith("_")})
            for d in services.store.query(MonitoredEvent.collection)]


def auto_sessions(services: Services) -> list[ProfilerSession]:
    sessions = (ProfilerSession.model_validate({k: v for k, v in d.items() if not k.startswith("_")})
                for d in services.store.query(ProfilerSession.collection))
    return [s for s in sessions if s.auto_captured]


def test_alertmanager_firing_opens_one_event_and_one_capture_of_the_labelled_target(services, client):
    response = client.post("/v1alpha/alerts:alertmanager", json=ALERTMANAGER, headers=BEARER)
    assert response.status_code == 200, response.json
    (answer,) = response.json["alerts"]
    assert answer["run"] == RUN and answer["state"] == "open"
    assert deliver(services) == [Outcome.OK]
    (event,) = monitored_events(services)
    assert event.name == answer["monitoredEvent"]
    assert event.ongoing and event.display_name == "StepTimeHigh / Step time 30% above its baseline"
    report = event.analyzer_reports[0]
    assert report.analyzer == "alertmanager: StepTimeHigh"
    assert report.details == "p50 step time 260 ms against 200 ms over 10m"
    assert report.recommended_actions[0].documentation_url == "https://runbooks.example.org/step-time"
    (session,) = auto_sessions(services)
    assert session.profiler_targets == ["host1-0"] and session.monitored_events == [event.name]


def test_resolved_notification_closes_the_event_and_captures_nothing_more(services, client):
    client.post("/v1alpha/alerts:alertmanager", json=ALERTMANAGER, headers=BEARER)
    deliver(services)
    response = client.post("/v1alpha/alerts:alertmanager", json=resolved(ALERTMANAGER), headers=BEARER)
    assert response.json["alerts"][0]["state"] == "closed"
    assert deliver(services) == [Outcome.OK]
    (event,) = monitored_events(services)
    assert not event.ongoing and event.end_time.isoformat().startswith("2026-01-01T00:20:00")
    assert len(auto_sessions(services)) == 1


@pytest.mark.slow
def test_a_thousand_repeats_capture_once_and_count_the_suppressions(services, client, clock):
    for _ in range(1000):
        assert client.post("/v1alpha/alerts:alertmanager", json=ALERTMANAGER, headers=BEARER).status_code == 200
        clock.advance(0.05)
    assert set(deliver(services)) == {Outcome.OK}
    (event,) = monitored_events(services)
    assert len(auto_sessions(services)) == 1
    assert event.suppressed_count == 999
    assert event.suppressions[-1].reason.startswith("already captured for this event")


def test_a_new_firing_after_the_resolution_is_a_new_event(services, client):
    client.post("/v1alpha/alerts:alertmanager", json=ALERTMANAGER, headers=BEARER)
    client.post("/v1alpha/alerts:alertmanager", json=resolved(ALERTMANAGER), headers=BEARER)
    again = copy.deepcopy(ALERTMANAGER)
    again["alerts"][0]["startsAt"] = "2026-01-01T02:00:00Z"
    client.post("/v1alpha/alerts:alertmanager", json=again, headers=BEARER)
    deliver(services)
    assert sorted(e.ongoing for e in monitored_events(services)) == [False, True]


def test_grouped_notification_is_one_message_per_alert(services, client):
    grouped = copy.deepcopy(ALERTMANAGER)
    second = copy.deepcopy(grouped["alerts"][0])
    second.update(fingerprint="2b41cb82ddb3a32e", labels={**second["labels"], "instance": "host0:9100",
                                                          "mldiag_targets": "host0-0"})
    grouped["alerts"].append(second)
    response = client.post("/v1alpha/alerts:alertmanager", json=grouped, headers=BEARER)
    assert len({a["monitoredEvent"] for a in response.json["alerts"]}) == 2
    assert deliver(services) == [Outcome.OK, Outcome.OK]
    assert len(monitored_events(services)) == 2


def test_grafana_contact_point_with_basic_auth_opens_and_resolves(services, client):
    basic = {"Authorization": "Basic " + base64.b64encode(f"grafana:{TOKEN}".encode()).decode()}
    assert client.post("/v1alpha/alerts:grafana", json=GRAFANA, headers=basic).status_code == 200
    deliver(services)
    (event,) = monitored_events(services)
    assert event.ongoing and event.analyzer_reports[0].analyzer == "grafana: Low duty cycle"
    assert event.start_time.isoformat() == "2025-12-31T23:51:03.157076+00:00"
    (session,) = auto_sessions(services)
    assert session.profiler_targets == ["host0-0", "host1-0"]
    assert client.put("/v1alpha/alerts:grafana", json=resolved(GRAFANA), headers=basic).status_code == 200
    deliver(services)
    (event,) = monitored_events(services)
    assert not event.ongoing


def test_cloud_monitoring_webhook_takes_the_pubsub_incident(services, client):
    assert client.post("/v1alpha/alerts:cloudMonitoring", json=INCIDENT, headers=BEARER).status_code == 200
    assert deliver(services) == [Outcome.OK]
    (event,) = monitored_events(services)
    assert event.display_name == "Training duty cycle / Duty cycle < 70%"
    assert auto_sessions(services)[0].profiler_targets == ["host0-0"]


def test_every_alert_is_archived_and_replays(services, client):
    client.post("/v1alpha/alerts:alertmanager", json=ALERTMANAGER, headers=BEARER)
    deliver(services)
    (record,) = archive.list_events(services, archive.EventQuery(function="on_alert"))
    (result,) = archive.replay(services, archive.ReplayRequest(events=[record.key], to="topic"), handlers.EVENT_HANDLERS)
    assert result.result.startswith("re-published to monitoring-alerts")
    assert deliver(services) == [Outcome.OK]
    (event,) = monitored_events(services)
    assert event.suppressed_count == 1 and len(auto_sessions(services)) == 1


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": "Basic " + base64.b64encode(b"grafana:wrong").decode()},
    {"Authorization": "Basic not-base64!"},
    {"Authorization": f"Token {TOKEN}"},
])
def test_bad_credentials_get_401_and_publish_nothing(services, client, headers):
    response = client.post("/v1alpha/alerts:alertmanager", json=ALERTMANAGER, headers=headers)
    assert response.status_code == 401
    assert TOKEN not in response.get_data(as_text=True)
    assert not services.bus.published[MONITORING_ALERTS]


def test_without_an_alert_token_the_webhooks_stay_closed_outside_the_open_mode(services):
    services.settings.alert_token = ""
    services.settings.api_token = "api-token-0123456789"
    response = create_app(services).test_client().post(
        "/v1alpha/alerts:alertmanager", json=ALERTMANAGER, headers={"Authorization": "Bearer api-token-0123456789"})
    assert response.status_code == 401
    assert "MLDIAG_ALERT_TOKEN" in response.json["error"]["message"]


def _without_run_label(payload: dict) -> dict:
    broken = copy.deepcopy(payload)
    del broken["alerts"][0]["labels"]["mldiag_run"]
    return broken


@pytest.mark.parametrize(("route", "body", "message"), [
    ("alertmanager", "{not json", "not valid JSON"),
    ("alertmanager", {**ALERTMANAGER, "alerts": []}, "no alerts[]"),
    ("alertmanager", {**ALERTMANAGER, "version": "3"}, "version '3' is not supported"),
    ("alertmanager", _without_run_label(ALERTMANAGER), "alerts[0]: labels: the alert has no label 'mldiag_run'"),
    ("alertmanager", {**ALERTMANAGER, "alerts": [{**ALERTMANAGER["alerts"][0], "status": "pending"}]},
     "alerts[0]: status"),
    ("alertmanager", {**ALERTMANAGER, "alerts": [{**ALERTMANAGER["alerts"][0], "startsAt": "yesterday"}]},
     "alerts[0]: startsAt"),
    ("grafana", {**GRAFANA, "alerts": ["firing"]}, "alerts[0]"),
    ("cloudMonitoring", {"version": "1.2"}, "no incident object"),
    ("cloudMonitoring", {"incident": {"incident_id": "1", "state": "maybe"}}, "neither 'open' nor 'closed'"),
])
def test_malformed_notifications_get_400_with_one_line_and_publish_nothing(services, client, route, body, message):
    if isinstance(body, str):
        response = client.post(f"/v1alpha/alerts:{route}", data=body, content_type="application/json",
                               headers=BEARER)
    else:
        response = client.post(f"/v1alpha/alerts:{route}", json=body, headers=BEARER)
    assert response.status_code == 400
    error = response.json["error"]["message"]
    assert message in error and "\n" not in error
    assert not services.bus.published[MONITORING_ALERTS]


def test_an_alert_for_an_unknown_run_is_404_and_nothing_of_its_group_is_sent(services, client):
    grouped = copy.deepcopy(ALERTMANAGER)
    stranger = copy.deepcopy(grouped["alerts"][0])
    stranger["labels"]["mldiag_run"] = "ghost"
    grouped["alerts"].append(stranger)
    response = client.post("/v1alpha/alerts:alertmanager", json=grouped, headers=BEARER)
    assert response.status_code == 404 and "run ghost not found" in response.json["error"]["message"]
    assert not services.bus.published[MONITORING_ALERTS]


def test_the_token_is_never_logged(services, client):
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        client.post("/v1alpha/alerts:alertmanager", json=ALERTMANAGER, headers=BEARER)
        client.post("/v1alpha/alerts:alertmanager", json=ALERTMANAGER, headers={"Authorization": "Bearer nope"})
        deliver(services)
    assert TOKEN not in json.dumps(logs, default=str) and "nope" not in json.dumps(logs, default=str)
    assert TOKEN not in repr(services)  # what a traceback's locals would show


def _naming_the_run(payload: dict, run: str) -> dict:
    notification = copy.deepcopy(payload)
    for alert in notification["alerts"]:
        alert["labels"]["mldiag_run"] = run
    return notification


def test_an_alert_may_name_its_run_by_the_display_name_one_run_has(services, client):
    unit_of_work.change(services, lambda unit: unit.runs.update(
        RUN, lambda run: setattr(run, "display_name", "my experiment")))
    response = client.post("/v1alpha/alerts:alertmanager", json=_naming_the_run(ALERTMANAGER, "my experiment"),
                           headers=BEARER)
    assert response.status_code == 200, response.json
    (answer,) = response.json["alerts"]
    assert answer["run"] == RUN and answer["monitoredEvent"].startswith(f"{RUN}/monitoredEvents/")
    assert deliver(services) == [Outcome.OK]
    (event,) = monitored_events(services)
    assert event.name == answer["monitoredEvent"] and len(auto_sessions(services)) == 1


def test_an_alert_naming_a_display_name_several_runs_share_is_400_naming_them(services, client):
    unit_of_work.change(services, lambda unit: unit.runs.update(
        RUN, lambda run: setattr(run, "display_name", "shared")))
    services.runs.create(MachineLearningRun(name=f"{RUN}-again", display_name="shared"))
    response = client.post("/v1alpha/alerts:alertmanager", json=_naming_the_run(ALERTMANAGER, "shared"),
                           headers=BEARER)
    assert response.status_code == 400
    message = response.json["error"]["message"]
    assert "'shared'" in message and "r1" in message and "r1-again" in message and "give the id" in message
    assert not services.bus.published[MONITORING_ALERTS]
