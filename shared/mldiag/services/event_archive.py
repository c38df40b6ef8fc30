"""The event archive, and the one way every function handles a CloudEvent.

:func:`handle` wraps each handler: it archives the raw event (id, type, source,
subject, time, which function, outcome, error), skips an event this function
already applied (at-least-once delivery), and sorts failures in two:

* a :class:`~mldiag.domain.PermanentFailure` or :class:`~mldiag.domain.InvalidArgument`
  is recorded as ``rejected`` and acknowledged — retrying cannot help;
* anything else is recorded as ``failed`` and re-raised, so Pub/Sub or Eventarc
  retries with backoff and finally dead-letters it.

:func:`handle_atomically` does the same for a handler whose writes are one
transaction: the event's record is read and written in that transaction, so an
event applied is archived with what it did in one commit (registration, which
runs once per uploaded file).

Archived events expire after the retention period (Firestore TTL on
``expireAt`` in the cloud, :func:`prune` locally) and can be replayed
(:mod:`mldiag.services.operator.replay`). The payload is kept as the
function received it, without encoding it again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import pydantic_core
from cloudevents.conversion import to_json
from cloudevents.http import CloudEvent
from pydantic import Field

from mldiag.domain.errors import InvalidArgument, PermanentFailure
from mldiag.domain.types import CamelModel, Timestamp
from mldiag.domain.clock import format_timestamp
from mldiag.logs import event_context, get_logger
from mldiag.ports import BlobStore, DocumentStore, EncodedDocument, EventHandler, OrderBy, Transaction, Where
from mldiag.services import unit_of_work

if TYPE_CHECKING:
    from mldiag.services.dependencies import Transacting
    from mldiag.services.unit_of_work import UnitOfWork

COLLECTION = "events"
EXPIRE_AT = "expireAt"  # the TTL field (terraform/firestore.tf)
RAW_INLINE_LIMIT = 64 * 1024  # Firestore documents stop at 1 MiB; bigger raw events go to the bucket
MAX_ERROR_CHARS = 2000
_UNSAFE_ID = re.compile(r"[^\w.-]")  # \w is what str.isalnum() accepts, and "_"

log = get_logger(__name__)


class Outcome(StrEnum):
    RECEIVED = "received"  # being handled (or the handler died without a word)
    OK = "ok"
    IGNORED = "ignored"  # understood, nothing to do (e.g. an object outside any profile folder)
    REJECTED = "rejected"  # permanently bad: recorded and acknowledged
    FAILED = "failed"  # transient: re-raised for a retry
    DUPLICATE = "duplicate"  # never stored; what handle() returns for an already-applied event


FINAL_OUTCOMES = {Outcome.OK, Outcome.IGNORED, Outcome.REJECTED}


class ArchivedEvent(CamelModel):
    """One CloudEvent as one function received it."""

    id: str
    function: str
    type: str = ""
    source: str = ""
    subject: str = ""
    time: Timestamp = None
    outcome: Outcome = Outcome.RECEIVED
    detail: str = ""
    error: str = ""
    attempts: int = 0
    first_received: Timestamp = None
    last_attempt: Timestamp = None
    expire_at: Timestamp = None
    raw: dict[str, Any] | None = None
    raw_uri: str = ""
    replays: int = 0
    labels: dict[str, str] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return archive_key(self.function, self.id)


class Ignored(Exception):
    """Raised by a handler for an event it understood and has nothing to do with."""


@lru_cache(maxsize=1024)  # an event's key is asked for as its record is read, made and written
def archive_key(function: str, event_id: str) -> str:
    # Event ids are chosen by the sender: keep keys to a safe alphabet and length.
    return f"{function}:{_UNSAFE_ID.sub('_', event_id)[:200]}"


def raw_event(event: CloudEvent) -> dict[str, Any]:
    """The event in the CloudEvents structured JSON form: its attributes and its data as received (bytes
    data as the SDK writes them, base64)."""
    data = event.get_data()
    if isinstance(data, (bytes, bytearray, memoryview)):
        structured: dict[str, Any] = json.loads(to_json(event))
        return structured
    raw = dict(event.get_attributes())
    if data is not None:
        raw["data"] = data
    return raw


def _named_in_message(event: CloudEvent) -> dict[str, str]:
    """The run and session a Pub/Sub message names in its attributes (an analysis request does)."""
    data = event.get_data()
    message = data.get("message") if isinstance(data, dict) else None
    attributes = message.get("attributes") if isinstance(message, dict) else None
    if not isinstance(attributes, dict):
        return {}
    return {key: str(attributes[key]) for key in ("run", "session") if attributes.get(key)}


def _attribute(event: CloudEvent, name: str) -> str:
    value = event.get(name)
    return "" if value is None else str(value)[:1024]


class EventArchive:
    """Reads and writes archived events in the document store (large payloads in the bucket)."""

    def __init__(self, store: DocumentStore, blobs: BlobStore, bucket: str, retention: timedelta,
                 now: Callable[[], datetime]):
        self.store, self.blobs, self.bucket = store, blobs, bucket
        self.retention = retention
        self._now = now

    def get(self, function: str, event_id: str) -> ArchivedEvent | None:
        document = self.store.get(COLLECTION, archive_key(function, event_id))
        return None if document is None else ArchivedEvent.model_validate(document)

    def attempts(self, function: str, event_id: str) -> int:
        """How many deliveries of the event ``function`` has received, counting the one in hand."""
        record = self.get(function, event_id)
        return 0 if record is None else record.attempts

    def save(self, record: ArchivedEvent) -> None:
        self.store.set(COLLECTION, record.key, _document(record))

    def received(self, function: str, event: CloudEvent) -> ArchivedEvent:
        """Record a delivery attempt; returns the record as it now stands."""
        record = self._attempt(self.get(function, str(event["id"])), function, event)
        if record.outcome not in FINAL_OUTCOMES:
            self.save(record)
        return record

    def _attempt(self, record: ArchivedEvent | None, function: str, event: CloudEvent) -> ArchivedEvent:
        """``record`` (a new one where None) counting one more delivery, unless the event is already handled."""
        now = self._now()
        if record is None:
            key = archive_key(function, str(event["id"]))
            raw, raw_uri = self._stored_raw(key, event)
            return ArchivedEvent(
                id=str(event["id"]), function=function, type=_attribute(event, "type"),
                source=_attribute(event, "source"), subject=_attribute(event, "subject"),
                time=event.get("time"), first_received=now, attempts=1, last_attempt=now,
                expire_at=now + self.retention, raw=raw, raw_uri=raw_uri,
            )
        if record.outcome in FINAL_OUTCOMES:
            return record
        record.attempts += 1
        record.last_attempt = now
        record.expire_at = now + self.retention
        record.outcome = Outcome.RECEIVED
        return record

    def received_in(self, transaction: Transaction, function: str, event: CloudEvent) -> ArchivedEvent | Outcome:
        """:meth:`received`, read in a caller's transaction and not yet written (:meth:`finish_in` writes it); for an
        event already handled, the outcome it was handled with, its record not loaded."""
        document = transaction.get(COLLECTION, archive_key(function, str(event["id"])))
        if document is not None and document.get("outcome") in FINAL_OUTCOMES:
            return Outcome(document["outcome"])
        return self._attempt(None if document is None else ArchivedEvent.model_validate(document), function, event)

    def finish_in(self, transaction: Transaction, record: ArchivedEvent, outcome: Outcome, detail: str = "") -> None:
        """:meth:`finish`, staged in a caller's transaction."""
        record.outcome, record.detail = outcome, detail[:MAX_ERROR_CHARS]
        transaction.set(COLLECTION, record.key, _document(record))

    def _stored_raw(self, key: str, event: CloudEvent) -> tuple[dict[str, Any] | None, str]:
        """The event's payload to keep in its record, or where in the bucket it was kept when too big for it."""
        raw = raw_event(event)
        encoded = pydantic_core.to_json(raw)
        if len(encoded) <= RAW_INLINE_LIMIT:
            return raw, ""
        raw_uri = f"gs://{self.bucket}/_mldiag/events/{key.replace(':', '/')}.json"
        self.blobs.write_bytes(raw_uri, encoded, "application/json", if_absent=True)
        return None, raw_uri

    def load_raw(self, record: ArchivedEvent) -> dict[str, Any]:
        if record.raw is not None:
            return record.raw
        if record.raw_uri:
            stored: dict[str, Any] = json.loads(self.blobs.read_bytes(record.raw_uri))
            return stored
        raise PermanentFailure(f"event {record.key} has no stored payload")

    def finish(self, record: ArchivedEvent, outcome: Outcome, detail: str = "", error: str = "") -> None:
        record.outcome = outcome
        record.detail = detail[:MAX_ERROR_CHARS]
        record.error = error[:MAX_ERROR_CHARS]
        self.save(record)

    def list(self, *, function: str = "", type: str = "", outcome: str = "",
             since: datetime | None = None, until: datetime | None = None, limit: int = 100,
             exclude_function: str = "") -> list[ArchivedEvent]:
        """The newest ``limit`` events that match, leaving out those ``exclude_function`` handled."""
        where: list[Where] = []
        if function:
            where.append(Where("function", "==", function))
        if type:
            where.append(Where("type", "==", type))
        if outcome:
            where.append(Where("outcome", "==", outcome))
        if since:
            where.append(Where("firstReceived", ">=", format_timestamp(since)))
        if until:
            where.append(Where("firstReceived", "<", format_timestamp(until)))
        found: list[ArchivedEvent] = []
        offset = 0
        while len(found) < limit:  # the excluded are dropped here: a store's != queries need their own index
            documents = self.store.query(COLLECTION, where=where, order_by=[OrderBy("firstReceived", True)],
                                         limit=limit, offset=offset)
            found += [event for event in map(ArchivedEvent.model_validate, documents)
                      if not exclude_function or event.function != exclude_function]
            if len(documents) < limit:
                break
            offset += limit
        return found[:limit]

    def prune(self) -> int:
        """Delete records past their ``expireAt`` (Firestore's TTL does this by itself in the cloud)."""
        expired = self.store.query(COLLECTION, where=[Where(EXPIRE_AT, "<", self._now())])
        for document in expired:
            record = ArchivedEvent.model_validate(document)
            if record.raw_uri:
                self.blobs.delete(record.raw_uri)
            self.store.delete(COLLECTION, record.key)
        return len(expired)


def _document(record: ArchivedEvent) -> EncodedDocument:
    """The record's document as its model encodes it; the expiry, there as its text, a datetime for a store that
    keeps values (Firestore's TTL deletes only on a Timestamp: any other type silently disables it)."""
    text = record.model_dump_json(by_alias=True, exclude_none=True)
    return EncodedDocument(text, {EXPIRE_AT: record.expire_at} if record.expire_at is not None else None)


def handle(archive: EventArchive, function: str, event: CloudEvent, work: EventHandler) -> Outcome:
    """Run ``work`` on ``event`` once per (function, event id), archiving what happened.

    ``work`` returns an optional one-line detail for the record, raises
    :class:`Ignored` for events it has nothing to do with, and raises
    :class:`PermanentFailure`/:class:`InvalidArgument` for events that can never succeed.
    """
    with event_context(event_id=str(event["id"]), function=function, event_type=_attribute(event, "type"),
                       **_named_in_message(event)):
        record = archive.received(function, event)
        if record.outcome in FINAL_OUTCOMES:
            log.info("event already handled; skipping", outcome=record.outcome.value)
            return Outcome.DUPLICATE
        try:
            result = work(event)
            detail = result if isinstance(result, str) else ""
        except Ignored as ignored:
            archive.finish(record, Outcome.IGNORED, detail=str(ignored))
            log.info("event ignored", reason=str(ignored))
            return Outcome.IGNORED
        except (PermanentFailure, InvalidArgument) as bad:
            archive.finish(record, Outcome.REJECTED, error=str(bad))
            log.warning("event rejected", error=str(bad))
            return Outcome.REJECTED
        except Exception as error:
            archive.finish(record, Outcome.FAILED, error=f"{type(error).__name__}: {error}")
            log.error("event failed; will be retried", error=f"{type(error).__name__}: {error}",
                      attempt=record.attempts)
            raise
        archive.finish(record, Outcome.OK, detail=detail)
        log.info("event handled", detail=detail)
        return Outcome.OK



# A handler's unit of work: it returns a one-line detail for the record.
Transactional = Callable[["UnitOfWork"], str]


def handle_atomically(archive: EventArchive, services: Transacting, function: str, event: CloudEvent,
                      prepare: Callable[[CloudEvent], Transactional]) -> Outcome:
    """:func:`handle` for a handler whose writes are one unit of work (on ``services``): ``prepare`` reads the
    event and returns that work, and the event's record is read and written in it, so an applied event is one
    commit. ``prepare`` runs inside the unit once its record shows the event is not yet handled, so a redelivery
    costs one read.

    A handler that raises is archived as :func:`handle` archives it (its own writes undone); one whose messages
    could not be published once committed is recorded FAILED and re-raised, so that its retry publishes them.
    """
    with event_context(event_id=str(event["id"]), function=function, event_type=_attribute(event, "type"),
                       **_named_in_message(event)):
        def apply(unit: UnitOfWork) -> tuple[ArchivedEvent | Outcome, str]:
            record = archive.received_in(unit.transaction, function, event)
            if isinstance(record, Outcome):  # already handled: nothing to do after the commit either
                return record, ""
            detail = prepare(event)(unit)
            archive.finish_in(unit.transaction, record, Outcome.OK, detail)
            return record, detail

        try:
            committed = unit_of_work.commit(services, apply)
        except Exception as error:  # noqa: BLE001 - archived and sorted as handle() sorts it
            return handle(archive, function, event, _raising(error))
        record, detail = committed.result
        if isinstance(record, Outcome):
            log.info("event already handled; skipping", outcome=record.value)
            return Outcome.DUPLICATE
        try:
            committed.publish()
        except Exception as error:
            # Committed but not done (a request staged, not published): the platform's retry finishes it.
            archive.finish(record, Outcome.FAILED, error=f"{type(error).__name__}: {error}")
            log.error("event failed; will be retried", error=f"{type(error).__name__}: {error}",
                      attempt=record.attempts)
            raise
        log.info("event handled", detail=detail)
        return Outcome.OK


def _raising(error: Exception) -> EventHandler:
    """A handler that fails as the first attempt did."""
    def again(event: CloudEvent) -> str:
        raise error

    return again
