"""The operator routes: the event archive, replay, dead letters and status, with their filters and credentials."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

import pytest

from api_suite import LOCATION, PROJECT
from mldiag.entrypoints import handlers
from mldiag.services import registration
from mldiag.domain import ProfilerSession
from mldiag.services.event_archive import ArchivedEvent, Outcome
from mldiag.domain.envelopes import storage_finalized_event

TOKEN = "s3cret-token-for-tests"
PROFILE = "exp/run1/plugins/profile/s1/host0.xplane.pb"


def _finalized(generation: str = "7"):
    return storage_finalized_event({"bucket": "profiles", "name": PROFILE, "generation": generation, "size": "10"})


def _archive(services, event_id: str, function: str = "analyze_session", outcome: Outcome = Outcome.OK,
             age: timedelta = timedelta(minutes=5), type: str = "google.cloud.pubsub.topic.v1.messagePublished"):
    services.events.save(ArchivedEvent(
        id=event_id, function=function, type=type, outcome=outcome, attempts=1,
        first_received=services.now() - age, raw={"id": event_id, "specversion": "1.0", "type": type}))


def _failed_registration(services, monkeypatch):
    """A finalize event whose handler hit a bug; returns the event."""
    def broken(data, max_bytes):
        raise RuntimeError("bug in this version")

    monkeypatch.setattr(registration, "parse_finalized", broken)
    event = _finalized()
    with pytest.raises(RuntimeError):
        handlers.register_session(services, event)
    monkeypatch.undo()
    return event


def _error(response, code: int, status: str) -> str:
    assert response.status_code == code, response.json
    assert set(response.json["error"]) == {"code", "message", "status"}
    assert response.json["error"]["status"] == status
    return response.json["error"]["message"]


def test_list_filters_by_function_type_outcome_and_age(api, services):
    _archive(services, "old", age=timedelta(hours=3))
    _archive(services, "failed", outcome=Outcome.FAILED, age=timedelta(minutes=5))
    _archive(services, "tick", function="maintenance", age=timedelta(minutes=1))
    _archive(services, "file", function="register_session", type="google.cloud.storage.object.v1.finalized",
             age=timedelta(minutes=10))

    def ids(query: str = "") -> list[str]:
        response = api.request("GET", f"/v1alpha/events{query}")
        assert response.status_code == 200, response.json
        return [event["id"] for event in response.json["events"]]

    assert ids() == ["tick", "failed", "file", "old"]  # newest first
    assert ids("?since=1h") == ["tick", "failed", "file"]
    assert ids("?until=1h") == ["old"]
    assert ids("?function=analyze_session&outcome=failed") == ["failed"]
    assert ids("?type=google.cloud.storage.object.v1.finalized") == ["file"]
    assert ids("?limit=2") == ["tick", "failed"]
    since = (services.now() - timedelta(minutes=2)).isoformat().replace("+00:00", "Z")
    assert ids(f"?since={quote(since)}") == ["tick"]


@pytest.mark.parametrize(("query", "field"), [
    ("outcome=bogus", "outcome"), ("since=soon", "since"), ("until=yesterday-ish", "until"),
    ("limit=0", "limit"), ("limit=many", "limit"), ("limit=10001", "limit"), ("colour=red", "colour"),
])
def test_bad_filters_are_one_line_invalid_arguments(api, query, field):
    message = _error(api.request("GET", f"/v1alpha/events?{query}"), 400, "INVALID_ARGUMENT")
    assert message.startswith(f"{field}: ") and "\n" not in message


def test_show_has_the_raw_cloud_event_by_key_or_bare_id(api, services, monkeypatch):
    event = _failed_registration(services, monkeypatch)
    for key in (f"register_session:{event['id']}", event["id"]):
        shown = api.request("GET", f"/v1alpha/events/{quote(key, safe=':')}")
        assert shown.status_code == 200, shown.json
        assert shown.json["outcome"] == "failed" and "bug in this version" in shown.json["error"]
        assert shown.json["raw"]["data"]["name"] == PROFILE and shown.json["raw"]["id"] == event["id"]
    assert "no archived event" in _error(api.request("GET", "/v1alpha/events/nothing-here"), 404, "NOT_FOUND")


def test_replay_dry_run_changes_nothing_then_replay_applies_the_fix(api, services, monkeypatch):
    event = _failed_registration(services, monkeypatch)
    dry = api.request("POST", "/v1alpha/events:replay", json={"events": [event["id"]], "dryRun": True})
    assert dry.status_code == 200, dry.json
    key = services.events.get("register_session", event["id"]).key
    assert dry.json["results"] == [{"key": key, "function": "register_session", "before": "failed",
                                    "result": "would re-deliver to register_session"}]
    assert services.store.query(ProfilerSession.collection) == []

    done = api.request("POST", "/v1alpha/events:replay", json={"function": "register_session", "outcome": "failed"})
    assert [result["result"] for result in done.json["results"]] == ["ok"]
    assert len(services.store.query(ProfilerSession.collection)) == 1
    assert services.events.get("register_session", event["id"]).replays == 1


@pytest.mark.parametrize(("body", "field"), [
    ({}, "events"), ({"events": ["x"], "to": "nowhere"}, "to"), ({"outcome": "failed", "dryRun": "maybe"}, "dryRun"),
    ({"since": "soon"}, "since"),
])
def test_bad_replay_requests_are_invalid_arguments(api, body, field):
    message = _error(api.request("POST", "/v1alpha/events:replay", json=body), 400, "INVALID_ARGUMENT")
    assert message.startswith(f"{field}: ")


def test_a_finalize_event_cannot_be_replayed_to_a_topic(api, services, monkeypatch):
    event = _failed_registration(services, monkeypatch)
    response = api.request("POST", "/v1alpha/events:replay", json={"events": [event["id"]], "to": "topic"})
    assert "did not come from a Pub/Sub topic" in _error(response, 400, "INVALID_ARGUMENT")


def test_prune_deletes_only_expired_records(api, services):
    _archive(services, "kept")
    expired = ArchivedEvent(id="gone", function="maintenance", expire_at=services.now() - timedelta(days=1))
    services.events.save(expired)
    assert api.request("POST", "/v1alpha/events:prune").json == {"pruned": 1}
    assert [event["id"] for event in api.request("GET", "/v1alpha/events").json["events"]] == ["kept"]


def test_dead_letters_newest_first_with_their_error(api, services):
    for index in range(3):
        services.store.set("deadLetters", f"t:{index}", {"messageId": str(index), "lastError": f"KeyError {index}",
                                                         "receivedAt": f"2026-01-0{index + 1}T00:00:00.000000Z"})
    letters = api.request("GET", "/v1alpha/deadLetters?limit=2").json["deadLetters"]
    assert [letter["messageId"] for letter in letters] == ["2", "1"] and letters[0]["lastError"] == "KeyError 2"
    _error(api.request("GET", "/v1alpha/deadLetters?limit=none"), 400, "INVALID_ARGUMENT")
    _error(api.request("GET", "/v1alpha/deadLetters?limit=0"), 400, "INVALID_ARGUMENT")


def test_status_names_the_backend_where_the_data_lives_and_the_counts(api, services):
    api.create_run("r1")
    status = api.request("GET", "/v1alpha/status").json
    assert status["backend"] == "embedded" and status["project"] == PROJECT and status["location"] == LOCATION
    assert status["dataDir"] == str(services.settings.data_dir) and status["bucket"] == services.settings.bucket_uri
    assert status["machineLearningRuns"] == 1 and status["profilerSessions"] == 0


OPERATOR_CALLS = [("GET", "/v1alpha/events"), ("GET", "/v1alpha/events/some-id"), ("GET", "/v1alpha/deadLetters"),
                  ("GET", "/v1alpha/status"), ("POST", "/v1alpha/events:prune"),
                  ("POST", "/v1alpha/events:replay")]


@pytest.mark.parametrize(("method", "path"), OPERATOR_CALLS)
def test_operator_routes_need_the_token_for_reads_too(make_api, services, method, path):
    api = make_api(api_token=TOKEN)
    _error(api.request(method, path), 401, "UNAUTHENTICATED")
    _error(api.request(method, path, headers={"Authorization": "Bearer wrong"}), 403, "PERMISSION_DENIED")
    allowed = api.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert allowed.status_code in (200, 400, 404)  # past the guard: the route answered


def test_resource_reads_stay_open_in_token_mode(make_api):
    api = make_api(api_token=TOKEN)
    assert api.request("GET", f"/v1alpha/projects/{PROJECT}/locations/{LOCATION}/machineLearningRuns").status_code \
        == 200
