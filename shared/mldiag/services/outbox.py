"""The transactional outbox: a message is decided in the same transaction as the state it follows.

A handler that changes state and then publishes can die in between; the state
would say "analysis requested" while no request exists. So the message is
written to the ``outbox`` collection inside the state's transaction, published
after the commit, and then removed. Whoever finds an entry left behind (the
retried event, or the periodic sweep) publishes it again. Consumers are
idempotent, so the rare duplicate (a crash after publishing, before removal) is
harmless; a lost message is impossible.

Use cases do not stage or flush by hand: :mod:`mldiag.services.unit_of_work` does
both for the messages a unit of work publishes, and sweeps up what crashed writers left.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import structlog

from mldiag.domain.clock import format_timestamp
from mldiag.ports import DocumentStore, MessageBus, Transaction, Where

if TYPE_CHECKING:
    from mldiag.domain.messages import Outgoing

COLLECTION = "outbox"
log = structlog.get_logger(__name__)


def stage(transaction: Transaction, key: str, message: Outgoing, now: datetime) -> None:
    """Write the message into the outbox as part of ``transaction``; ``key`` makes it unique."""
    transaction.set(COLLECTION, key, {
        "key": key,
        "topic": message.topic,
        "data": message.data.decode(),
        "attributes": dict(message.attributes),
        "orderingKey": message.ordering_key,
        "stagedAt": format_timestamp(now),
    })


def flush(store: DocumentStore, bus: MessageBus, key: str) -> bool:
    """Publish and remove one staged message; returns whether there was one."""
    entry = store.get(COLLECTION, key)
    if entry is None:
        return False
    message_id = bus.publish(entry["topic"], entry["data"].encode(), entry["attributes"], entry["orderingKey"])
    store.delete(COLLECTION, key)
    log.info("published", topic=entry["topic"], message_id=message_id, outbox_key=key)
    return True


def flush_stale(store: DocumentStore, bus: MessageBus, now: Callable[[], datetime], older_than: timedelta) -> int:
    """Publish entries staged longer than ``older_than`` ago: their writer evidently died before publishing them."""
    cutoff = format_timestamp(now() - older_than)
    stale = store.query(COLLECTION, where=[Where("stagedAt", "<", cutoff)], limit=500)
    return sum(flush(store, bus, entry["key"]) for entry in stale)
