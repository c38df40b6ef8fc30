"""``InProcessBus``: the embedded message bus, with Pub/Sub's delivery contract.

Every subscription gets every message as the same push CloudEvent Pub/Sub would
send. A handler that raises is retried with exponential backoff; after
``max_attempts`` the message goes to ``<topic>-dead-letter`` with the
attributes Pub/Sub adds, and is kept in :attr:`InProcessBus.dead_letters`.
Delivery runs on background threads (:meth:`start`), several messages at once
as with push subscriptions, so that a long handler (an analysis) does not hold
up the others; messages that share an ordering key are delivered to a
subscription one at a time, in order, and a subscription may take fewer at once
(``max_in_flight``, as a function's instance limit would). :meth:`drain`
delivers on demand, one message at a time.

The queue is a table (``bus_queue``) in a SQLite file, the same one the
embedded document store uses, so delivery is at least once across restarts as
with Pub/Sub: each subscription's copy of a message is a row, leased while its
handler runs and deleted only once the handler returns. Rows leased by a
process that stopped (killed, crashed) are delivered again when the next bus
on the file starts (:meth:`start`), counting the interrupted delivery as an
attempt. Without a path the queue lives in memory and goes with the process.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import structlog

from mldiag.domain.envelopes import Message, pubsub_cloud_event
from mldiag.ports import EventHandler

log = structlog.get_logger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bus_queue (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,  -- publish order
    message_id   TEXT NOT NULL,
    subscription TEXT NOT NULL,
    topic        TEXT NOT NULL,
    ordering_key TEXT NOT NULL,
    attributes   TEXT NOT NULL,  -- JSON object
    data         BLOB NOT NULL,
    published    TEXT NOT NULL,  -- ISO 8601
    attempts     INTEGER NOT NULL DEFAULT 0,  -- deliveries started
    due          REAL NOT NULL,  -- when it may be delivered (next), in seconds since the epoch
    leased_by    TEXT  -- the bus delivering it now; NULL when waiting
);
CREATE INDEX IF NOT EXISTS bus_queue_waiting ON bus_queue (due, id) WHERE leased_by IS NULL;
"""
_COLUMNS = "id, message_id, subscription, topic, ordering_key, attributes, data, published, attempts"


@dataclass
class Subscription:
    name: str
    topic: str
    handler: EventHandler
    dead_letter_topic: str
    max_in_flight: int = 0  # deliveries at once to this subscription; 0: as many as the bus runs


@dataclass(frozen=True)
class _Delivery:
    row: int  # the queue row
    subscription: Subscription
    message: Message
    published: datetime


@dataclass(frozen=True)
class DeadLetter:
    subscription: str
    topic: str
    message: Message
    error: str


class InProcessBus:
    """A :class:`mldiag.ports.MessageBus` that delivers to handlers in this process, its queue in SQLite."""

    def __init__(
        self,
        project: str,
        *,
        path: Path | str = ":memory:",
        max_attempts: int = 5,
        min_backoff: float = 0.1,
        max_backoff: float = 10.0,
        dead_letter_suffix: str = "-dead-letter",
    ):
        self.project = project
        self.max_attempts = max_attempts
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.dead_letter_suffix = dead_letter_suffix
        self.published: dict[str, list[Message]] = defaultdict(list)
        self.dead_letters: list[DeadLetter] = []
        self._subscriptions: dict[str, list[Subscription]] = defaultdict(list)
        self._by_key: dict[tuple[str, str], Subscription] = {}  # (topic, name) -> subscription
        self._owner = uuid.uuid4().hex  # what this bus's leases say
        self._in_flight = 0
        self._ordered_in_flight: set[tuple[str, str]] = set()  # (subscription, ordering key) being delivered
        self._in_flight_to: Counter[str] = Counter()  # subscription -> deliveries being made to it
        self._max_in_flight: Counter[str] = Counter()  # subscription -> the most it may take at once (0: any)
        # One connection, used under the condition's lock: this bus is the file's one writer of its queue.
        self._condition = threading.Condition()
        self._db = _connect(path)
        self._workers: list[threading.Thread] = []
        self._stopping = False

    def subscribe(self, topic: str, handler: EventHandler, *, name: str = "", max_in_flight: int = 0) -> Subscription:
        with self._condition:
            default = f"{topic}-{getattr(handler, '__name__', 'handler')}"
            numbered = (f"{default}-{n}" for n in itertools.count(2))
            name = name or next(candidate for candidate in itertools.chain([default], numbered)
                                if (topic, candidate) not in self._by_key)
            if (topic, name) in self._by_key:
                raise ValueError(f"{topic} has a subscription named {name!r} already")
        subscription = Subscription(
            name=name,
            topic=topic,
            handler=handler,
            dead_letter_topic=topic + self.dead_letter_suffix,
            max_in_flight=max_in_flight,
        )
        with self._condition:
            self._subscriptions[topic].append(subscription)
            self._by_key[(topic, subscription.name)] = subscription
            self._max_in_flight[subscription.name] = max_in_flight
            self._condition.notify_all()
        return subscription

    def subscriptions(self, topic: str) -> list[Subscription]:
        with self._condition:
            return list(self._subscriptions.get(topic, []))

    def publish(
        self,
        topic: str,
        data: bytes,
        attributes: Mapping[str, str] | None = None,
        ordering_key: str = "",
    ) -> str:
        message = Message(
            data=bytes(data),
            attributes=dict(attributes or {}),
            message_id=uuid.uuid4().hex,
            ordering_key=ordering_key,
        )
        with self._condition, _transaction(self._db):
            self._insert(topic, message, datetime.now(timezone.utc))
            self._condition.notify_all()
        return message.message_id

    def _insert(self, topic: str, message: Message, published: datetime) -> None:
        """Queue a copy of ``message`` for each subscription of ``topic`` (in the caller's transaction)."""
        self.published[topic].append(message)
        rows = [(message.message_id, subscription.name, topic, message.ordering_key,
                 json.dumps(message.attributes), message.data, published.isoformat(), time.time())
                for subscription in self._subscriptions.get(topic, [])]
        self._db.executemany(
            "INSERT INTO bus_queue (message_id, subscription, topic, ordering_key, attributes, data, published, due) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def _backoff(self, attempt: int) -> float:
        return min(self.max_backoff, self.min_backoff * 2 ** (attempt - 1))

    def _deliver(self, delivery: _Delivery) -> None:
        subscription, message = delivery.subscription, delivery.message
        event = pubsub_cloud_event(
            project=self.project,
            topic=subscription.topic,
            subscription=subscription.name,
            message=message,
            published=delivery.published,
        )
        try:
            subscription.handler(event)
        except Exception as error:  # noqa: BLE001 - any failure is a nack, as with Pub/Sub
            self._nack(delivery, repr(error))
            return
        with self._condition, _transaction(self._db):
            self._db.execute("DELETE FROM bus_queue WHERE id = ?", (delivery.row,))

    def _nack(self, delivery: _Delivery, error: str) -> None:
        subscription, message = delivery.subscription, delivery.message
        attempt = message.delivery_attempt
        retried = attempt < self.max_attempts
        # A retry is routine (the handler has logged its failure); a dead letter is worth a warning.
        (log.info if retried else log.warning)(
            "delivery failed" + ("; retrying" if retried else "; sent to the dead-letter topic"),
            subscription=subscription.name, message_id=message.message_id, attempt=attempt, error=error)
        with self._condition, _transaction(self._db):
            if retried:
                self._db.execute("UPDATE bus_queue SET leased_by = NULL, due = ? WHERE id = ?",
                                 (time.time() + self._backoff(attempt), delivery.row))
            else:
                self._dead_letter(delivery, error)
            self._condition.notify_all()

    def _dead_letter(self, delivery: _Delivery, error: str) -> None:
        """Move the delivery to its dead-letter topic (in the caller's transaction)."""
        subscription, message = delivery.subscription, delivery.message
        self.dead_letters.append(DeadLetter(subscription.name, subscription.topic, message, error))
        self._db.execute("DELETE FROM bus_queue WHERE id = ?", (delivery.row,))
        letter = Message(
            data=message.data,
            attributes={
                **message.attributes,
                "CloudPubSubDeadLetterSourceDeliveryCount": str(message.delivery_attempt),
                "CloudPubSubDeadLetterSourceSubscription": subscription.name,
                "CloudPubSubDeadLetterSourceSubscriptionProject": self.project,
                "CloudPubSubDeadLetterSourceTopicPublishTime": delivery.published.isoformat(),
            },
            message_id=uuid.uuid4().hex,
        )
        self._insert(subscription.dead_letter_topic, letter, datetime.now(timezone.utc))

    def _subscribed(self) -> tuple[str, list[str]]:
        """SQL that keeps rows for this bus's subscriptions, and its parameters."""
        if not self._by_key:
            return "0", []
        pairs = ", ".join("(?, ?)" for _ in self._by_key)
        return f"(topic, subscription) IN (VALUES {pairs})", [part for key in self._by_key for part in key]

    def _take(self, now: float) -> _Delivery | None:
        """Lease the earliest waiting row whose time has come and whose ordering key and subscription are free."""
        subscribed, params = self._subscribed()
        clauses = ["leased_by IS NULL", "due <= ?", subscribed]
        params = [now, *params]
        full = [name for name, count in self._in_flight_to.items() if 0 < self._max_in_flight[name] <= count]
        if full:
            clauses.append(f"subscription NOT IN ({', '.join('?' * len(full))})")
            params.extend(full)
        for name, key in self._ordered_in_flight:
            clauses.append("NOT (subscription = ? AND ordering_key = ?)")
            params.extend((name, key))
        row = self._db.execute(f"SELECT {_COLUMNS} FROM bus_queue WHERE {' AND '.join(clauses)} "
                               "ORDER BY due, id LIMIT 1", params).fetchone()
        if row is None:
            return None
        self._db.execute("UPDATE bus_queue SET leased_by = ?, attempts = attempts + 1 WHERE id = ?",
                         (self._owner, row[0]))
        delivery = _delivery(row, self._by_key[(row[3], row[2])], attempt=row[8] + 1)
        self._in_flight += 1
        self._in_flight_to[delivery.subscription.name] += 1
        if delivery.message.ordering_key:
            self._ordered_in_flight.add(self._ordered(delivery))
        return delivery

    def _waiting(self) -> tuple[bool, float | None]:
        """Whether rows wait for this bus's subscriptions (leased by it included), and the earliest due."""
        subscribed, params = self._subscribed()
        waiting = self._db.execute(
            f"SELECT EXISTS (SELECT 1 FROM bus_queue WHERE {subscribed} AND (leased_by IS NULL OR leased_by = ?))",
            [*params, self._owner]).fetchone()[0]
        due = self._db.execute(f"SELECT due FROM bus_queue WHERE leased_by IS NULL AND {subscribed} "
                               "ORDER BY due LIMIT 1", params).fetchone()
        return bool(waiting), due[0] if due else None

    def _next_due(self, block_until: float | None) -> _Delivery | None:
        """Take the earliest delivery whose time has come and whose ordering key is free, waiting
        for one until ``block_until`` (a :func:`time.monotonic` time)."""
        with self._condition:
            while True:
                ready = self._take(time.time())
                if ready is not None:
                    return ready
                now = time.monotonic()
                if self._stopping or (block_until is not None and now >= block_until):
                    return None
                waiting, due = self._waiting()
                if block_until is None and not waiting and self._in_flight == 0 and not self._workers:
                    return None
                # A row due already waits for its ordering key or subscription: a finished delivery notifies.
                until_due = due - time.time() if due is not None else 0.0
                wake = now + (min(0.5, until_due) if until_due > 0 else 0.5)
                if block_until is not None:
                    wake = min(wake, block_until)
                self._condition.wait(max(0.0, wake - now))

    @staticmethod
    def _ordered(delivery: _Delivery) -> tuple[str, str]:
        """What must not be delivered twice at once: the subscription and the ordering key (when set)."""
        key = delivery.message.ordering_key
        return (delivery.subscription.name, key) if key else ("", "")

    def _done(self, delivery: _Delivery) -> None:
        with self._condition:
            self._in_flight -= 1
            self._in_flight_to[delivery.subscription.name] -= 1
            self._ordered_in_flight.discard(self._ordered(delivery))
            self._condition.notify_all()

    def queued(self) -> int:
        """Deliveries waiting or under way for this bus's subscriptions."""
        subscribed, params = self._subscribed()
        with self._condition:
            return self._db.execute(f"SELECT COUNT(*) FROM bus_queue WHERE {subscribed} "
                                    "AND (leased_by IS NULL OR leased_by = ?)", [*params, self._owner]).fetchone()[0]

    def drain(self, timeout: float = 30.0) -> int:
        """Deliver until nothing is queued (backoffs included); returns deliveries made.

        Raises ``TimeoutError`` if work is still pending after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        delivered = 0
        while True:
            with self._condition:
                idle = not self._waiting()[0] and self._in_flight == 0
            if idle:
                return delivered
            delivery = self._next_due(block_until=deadline)
            if delivery is None:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"bus not idle after {timeout}s: {self.queued()} queued")
                continue
            try:
                self._deliver(delivery)
                delivered += 1
            finally:
                self._done(delivery)

    def recover(self) -> int:
        """Deliver again what a stopped process was delivering; returns how many rows it held.

        Its deliveries count as attempts: a row that has had its last one goes to the dead-letter topic.
        """
        with self._condition, _transaction(self._db):
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM bus_queue WHERE leased_by IS NOT NULL "
                                    "AND leased_by != ?", (self._owner,)).fetchall()
            for row in rows:
                subscription = self._by_key.get((row[3], row[2]))
                if subscription is not None and row[8] >= self.max_attempts:
                    self._dead_letter(_delivery(row, subscription, attempt=row[8]),
                                      "the process delivering it stopped during its last attempt")
            self._db.execute("UPDATE bus_queue SET leased_by = NULL, due = ? WHERE leased_by IS NOT NULL "
                             "AND leased_by != ?", (time.time(), self._owner))
            self._condition.notify_all()
        if rows:
            log.info("deliveries interrupted by a stop will be made again", count=len(rows))
        return len(rows)

    def start(self, workers: int = 4) -> None:
        """Deliver in the background, up to ``workers`` messages at once, until :meth:`stop`.

        What a stopped process was delivering is delivered again (:meth:`recover`): a file holds one
        delivering bus at a time.
        """
        if self._workers:
            return
        self.recover()
        self._stopping = False
        self._workers = [threading.Thread(target=self._run, name=f"mldiag-bus-{n}", daemon=True)
                         for n in range(workers)]
        for worker in self._workers:
            worker.start()

    def _run(self) -> None:
        while True:
            delivery = self._next_due(block_until=float("inf"))
            if delivery is None:
                return
            try:
                self._deliver(delivery)
            finally:
                self._done(delivery)

    def stop(self, interrupt: Callable[[], object] | None = None) -> None:
        """Stop delivering: no delivery starts any more, and those under way finish first (for up to 10 s
        each; ``interrupt``, called once nothing new can start, may hurry them); the rest wait in the queue."""
        if not self._workers:
            return
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if interrupt is not None:
            interrupt()
        for worker in self._workers:
            worker.join(timeout=10)
        self._workers = []


def _connect(path: Path | str) -> sqlite3.Connection:
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
    if str(path) != ":memory:":
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
    connection.executescript(_SCHEMA)
    return connection


@contextlib.contextmanager
def _transaction(connection: sqlite3.Connection) -> Iterator[None]:
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _delivery(row: tuple[Any, ...], subscription: Subscription, attempt: int) -> _Delivery:
    row_id, message_id, _, _, ordering_key, attributes, data, published, _ = row
    message = Message(data=bytes(data), attributes=json.loads(attributes), message_id=message_id,
                      delivery_attempt=attempt, ordering_key=ordering_key)
    return _Delivery(row_id, subscription, message, datetime.fromisoformat(published))
