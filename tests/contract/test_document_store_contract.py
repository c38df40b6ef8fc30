"""The DocumentStore contract: SqliteStore and FirestoreStore answer alike.

Emulator gaps (Firestore emulator): composite indexes are not enforced, so a
query that needs one passes here and fails in production until Terraform
declares the index; TTL policies are not applied; a transaction that loses a
race waits about 2 s before it is retried, hence the tiny contention test.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from mldiag.adapters.store.sqlite import SqliteStore
from mldiag.domain.errors import AlreadyExists, InvalidArgument
from mldiag.ports import EncodedDocument, OrderBy, Where

RUNS = "machineLearningRuns"
KEY = "projects:p:locations:l:machineLearningRuns:r1"

# Documents exercising every operator; "missing" lacks the fields that others have.
PEOPLE = {
    "ada": {"name": "ada", "age": 36, "team": {"id": "core", "size": 3}, "tags": ["math", "code"],
            "labels": {"cost-center": "a1"}, "nickname": None},
    "bob": {"name": "bob", "age": 25, "team": {"id": "infra", "size": 5}, "tags": ["ops"],
            "labels": {"cost-center": "b2"}, "nickname": "bobby"},
    "cy": {"name": "cy", "age": 36, "team": {"id": "infra", "size": 5}, "tags": ["code", "ops"],
           "labels": {}, "nickname": "c"},
    "dee": {"name": "dee", "age": 41, "team": {"id": "core", "size": 3}, "tags": [],
            "labels": {"cost-center": "a1"}, "nickname": None},
    "eve": {"name": "eve", "age": 19.5, "team": {"id": "research", "size": 1}, "tags": ["math"],
            "labels": {}, "nickname": "e"},
    "missing": {"name": "missing"},
}


def keys(documents: list[dict]) -> list[str]:
    return [document["name"] for document in documents]


@pytest.fixture
def people(store):
    for key, document in PEOPLE.items():
        store.create("people", key, document)
    return store


def test_crud_round_trips_json_documents(store):
    document = {
        "name": KEY.replace(":", "/"),
        "displayName": "résumé ✓",
        "count": 3,
        "ratio": 0.25,
        "enabled": True,
        "nothing": None,
        "nested": {"list": [1, "two", {"three": 3.0}], "empty": {}},
        "labels": {"team": "core", "cost-center": "x"},
    }
    assert store.get(RUNS, KEY) is None
    store.create(RUNS, KEY, document)
    assert store.get(RUNS, KEY) == document

    store.set(RUNS, KEY, {"name": "replaced"})
    assert store.get(RUNS, KEY) == {"name": "replaced"}, "set replaces the whole document"
    assert store.get("otherCollection", KEY) is None, "collections are separate"

    assert store.delete(RUNS, KEY) is True
    assert store.get(RUNS, KEY) is None
    assert store.delete(RUNS, KEY) is False


def test_create_refuses_an_existing_key_and_keeps_the_original(store):
    store.create(RUNS, KEY, {"v": 1})
    with pytest.raises(AlreadyExists):
        store.create(RUNS, KEY, {"v": 2})
    assert store.get(RUNS, KEY) == {"v": 1}


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (Where("age", "==", 36), ["ada", "cy"]),
        (Where("age", "!=", 36), ["eve", "bob", "dee"]),
        (Where("age", "<", 36), ["eve", "bob"]),
        (Where("age", "<=", 36), ["eve", "bob", "ada", "cy"]),
        (Where("age", ">", 36), ["dee"]),
        (Where("age", ">=", 36), ["ada", "cy", "dee"]),
        (Where("team.id", "in", ["core", "research"]), ["ada", "dee", "eve"]),
        (Where("team.id", "in", []), []),
        (Where("tags", "array_contains", "code"), ["ada", "cy"]),
        (Where("labels.cost-center", "==", "a1"), ["ada", "dee"]),
        (Where("nickname", "==", None), ["ada", "dee"]),
        (Where("name", ">=", "d"), ["dee", "eve", "missing"]),
    ],
    ids=lambda value: f"{value.field} {value.op} {value.value}" if isinstance(value, Where) else None,
)
def test_every_operator_on_dotted_fields(people, condition, expected):
    # Inequalities order by the compared field first (Firestore's implicit order), then by key.
    assert keys(people.query("people", where=[condition])) == expected


def test_conditions_combine_with_and(people):
    found = people.query("people", where=[Where("team.id", "==", "core"), Where("tags", "array_contains", "math")])
    assert keys(found) == ["ada"]


def test_ordering_ties_break_by_key_and_documents_without_the_field_drop_out(people):
    ascending = people.query("people", order_by=[OrderBy("age")])
    assert keys(ascending) == ["eve", "bob", "ada", "cy", "dee"]
    descending = people.query("people", order_by=[OrderBy("age", descending=True)])
    assert keys(descending) == ["dee", "cy", "ada", "bob", "eve"], "the key tie-break follows the last direction"
    by_team = people.query("people", order_by=[OrderBy("team.size"), OrderBy("name", descending=True)])
    assert keys(by_team) == ["eve", "dee", "ada", "cy", "bob"]


def test_inequality_on_another_field_orders_after_the_explicit_order(people):
    found = people.query("people", where=[Where("age", ">", 20)], order_by=[OrderBy("team.size", descending=True)])
    assert keys(found) == ["cy", "bob", "dee", "ada"], "then age, in the direction of the last order"


def test_limit_and_offset_page_through_the_order(people):
    order = [OrderBy("name")]
    assert keys(people.query("people", order_by=order, limit=2)) == ["ada", "bob"]
    assert keys(people.query("people", order_by=order, limit=2, offset=2)) == ["cy", "dee"]
    assert keys(people.query("people", order_by=order, offset=4)) == ["eve", "missing"]
    assert people.query("people", order_by=order, limit=3, offset=10) == []


def test_query_refuses_a_field_that_is_not_a_path(store):
    with pytest.raises(InvalidArgument):
        store.query("people", where=[Where("age; DROP TABLE", "==", 1)])


def test_transaction_reads_modifies_writes_and_returns(store):
    store.create("counters", "c", {"value": 1})

    def increment(tx):
        current = tx.get("counters", "c")
        tx.set("counters", "c", {"value": current["value"] + 1})
        tx.create("counters", "audit", {"from": current["value"]})
        return current["value"] + 1

    assert store.transaction(increment) == 2
    assert store.get("counters", "c") == {"value": 2}
    assert store.get("counters", "audit") == {"from": 1}


def test_aborted_transaction_writes_nothing(store):
    store.create("counters", "c", {"value": 1})

    def fail_after_writing(tx):
        tx.get("counters", "c")
        tx.set("counters", "c", {"value": 99})
        tx.delete("counters", "c")
        tx.create("counters", "new", {})
        raise LookupError("changed my mind")

    with pytest.raises(LookupError):
        store.transaction(fail_after_writing)
    assert store.get("counters", "c") == {"value": 1}
    assert store.get("counters", "new") is None


def test_create_conflict_fails_the_whole_transaction(store):
    store.create("counters", "taken", {"value": 1})

    def create_two(tx):
        tx.set("counters", "other", {"value": 2})
        tx.create("counters", "taken", {"value": 3})

    with pytest.raises(AlreadyExists):
        store.transaction(create_two)
    assert store.get("counters", "taken") == {"value": 1}
    assert store.get("counters", "other") is None


def test_transaction_refuses_reads_after_writes(store):
    def write_then_read(tx):
        tx.set("counters", "c", {"value": 1})
        tx.get("counters", "c")

    with pytest.raises(RuntimeError):
        store.transaction(write_then_read)
    assert store.get("counters", "c") is None


def test_transaction_deletes(store):
    store.create("counters", "c", {"value": 1})
    store.transaction(lambda tx: tx.delete("counters", "c"))
    assert store.get("counters", "c") is None


def test_concurrent_increments_are_serialised(store):
    store.create("counters", "c", {"value": 0})
    threads, increments_each = 2, 2
    errors: list[BaseException] = []

    def increment(tx):
        tx.set("counters", "c", {"value": tx.get("counters", "c")["value"] + 1})

    def worker():
        try:
            for _ in range(increments_each):
                store.transaction(increment)
        except BaseException as error:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(error)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert errors == []
    assert store.get("counters", "c") == {"value": threads * increments_each}



INSTANT = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=timezone.utc)


def test_a_datetime_is_kept_as_a_timestamp_and_compares_as_time(store):
    """Firestore's TTL deletes only on a Timestamp field; any other type silently disables it."""
    store.set("expiring", "a", {"name": "a", "expireAt": INSTANT})
    store.set("expiring", "b", {"name": "b", "expireAt": INSTANT + timedelta(days=1)})
    stored = store.get("expiring", "a")["expireAt"]
    if isinstance(store, SqliteStore):
        assert stored == "2026-03-01T12:00:00.250000Z"  # fixed-width UTC text sorts as time does
    else:
        assert isinstance(stored, datetime) and stored == INSTANT  # a Firestore Timestamp reads back as a datetime
    assert keys(store.query("expiring", where=[Where("expireAt", "<", INSTANT + timedelta(seconds=1))])) == ["a"]
    assert keys(store.query("expiring", where=[Where("expireAt", "<", INSTANT)])) == []


def test_an_encoded_document_is_stored_as_the_document_its_text_holds(store):
    """A model's document comes encoded once: its text, with the timestamps a store must see as such beside it."""
    text = '{"name":"a","files":{"h0":{"sizeBytes":3,"tags":["x"]}},"expireAt":"2026-03-01T12:00:00.250000Z"}'
    store.set("expiring", "a", EncodedDocument(text, {"expireAt": INSTANT}))
    store.transaction(lambda transaction: transaction.create("expiring", "b", EncodedDocument('{"name":"b"}')))
    stored = store.get("expiring", "a")
    assert stored["files"] == {"h0": {"sizeBytes": 3, "tags": ["x"]}} and store.get("expiring", "b") == {"name": "b"}
    if isinstance(store, SqliteStore):
        assert stored["expireAt"] == "2026-03-01T12:00:00.250000Z"
    else:
        assert isinstance(stored["expireAt"], datetime) and stored["expireAt"] == INSTANT
    assert keys(store.query("expiring", where=[Where("expireAt", "<", INSTANT + timedelta(seconds=1))])) == ["a"]


@pytest.mark.parametrize("key", ["a/b", "", ".", "..", "__reserved__", "k" * 1501])
def test_a_key_firestore_would_refuse_is_refused_by_every_store(store, key):
    with pytest.raises(InvalidArgument, match="document key"):
        store.set("people", key, {"name": "x"})
    with pytest.raises(InvalidArgument, match="document key"):
        store.get("people", key)
    with pytest.raises(InvalidArgument, match="document key"):
        store.transaction(lambda transaction: transaction.create("people", key, {"name": "x"}))
    assert store.query("people") == []
