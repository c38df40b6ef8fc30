"""The event archive in the cloud: ``expireAt`` is a timestamp, and large raw events survive a retry.

``expireAt`` reaches the store as a timestamp, so Firestore's TTL deletes the record.

Firestore's TTL policy only deletes documents whose TTL field is a Timestamp; a string
disables expiration without an error. The Firestore client stores a ``datetime`` as a
Timestamp (tests/contract checks this against the emulator), so here the value handed to
the store must be a ``datetime``; the embedded store keeps pruning by it. A raw event too
large for the record goes to the bucket, written once: a retried delivery, by a function
that may only create objects, finds it there and goes on.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from mldiag.adapters.blobs.local import LocalBlobs
from mldiag.adapters.store.sqlite import SqliteStore
from mldiag.services.event_archive import COLLECTION, EXPIRE_AT, RAW_INLINE_LIMIT, EventArchive
from mldiag.domain.envelopes import storage_finalized_event
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


class CreateOnlyBlobs(LocalBlobs):
    """A bucket where the writer holds roles/storage.objectCreator: it may create objects, not replace them."""

    def write_bytes(self, uri: str, data: bytes, content_type: str = "", *, if_absent: bool = False):
        if not if_absent and self.stat(uri) is not None:
            raise PermissionError(f"storage.objects.delete denied on {uri}")
        return super().write_bytes(uri, data, content_type, if_absent=if_absent)


def test_a_large_raw_event_is_archived_again_after_a_failed_first_record(embedded, clock, tmp_path):
    blobs = CreateOnlyBlobs(tmp_path / "bucket")
    big = storage_finalized_event({"bucket": "profiles", "name": "a/plugins/profile/s/h.xplane.pb",
                                   "generation": "1", "size": "1", "metadata": {"pad": "x" * RAW_INLINE_LIMIT}})
    failing = EventArchive(embedded.store, blobs, "profiles", RETENTION, clock)
    failing.save = lambda record: (_ for _ in ()).throw(ConnectionError("Firestore unavailable"))
    with pytest.raises(ConnectionError):
        failing.received("register_session", big)  # the raw object was written, the record was not
    archive = EventArchive(embedded.store, blobs, "profiles", RETENTION, clock)
    record = archive.received("register_session", big)
    assert archive.load_raw(record)["data"]["metadata"]["pad"] == "x" * RAW_INLINE_LIMIT
