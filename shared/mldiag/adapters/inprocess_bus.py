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
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

import structlog
from cloudevents.http import CloudEvent

from mldiag.messages import Message, pubsub_cloud_event

Handler = Callable[[CloudEvent], object]
log = structlog.get_logger(__name__)


@dataclass
class Subscription:
    name: str
    topic: str
    handler: Handler
    dead_letter_topic: str
    max_in_flight: int = 0  # deliveries at once to this subscription; 0: as many as the bus runs


@dataclass(order=True)
class _Delivery:
    due: float
    sequence: int
    subscription: Subscription = field(compare=False)
    message: Message = field(compare=False)
    published: datetime = field(compare=False)


@dataclass(frozen=True)
class DeadLetter:
    subscription: str
    topic: str
    message: Message
    error: str


class InProcessBus:
    """A :class:`mldiag.ports.MessageBus` that delivers to handlers in this process."""

    def __init__(
        self,
        project: str,
        *,
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
        self._queue: list[_Delivery] = []
        self._sequence = itertools.count()
        self._in_flight = 0
        self._ordered_in_flight: set[tuple[str, str]] = set()  # (subscription, ordering key) being delivered
        self._in_flight_to: Counter[str] = Counter()  # subscription -> deliveries being made to it
        self._condition = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._stopping = False

    def subscribe(self, topic: str, handler: Handler, *, name: str = "", max_in_flight: int = 0) -> Subscription:
        subscription = Subscription(
            name=name or f"{topic}-{getattr(handler, '__name__', 'handler')}",
            topic=topic,
            handler=handler,
            dead_letter_topic=topic + self.dead_letter_suffix,
            max_in_flight=max_in_flight,
        )
        with self._condition:
            self._subscriptions[topic].append(subscription)
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
        published = datetime.now(timezone.utc)
        with self._condition:
            self.published[topic].append(message)
            for subscription in self._subscriptions.get(topic, []):
                self._enqueue(subscription, message, published, delay=0.0)
            self._condition.notify_all()
        return message.message_id

    def _enqueue(self, subscription: Subscription, message: Message, published: datetime, delay: float) -> None:
        heapq.heappush(
            self._queue,
            _Delivery(time.monotonic() + delay, next(self._sequence), subscription, message, published),
        )

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
            self._nack(delivery, error)

    def _nack(self, delivery: _Delivery, error: Exception) -> None:
        subscription, message = delivery.subscription, delivery.message
        attempt = message.delivery_attempt
        retried = attempt < self.max_attempts
        # A retry is routine (the handler has logged its failure); a dead letter is worth a warning.
        (log.info if retried else log.warning)(
            "delivery failed" + ("; retrying" if retried else "; sent to the dead-letter topic"),
            subscription=subscription.name, message_id=message.message_id, attempt=attempt, error=repr(error))
        if retried:
            retry = Message(message.data, message.attributes, message.message_id, message.publish_time,
                            attempt + 1, message.ordering_key)
            with self._condition:
                self._enqueue(subscription, retry, delivery.published, self._backoff(attempt))
                self._condition.notify_all()
            return
        with self._condition:
            self.dead_letters.append(DeadLetter(subscription.name, subscription.topic, message, repr(error)))
        self.publish(
            subscription.dead_letter_topic,
            message.data,
            {
                **message.attributes,
                "CloudPubSubDeadLetterSourceDeliveryCount": str(attempt),
                "CloudPubSubDeadLetterSourceSubscription": subscription.name,
                "CloudPubSubDeadLetterSourceSubscriptionProject": self.project,
                "CloudPubSubDeadLetterSourceTopicPublishTime": delivery.published.isoformat(),
            },
        )

    def _next_due(self, block_until: float | None) -> _Delivery | None:
        """Take the earliest delivery whose time has come and whose ordering key is free, waiting
        for one until ``block_until``."""
        with self._condition:
            while True:
                now = time.monotonic()
                ready = next((delivery for delivery in sorted(self._queue)
                              if delivery.due <= now and self._may_deliver(delivery)), None)
                if ready is not None:
                    self._queue.remove(ready)
                    heapq.heapify(self._queue)
                    self._in_flight += 1
                    self._in_flight_to[ready.subscription.name] += 1
                    if ready.message.ordering_key:
                        self._ordered_in_flight.add(self._ordered(ready))
                    return ready
                if self._stopping or (block_until is not None and now >= block_until):
                    return None
                if block_until is None and not self._queue and self._in_flight == 0 and not self._workers:
                    return None
                wake = self._queue[0].due if self._queue and self._queue[0].due > now else now + 0.5
                if block_until is not None:
                    wake = min(wake, block_until)
                self._condition.wait(max(0.0, wake - now))

    def _may_deliver(self, delivery: _Delivery) -> bool:
        subscription = delivery.subscription
        if subscription.max_in_flight and self._in_flight_to[subscription.name] >= subscription.max_in_flight:
            return False
        return self._ordered(delivery) not in self._ordered_in_flight

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

    def drain(self, timeout: float = 30.0) -> int:
        """Deliver until nothing is queued (backoffs included); returns deliveries made.

        Raises ``TimeoutError`` if work is still pending after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        delivered = 0
        while True:
            with self._condition:
                idle = not self._queue and self._in_flight == 0
            if idle:
                return delivered
            delivery = self._next_due(block_until=deadline)
            if delivery is None:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"bus not idle after {timeout}s: {len(self._queue)} queued")
                continue
            try:
                self._deliver(delivery)
                delivered += 1
            finally:
                self._done(delivery)

    def start(self, workers: int = 4) -> None:
        """Deliver in the background, up to ``workers`` messages at once, until :meth:`stop`."""
        if self._workers:
            return
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

    def stop(self) -> None:
        if not self._workers:
            return
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        for worker in self._workers:
            worker.join(timeout=10)
        self._workers = []
