"""The event archive's ``expireAt`` reaches the store as a timestamp, so Firestore's TTL deletes it.

Firestore's TTL policy only deletes documents whose TTL field is a Timestamp; a string
disables expiration without an error. The Firestore client stores a ``datetime`` as a
Timestamp (tests/contract checks this against the emulator), so here the value handed to
the store must be a ``datetime``; the embedded store keeps pruning by it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from mldiag.adapters.sqlite_store import SqliteStore
from mldiag.eventlog import COLLECTION, EXPIRE_AT, EventArchive
from mldiag.messages import storage_finalized_event
from mldiag.ports import Document

RETENTION = timedelta(days=30)


class RecordingStore(SqliteStore):
    """The embedded store, remembering every document it was handed."""

    def __init__(self, path):
        super().__init__(path)
        self.handed: list[Document] = []

    def set(self, collection: str, key: str, document: Document) -> None:
        self.handed.append(document)
        super().set(collection, key, document)


def _event(name: str):
    return storage_finalized_event({"bucket": "profiles", "name": name, "generation": "1", "size": "1"})


def test_expire_at_is_handed_to_the_store_as_a_datetime(embedded, clock, tmp_path):
    store = RecordingStore(tmp_path / "store.sqlite3")
    archive = EventArchive(store, embedded.blobs, "profiles", RETENTION, clock)
    archive.received("register_session", _event("a/plugins/profile/s/h.xplane.pb"))
    expire_at = store.handed[-1][EXPIRE_AT]
    assert isinstance(expire_at, datetime) and expire_at == clock() + RETENTION


def test_a_record_reads_back_with_its_expiry(embedded, clock):
    record = embedded.events.received("register_session", _event("a/plugins/profile/s/h.xplane.pb"))
    assert embedded.events.get("register_session", record.id).expire_at == clock() + embedded.events.retention


def test_prune_deletes_only_what_has_expired(embedded, clock):
    embedded.events.received("register_session", _event("old/plugins/profile/s/h.xplane.pb"))
    clock.advance(embedded.events.retention.total_seconds() / 2)
    embedded.events.received("register_session", _event("new/plugins/profile/s/h.xplane.pb"))
    clock.advance(embedded.events.retention.total_seconds() / 2 + 1)
    assert embedded.events.prune() == 1
    assert [d["subject"] for d in embedded.store.query(COLLECTION)] == ["objects/new/plugins/profile/s/h.xplane.pb"]
