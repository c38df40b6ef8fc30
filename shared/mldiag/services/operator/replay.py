"""Replaying archived events, for debugging and for recovery after a fix.

``local`` re-delivers the archived CloudEvent to the same handler in this
process; ``topic`` re-publishes a Pub/Sub message to the topic it came from, so
the deployed function receives it as new. An event that was applied is a no-op
by idempotency; one that failed or was rejected is handled again. A dry run
only says what would happen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar

from cloudevents.conversion import from_dict
from cloudevents.http import CloudEvent

from mldiag.config import FUNCTIONS
from mldiag.domain.envelopes import PUBSUB_PUBLISHED, message_from_cloud_event
from mldiag.domain.errors import InvalidArgument, NotFound
from mldiag.services.dependencies import Archiving, Publishing
from mldiag.services.event_archive import ArchivedEvent, Outcome


class ReplayPorts(Publishing, Archiving, Protocol):
    """What a replay reads itself; a local re-delivery hands the handler the services it was given."""


# The services a replay is given, whatever else they hold: the handlers take the same.
Given = TypeVar("Given", bound=ReplayPorts)


_REPROCESSED = {Outcome.FAILED, Outcome.REJECTED, Outcome.RECEIVED}


class Target(StrEnum):
    local = "local"
    topic = "topic"


@dataclass(frozen=True)
class ReplayResult:
    key: str
    function: str
    before: str
    result: str


def _event(services: ReplayPorts, record: ArchivedEvent) -> CloudEvent:
    return from_dict(CloudEvent, services.events.load_raw(record))


def _source_topic(event: CloudEvent) -> str:
    source = str(event["source"])
    if event["type"] != PUBSUB_PUBLISHED or "/topics/" not in source:
        raise InvalidArgument(f"event {event['id']} did not come from a Pub/Sub topic; replay it --to local")
    return source.rsplit("/topics/", 1)[1]


def replay_one(services: Given, record: ArchivedEvent, target: Target, dry_run: bool,
               handlers: Mapping[str, Callable[[Given, CloudEvent], object]]) -> ReplayResult:
    """Replay one archived event; ``handlers`` are the functions' handlers, by name, for a local re-delivery."""
    handler = handlers.get(record.function)
    if handler is None:
        raise NotFound(f"no handler named {record.function!r} in this version")
    event = _event(services, record)
    before = record.outcome.value
    if target is Target.topic:
        topic = _source_topic(event)
        if dry_run:
            return ReplayResult(record.key, record.function, before, f"would re-publish to {topic}")
        message = message_from_cloud_event(event)
        try:
            message_id = services.bus.publish(topic, message.data, message.attributes, message.ordering_key)
        except Exception as error:  # noqa: BLE001 - e.g. no right to publish there: report it and go on
            return ReplayResult(record.key, record.function, before,
                                f"failed to re-publish to {topic}: {type(error).__name__}: {error}")
        return ReplayResult(record.key, record.function, before, f"re-published to {topic} as {message_id}")

    if record.outcome not in _REPROCESSED:
        verb = "would be" if dry_run else "was"
        return ReplayResult(record.key, record.function, before, f"no-op: {verb} already {before}")
    if dry_run:
        return ReplayResult(record.key, record.function, before, f"would re-deliver to {record.function}")
    record.outcome = Outcome.RECEIVED
    record.replays += 1
    services.events.save(record)
    try:
        outcome = handler(services, event)
    except Exception as error:  # noqa: BLE001 - the archive has the details; report and go on
        return ReplayResult(record.key, record.function, before, f"failed again: {type(error).__name__}: {error}")
    return ReplayResult(record.key, record.function, before, getattr(outcome, "value", str(outcome)))


def find_record(services: ReplayPorts, key_or_id: str) -> ArchivedEvent:
    """An archived event by ``function:id`` key, or by bare event id when that is unambiguous."""
    function, _, event_id = key_or_id.partition(":")
    if function in FUNCTIONS and event_id:
        record = services.events.get(function, event_id)
        if record is None:
            raise NotFound(f"no archived event {key_or_id!r}")
        return record
    matches = [r for f in FUNCTIONS if (r := services.events.get(f, key_or_id)) is not None]
    if not matches:
        raise NotFound(f"no archived event {key_or_id!r}")
    if len(matches) > 1:
        keys = ", ".join(r.key for r in matches)
        raise InvalidArgument(f"event id {key_or_id!r} reached several functions; use one of: {keys}")
    return matches[0]
