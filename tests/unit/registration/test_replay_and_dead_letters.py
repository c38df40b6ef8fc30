"""Replay after a fix, dry runs that change nothing, and dead letters with their reason."""

from __future__ import annotations

import json

from mldiag.entrypoints import handlers

from mldiag.services import registration
from mldiag.config import ANALYSIS_REQUESTS, MAINTENANCE_TICKS, dead_letter_topic
from mldiag.services.operator.dead_letters import list_dead_letters
from mldiag.domain import ProfilerSession
from mldiag.services.event_archive import Outcome
from mldiag.domain.envelopes import encode_json, storage_finalized_event
from mldiag.services.operator.replay import Target, find_record, replay_one

PROFILE = "exp/run1/plugins/profile/s1/host0.xplane.pb"


def _event(size: int = 10):
    return storage_finalized_event({"bucket": "profiles", "name": PROFILE, "generation": "7", "size": str(size)})


def _snapshot(services) -> list:
    return [sorted(map(json.dumps, services.store.query(c)))
            for c in ("events", "profilerSessions", "machineLearningRuns", "outbox")]


def test_replay_after_fixing_the_cause_processes_the_event(embedded, monkeypatch):
    monkeypatch.setattr(registration, "parse_finalized", _broken)
    event = _event()
    try:
        handlers.register_session(embedded, event)
    except RuntimeError:
        pass
    record = find_record(embedded, event["id"])
    assert record.outcome is Outcome.FAILED and "bug in this version" in record.error

    before = _snapshot(embedded)
    dry = replay_one(embedded, record, Target.local, dry_run=True, handlers=handlers.EVENT_HANDLERS)
    assert dry.result == "would re-deliver to register_session"
    assert _snapshot(embedded) == before  # a dry run changes nothing

    monkeypatch.undo()  # the fix is deployed
    assert replay_one(embedded, record, Target.local, dry_run=False, handlers=handlers.EVENT_HANDLERS).result == "ok"
    assert len(embedded.store.query(ProfilerSession.collection)) == 1
    replayed = find_record(embedded, f"register_session:{event['id']}")
    assert replayed.outcome is Outcome.OK and replayed.replays == 1

    again = replay_one(embedded, replayed, Target.local, dry_run=False, handlers=handlers.EVENT_HANDLERS)
    assert again.result == "no-op: was already ok"


def _broken(data, max_bytes):
    raise RuntimeError("bug in this version")


def test_storage_events_cannot_go_to_a_topic(embedded):
    handlers.register_session(embedded, _event())
    record = find_record(embedded, _event()["id"])
    try:
        replay_one(embedded, record, Target.topic, dry_run=True, handlers=handlers.EVENT_HANDLERS)
    except Exception as error:  # noqa: BLE001
        assert "did not come from a Pub/Sub topic" in str(error)
    else:
        raise AssertionError("expected a refusal")


def test_failing_subscriber_ends_in_dead_letters_with_its_error(embedded):
    bus = embedded.bus

    def always_fails(event):
        return handlers.EVENT_HANDLERS["maintenance"](embedded, event)

    def record(event):
        return handlers.record_dead_letter(embedded, event)

    bus.subscribe(MAINTENANCE_TICKS, always_fails, name="maintenance")
    bus.subscribe(dead_letter_topic(MAINTENANCE_TICKS), record, name="dead-letters")
    embedded.store.set("outbox", "poison", {"key": "poison", "topic": ANALYSIS_REQUESTS,
                                            "stagedAt": "2000-01-01T00:00:00.000000Z"})  # no data: KeyError
    message_id = bus.publish(MAINTENANCE_TICKS, encode_json({"tick": 1}))
    bus.drain()

    letters = list_dead_letters(embedded)
    assert len(letters) == 1
    assert letters[0]["originalEvent"] == f"maintenance:{message_id}"
    assert letters[0]["deliveryCount"] == "3"
    assert letters[0]["sourceSubscription"] == "maintenance"
    assert "KeyError" in letters[0]["lastError"]
    archived = find_record(embedded, f"maintenance:{message_id}")
    assert archived.outcome is Outcome.FAILED and archived.attempts == 3

    # The topic replay re-publishes the message as new, so a fixed function sees it afresh.
    embedded.store.delete("outbox", "poison")
    result = replay_one(embedded, archived, Target.topic, dry_run=False, handlers=handlers.EVENT_HANDLERS)
    assert result.result.startswith(f"re-published to {MAINTENANCE_TICKS}")
    bus.drain()
    outcomes = [r.outcome for r in embedded.events.list(function="maintenance")]
    assert sorted(outcomes) == [Outcome.FAILED, Outcome.OK]
