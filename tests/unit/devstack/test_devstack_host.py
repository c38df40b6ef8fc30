"""The devstack's functions host without emulators: routing, the Eventarc adapter, the subscriptions it asks for.

Requests are the bodies the Pub/Sub emulator pushes (a fake-gcs-server
notification is one); the function behind the host is a real
functions-framework app that writes down what it received.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from werkzeug.test import Client

from mldiag.config import (
    ANALYSIS_REQUESTS, BUCKET_NOTIFICATIONS, UNRECORDED_DEAD_LETTERS, Settings, dead_letter_topic,
)
from mldiag.local.devstack import push_subscription_requests
from mldiag.local.devstack_host import HostedFunction, create_host, discover
from mldiag.domain.envelopes import PUBSUB_PUBLISHED, STORAGE_FINALIZED

PROBE_SOURCE = '''
import json
import pathlib

import functions_framework


@functions_framework.cloud_event
def probe(cloud_event):
    attributes = {name: str(value) for name, value in cloud_event.get_attributes().items()}
    with pathlib.Path(__file__).with_name("received.jsonl").open("a") as received:
        received.write(json.dumps({"attributes": attributes, "data": cloud_event.data}) + "\\n")
'''
OBJECT = {"kind": "storage#object", "bucket": "profiles", "name": "run-1/plugins/profile/s1/h.xplane.pb",
          "generation": "1796092403424783", "size": "5", "contentType": "application/octet-stream",
          "updated": "2026-12-01T02:33:23.424781Z"}


def push_body(data: bytes, attributes: dict[str, str], message_id: str = "42") -> dict:
    """A push request body, as the Pub/Sub emulator sends it."""
    return {
        "subscription": "projects/p/subscriptions/probe-sub",
        "message": {"data": base64.b64encode(data).decode(), "attributes": attributes,
                    "messageId": message_id, "publishTime": "2026-12-01T02:33:23.454Z"},
    }


def notification(bucket: str = "profiles", event_type: str = "OBJECT_FINALIZE") -> dict:
    attributes = {"bucketId": bucket, "objectId": OBJECT["name"], "eventType": event_type,
                  "objectGeneration": OBJECT["generation"], "payloadFormat": "JSON_API_V1"}
    return push_body(json.dumps({**OBJECT, "bucket": bucket}).encode(), attributes)


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    source = tmp_path / "probe" / "main.py"
    source.parent.mkdir()
    source.write_text(PROBE_SOURCE)
    return source


def received(probe: Path) -> list[dict]:
    log = probe.with_name("received.jsonl")
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_storage_notification_becomes_eventarc_finalize_event(probe):
    host = Client(create_host([HostedFunction("probe", probe, finalized_bucket="profiles")]))

    response = host.post("/probe/projects/_/buckets/profiles", json=notification())

    assert response.status_code == 200
    [event] = received(probe)
    assert event["attributes"] == {
        "specversion": "1.0",
        "type": STORAGE_FINALIZED,
        "source": "//storage.googleapis.com/projects/_/buckets/profiles",
        "subject": f"objects/{OBJECT['name']}",
        "id": "42",
        "time": OBJECT["updated"],
        "datacontenttype": "application/json",
    }
    assert event["data"] == OBJECT


@pytest.mark.parametrize("push", [notification(bucket="elsewhere"), notification(event_type="OBJECT_DELETE")],
                         ids=["other bucket", "not a finalize"])
def test_notifications_the_trigger_would_not_fire_on_are_acknowledged_and_dropped(probe, push):
    host = Client(create_host([HostedFunction("probe", probe, finalized_bucket="profiles")]))
    assert host.post("/probe/projects/_/buckets/profiles", json=push).status_code == 204
    assert received(probe) == []


@pytest.mark.parametrize("push", [push_body(b"not json", {"eventType": "OBJECT_FINALIZE", "bucketId": "profiles"}),
                                  {"message": {"data": "%%%", "messageId": "1"}}, {"no": "message"}],
                         ids=["data not JSON", "data not base64", "no message"])
def test_unreadable_notifications_are_refused_so_pubsub_retries_them(probe, push):
    host = Client(create_host([HostedFunction("probe", probe, finalized_bucket="profiles")]))
    assert host.post("/probe/projects/_/buckets/profiles", json=push).status_code == 400
    assert received(probe) == []


def test_topic_push_gets_its_source_from_the_topic_in_the_path(probe):
    host = Client(create_host([HostedFunction("probe", probe, topics=(ANALYSIS_REQUESTS,))]))

    push = push_body(b'{"session": "s1"}', {"run": "r1"})
    response = host.post(f"/probe/projects/p/topics/{ANALYSIS_REQUESTS}", json=push)

    assert response.status_code == 200
    [event] = received(probe)
    assert event["attributes"]["type"] == PUBSUB_PUBLISHED
    assert event["attributes"]["source"] == f"//pubsub.googleapis.com/projects/p/topics/{ANALYSIS_REQUESTS}"
    assert event["attributes"]["id"] == "42"
    message = event["data"]["message"]
    assert base64.b64decode(message["data"]) == b'{"session": "s1"}'
    assert message["attributes"] == {"run": "r1"}


def test_root_lists_the_functions_and_unknown_ones_are_not_found(probe):
    host = Client(create_host([HostedFunction("probe", probe)]))
    assert host.get("/").json == {"functions": ["probe"]}
    assert host.post("/nothing/projects/p/topics/t", json={}).status_code == 404


def test_discover_gives_each_function_source_its_terraform_triggers(tmp_path):
    for name in ("register_session", "record_dead_letter", "control_plane"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "main.py").write_text("")
    (tmp_path / "not_a_function").mkdir()

    hosted = {function.name: function for function in discover(tmp_path, Settings(bucket="profiles"))}

    assert sorted(hosted) == ["control_plane", "record_dead_letter", "register_session"]
    assert hosted["register_session"].finalized_bucket == "profiles" and not hosted["register_session"].topics
    assert dead_letter_topic(ANALYSIS_REQUESTS) in hosted["record_dead_letter"].topics
    assert (hosted["control_plane"].topics, hosted["control_plane"].finalized_bucket) == ((), "")


def test_push_subscriptions_mirror_the_triggers():
    functions = [
        HostedFunction("analyze_session", Path("main.py"), topics=(ANALYSIS_REQUESTS,)),
        HostedFunction("record_dead_letter", Path("main.py"), topics=(dead_letter_topic(ANALYSIS_REQUESTS),)),
        HostedFunction("register_session", Path("main.py"), finalized_bucket="profiles"),
        HostedFunction("control_plane", Path("main.py")),
    ]

    requests = {r["name"].rsplit("/", 1)[1]: r for r in push_subscription_requests("p", functions, "http://h:1", 3)}

    assert sorted(requests) == ["analyze_session-analysis-requests",
                                "record_dead_letter-analysis-requests-dead-letter",
                                "register_session-bucket-notifications"]
    analyze = requests["analyze_session-analysis-requests"]
    assert analyze["topic"] == f"projects/p/topics/{ANALYSIS_REQUESTS}"
    assert analyze["push_config"]["push_endpoint"] == f"http://h:1/analyze_session/projects/p/topics/{ANALYSIS_REQUESTS}"
    assert analyze["dead_letter_policy"] == {
        "dead_letter_topic": f"projects/p/topics/{dead_letter_topic(ANALYSIS_REQUESTS)}",
        "max_delivery_attempts": 5,  # Pub/Sub's minimum
    }
    recorder = requests["record_dead_letter-analysis-requests-dead-letter"]
    assert recorder["dead_letter_policy"]["dead_letter_topic"] == f"projects/p/topics/{UNRECORDED_DEAD_LETTERS}"
    register = requests["register_session-bucket-notifications"]
    assert register["topic"] == f"projects/p/topics/{BUCKET_NOTIFICATIONS}"
    assert register["push_config"]["push_endpoint"] == "http://h:1/register_session/projects/_/buckets/profiles"
    assert "dead_letter_policy" not in register, "Eventarc's own subscription has none"
