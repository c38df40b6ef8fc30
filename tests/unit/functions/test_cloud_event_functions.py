"""CloudEvent contract: structured and binary events posted to the real functions-framework apps."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from functions_framework import create_app

from mldiag.domain import ProfilerSession

FUNCTIONS = Path(__file__).resolve().parents[3] / "functions"
FINALIZE_DATA = {"bucket": "profiles", "name": "exp/run1/plugins/profile/s1/host0.xplane.pb",
                 "generation": "1700000000000001", "size": "4096", "contentType": "application/octet-stream"}
FINALIZE_ATTRIBUTES = {
    "specversion": "1.0", "type": "google.cloud.storage.object.v1.finalized",
    "source": "//storage.googleapis.com/projects/_/buckets/profiles",
    "subject": "objects/exp/run1/plugins/profile/s1/host0.xplane.pb",
    "id": "5149863287364451", "time": "2026-01-01T00:00:00.000Z",
}


@pytest.fixture
def services(function_services):
    return function_services()


def client(name: str):
    return create_app(name, str(FUNCTIONS / name / "main.py"), "cloudevent").test_client()


def sessions(services) -> list[dict]:
    return services.store.query(ProfilerSession.collection)


def test_structured_finalize_event_registers_the_session(services):
    body = {**FINALIZE_ATTRIBUTES, "datacontenttype": "application/json", "data": FINALIZE_DATA}
    response = client("register_session").post(
        "/", data=json.dumps(body), headers={"Content-Type": "application/cloudevents+json"})
    assert response.status_code == 200
    assert [s["name"] for s in sessions(services)] == [
        "projects/p/locations/l/machineLearningRuns/run1/profilerSessions/s1"]


def test_binary_finalize_event_registers_once_even_when_redelivered(services):
    headers = {f"ce-{k}": v for k, v in FINALIZE_ATTRIBUTES.items()} | {"Content-Type": "application/json"}
    app = client("register_session")
    for _ in range(3):
        assert app.post("/", data=json.dumps(FINALIZE_DATA), headers=headers).status_code == 200
    assert len(sessions(services)) == 1
    record = services.events.get("register_session", FINALIZE_ATTRIBUTES["id"])
    assert record.outcome.value == "ok" and record.attempts == 1


def test_permanently_bad_event_is_acknowledged_and_recorded(services):
    headers = {f"ce-{k}": v for k, v in FINALIZE_ATTRIBUTES.items()} | {"Content-Type": "application/json"}
    bad = {**FINALIZE_DATA, "name": "exp/run1/plugins/profile/s1/host0.xplane.pb", "size": "0"}
    assert client("register_session").post("/", data=json.dumps(bad), headers=headers).status_code == 200
    assert "is empty" in services.events.get("register_session", FINALIZE_ATTRIBUTES["id"]).error
    assert sessions(services) == []


def test_malformed_cloud_event_is_refused_by_the_framework(services):
    response = client("register_session").post("/", data="{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400


def test_transient_failure_returns_500_so_the_platform_retries(services, monkeypatch):
    from mldiag.services import registration

    def unavailable(*args, **kwargs):
        raise ConnectionError("Firestore unavailable")

    monkeypatch.setattr(registration.Registrar, "registering", unavailable)
    headers = {f"ce-{k}": v for k, v in FINALIZE_ATTRIBUTES.items()} | {"Content-Type": "application/json"}
    assert client("register_session").post("/", data=json.dumps(FINALIZE_DATA), headers=headers).status_code == 500
    assert services.events.get("register_session", FINALIZE_ATTRIBUTES["id"]).outcome.value == "failed"


def pubsub_push(topic: str, payload: dict, attributes: dict) -> dict:
    return {
        "specversion": "1.0", "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "source": f"//pubsub.googleapis.com/projects/p/topics/{topic}", "id": "msg-1",
        "datacontenttype": "application/json",
        "data": {"message": {"data": base64.b64encode(json.dumps(payload).encode()).decode(),
                             "attributes": attributes, "messageId": "msg-1"},
                 "subscription": f"projects/p/subscriptions/{topic}-push"},
    }


def test_dead_letter_function_records_the_message(services):
    event = pubsub_push("analysis-requests-dead-letter", {"session": "x"},
                        {"CloudPubSubDeadLetterSourceDeliveryCount": "5",
                         "CloudPubSubDeadLetterSourceSubscription": "analysis-requests-push"})
    response = client("record_dead_letter").post(
        "/", data=json.dumps(event), headers={"Content-Type": "application/cloudevents+json"})
    assert response.status_code == 200
    (letter,) = services.store.query("deadLetters")
    assert letter["deliveryCount"] == "5" and json.loads(letter["data"]) == {"session": "x"}


def test_maintenance_tick_settles_sessions(services):
    headers = {f"ce-{k}": v for k, v in FINALIZE_ATTRIBUTES.items()} | {"Content-Type": "application/json"}
    client("register_session").post("/", data=json.dumps(FINALIZE_DATA), headers=headers)
    services.store.set("outbox", "stale", {"key": "stale", "topic": "analysis-requests", "data": "{}",
                                           "attributes": {}, "orderingKey": "",
                                           "stagedAt": "2000-01-01T00:00:00.000000Z"})
    tick = pubsub_push("maintenance-ticks", {}, {})
    response = client("maintenance").post(
        "/", data=json.dumps(tick), headers={"Content-Type": "application/cloudevents+json"})
    assert response.status_code == 200
    assert services.store.get("outbox", "stale") is None
    assert "republished 1 message(s)" in services.events.get("maintenance", "msg-1").detail
