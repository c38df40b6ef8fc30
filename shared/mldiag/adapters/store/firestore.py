"""``FirestoreStore``: the document store on Cloud Firestore (or its emulator).

Collections and keys map one to one onto Firestore collections and document
ids. Transactions are Firestore transactions: the client library re-runs the
work when the commit loses a race, so ``work`` must not have side effects
outside the transaction. Queries follow :mod:`mldiag.adapters.store.queries`, spelt
out as explicit orderings (which Firestore would otherwise add implicitly).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from google.api_core import exceptions as google_errors
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.field_path import FieldPath

from mldiag.adapters.store.keys import check_key
from mldiag.adapters.store.queries import KEY, field_segments, result_order
from mldiag.domain.errors import Aborted, AlreadyExists
from mldiag.ports import Document, EncodedDocument, OrderBy, Where, Written

T = TypeVar("T")

# How often the client re-runs a transaction that lost a race before giving up.
MAX_TRANSACTION_ATTEMPTS = 10


def _field_path(field: str) -> str:
    """Firestore's spelling of a dotted field; segments such as ``my-label`` get backquoted."""
    return FieldPath.document_id() if field == KEY else FieldPath(*field_segments(field)).to_api_repr()


def _values(document: Written) -> Document:
    """What the client writes: a document's values (a model's encoded document decoded, its timestamps as datetimes)."""
    return dict(document) if isinstance(document, EncodedDocument) else document


class _FirestoreTransaction:
    """The :class:`mldiag.ports.Transaction` view of a Firestore transaction."""

    def __init__(self, client: firestore.Client, transaction: firestore.Transaction):
        self._client = client
        self._transaction = transaction
        self._written = False

    def get(self, collection: str, key: str) -> Document | None:
        # Firestore would serve this read from the snapshot the transaction began
        # with, silently missing this transaction's own writes: refuse instead.
        if self._written:
            raise RuntimeError("a transaction must read everything before it writes")
        snapshot = self._client.collection(collection).document(check_key(collection, key)).get(transaction=self._transaction)
        return snapshot.to_dict() if snapshot.exists else None

    def set(self, collection: str, key: str, document: Written) -> None:
        self._written = True
        self._transaction.set(self._client.collection(collection).document(check_key(collection, key)),
                              _values(document))

    def create(self, collection: str, key: str, document: Written) -> None:
        self._written = True
        self._transaction.create(self._client.collection(collection).document(check_key(collection, key)),
                                 _values(document))

    def delete(self, collection: str, key: str) -> None:
        self._written = True
        self._transaction.delete(self._client.collection(collection).document(check_key(collection, key)))


class FirestoreStore:
    """A :class:`mldiag.ports.DocumentStore` on one Firestore database."""

    def __init__(self, project: str, database: str = "(default)"):
        self._client = firestore.Client(project=project, database=database)

    def get(self, collection: str, key: str) -> Document | None:
        snapshot = self._client.collection(collection).document(check_key(collection, key)).get()
        return snapshot.to_dict() if snapshot.exists else None

    def create(self, collection: str, key: str, document: Written) -> None:
        try:
            self._client.collection(collection).document(check_key(collection, key)).create(_values(document))
        except google_errors.AlreadyExists:
            raise AlreadyExists(f"{collection}/{key} already exists") from None

    def set(self, collection: str, key: str, document: Written) -> None:
        self._client.collection(collection).document(check_key(collection, key)).set(_values(document))

    def delete(self, collection: str, key: str) -> bool:
        must_exist = self._client.write_option(exists=True)
        try:
            self._client.collection(collection).document(check_key(collection, key)).delete(option=must_exist)
        except google_errors.NotFound:
            return False
        return True

    def query(
        self,
        collection: str,
        where: Sequence[Where] = (),
        order_by: Sequence[OrderBy] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Document]:
        if any(condition.op == "in" and not list(condition.value) for condition in where):
            return []  # Firestore refuses an empty "in"; it matches nothing
        query = self._client.collection(collection)
        for condition in where:
            value = list(condition.value) if condition.op == "in" else condition.value
            query = query.where(filter=FieldFilter(_field_path(condition.field), condition.op, value))
        for order in result_order(where, order_by):
            direction = firestore.Query.DESCENDING if order.descending else firestore.Query.ASCENDING
            query = query.order_by(_field_path(order.field), direction=direction)
        if limit is not None:
            query = query.limit(limit)
        if offset:
            query = query.offset(offset)
        return [snapshot.to_dict() for snapshot in query.stream()]

    def transaction(self, work: Callable[[_FirestoreTransaction], T]) -> T:
        @firestore.transactional
        def run(transaction: firestore.Transaction) -> T:
            return work(_FirestoreTransaction(self._client, transaction))

        try:
            return run(self._client.transaction(max_attempts=MAX_TRANSACTION_ATTEMPTS))
        except google_errors.AlreadyExists as error:
            raise AlreadyExists(f"a document created in this transaction already exists: {error.message}") from None
        except ValueError as error:
            if isinstance(error.__cause__, google_errors.Aborted):
                raise Aborted(f"transaction still contended after {MAX_TRANSACTION_ATTEMPTS} attempts") from error
            raise
