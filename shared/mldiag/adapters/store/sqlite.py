"""``SqliteStore``: the embedded document store, one SQLite file under the data dir.

Documents are JSON text in a single table (a ``datetime`` as its fixed-width UTC ISO
text, which sorts as time does, and is read back as that text; an :class:`~mldiag.ports.EncodedDocument` as the
text it comes with), decoded by pydantic-core's parser; queries use SQLite's JSON functions
and follow Firestore's semantics where they differ from SQL's (a document
without the ordered-by or compared field is left out). Transactions take the
write lock up front (``BEGIN IMMEDIATE``), which makes them serialisable across
threads and processes sharing the file.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic_core import from_json

from mldiag.adapters.store.keys import check_key
from mldiag.adapters.store.queries import KEY, field_segments, result_order
from mldiag.domain.errors import AlreadyExists
from mldiag.domain.clock import format_timestamp
from mldiag.ports import Document, EncodedDocument, OrderBy, Where, Written

T = TypeVar("T")

# A rowid table: a row holds a document of up to a page whole; a WITHOUT ROWID table's rows spill past a quarter
# page into overflow pages (twice the file, and the pages each write touches).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    collection TEXT NOT NULL,
    key        TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (collection, key)
);
"""
# Synced at checkpoints only (WAL, synchronous=NORMAL): a commit outlives the process; a power cut may undo the
# transactions since the last checkpoint, never part of one, and reconciling the bucket when `mldiag up` starts
# registers again what they did. A checkpoint every 10,000 pages (a 40 MiB log), not 1,000: its fsyncs cost as
# much as hundreds of commits.
_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA wal_autocheckpoint=10000")
_CREATE = "INSERT INTO documents (collection, key, body) VALUES (?, ?, ?)"
# An existing document is updated in its row (REPLACE would delete the row and insert another, touching the
# index and a second page).
_SET = _CREATE + " ON CONFLICT (collection, key) DO UPDATE SET body = excluded.body"
_COMPARISONS = {"==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _json_path(field: str) -> str:
    return "$" + "".join(f'."{part}"' for part in field_segments(field))


def _json_default(value: Any) -> str:
    if isinstance(value, datetime):
        return format_timestamp(value)
    raise TypeError(f"{type(value).__name__} is not a document value")


_ENCODER = json.JSONEncoder(default=_json_default, separators=(",", ":"))


def _encode(value: Any) -> str:
    return value.text if isinstance(value, EncodedDocument) else _ENCODER.encode(value)


def _sql_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_timestamp(value)
    return _encode(value) if isinstance(value, (dict, list)) else value


class _SqliteTransaction:
    def __init__(self, connection: sqlite3.Connection):
        self._connection = connection
        self._writes: list[tuple[str, str, str, Written | None]] = []

    def get(self, collection: str, key: str) -> Document | None:
        check_key(collection, key)
        if self._writes:
            raise RuntimeError("a transaction must read everything before it writes")
        return _fetch(self._connection, collection, key)

    def set(self, collection: str, key: str, document: Written) -> None:
        check_key(collection, key)
        self._writes.append(("set", collection, key, document))

    def create(self, collection: str, key: str, document: Written) -> None:
        check_key(collection, key)
        self._writes.append(("create", collection, key, document))

    def delete(self, collection: str, key: str) -> None:
        check_key(collection, key)
        self._writes.append(("delete", collection, key, None))

    def commit(self) -> None:
        for action, collection, key, document in self._writes:
            if action == "delete":
                self._connection.execute("DELETE FROM documents WHERE collection=? AND key=?", (collection, key))
                continue
            try:
                self._connection.execute(_CREATE if action == "create" else _SET, (collection, key, _encode(document)))
            except sqlite3.IntegrityError:
                raise AlreadyExists(f"{collection}/{key} already exists") from None


def _fetch(connection: sqlite3.Connection, collection: str, key: str) -> Document | None:
    row = connection.execute(
        "SELECT body FROM documents WHERE collection=? AND key=?", (collection, key)
    ).fetchone()
    return from_json(row[0]) if row else None


class SqliteStore:
    """A :class:`mldiag.ports.DocumentStore` in one SQLite file (``:memory:`` works too)."""

    def __init__(self, path: Path | str):
        self._path = str(path)
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        # ":memory:" databases are per connection: share one, guarded by a lock.
        self._shared = self._open() if self._path == ":memory:" else None
        self._memory_lock = threading.RLock()
        with self._lock():
            self._connection().executescript(_SCHEMA)

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self._path, timeout=30, isolation_level=None, check_same_thread=False)
        if self._path != ":memory:":
            for pragma in _PRAGMAS:
                connection.execute(pragma)
        return connection

    def _connection(self) -> sqlite3.Connection:
        if self._shared is not None:
            return self._shared
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._open()
        return connection

    def _lock(self) -> contextlib.AbstractContextManager[Any]:
        return self._memory_lock if self._shared is not None else contextlib.nullcontext()

    def get(self, collection: str, key: str) -> Document | None:
        check_key(collection, key)
        with self._lock():
            return _fetch(self._connection(), collection, key)

    def create(self, collection: str, key: str, document: Written) -> None:
        self.transaction(lambda tx: tx.create(collection, key, document))

    def set(self, collection: str, key: str, document: Written) -> None:
        self.transaction(lambda tx: tx.set(collection, key, document))

    def delete(self, collection: str, key: str) -> bool:
        def work(tx: _SqliteTransaction) -> bool:
            existed = tx.get(collection, key) is not None
            tx.delete(collection, key)
            return existed

        return self.transaction(work)

    def query(
        self,
        collection: str,
        where: Sequence[Where] = (),
        order_by: Sequence[OrderBy] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Document]:
        clauses, params = ["collection = ?"], [collection]
        for condition in where:
            path = _json_path(condition.field)
            if condition.op == "array_contains":
                clauses.append(f"EXISTS (SELECT 1 FROM json_each(body, '{path}') WHERE value = ?)")
                params.append(_sql_value(condition.value))
            elif condition.op == "in":
                values = list(condition.value)
                if not values:
                    return []
                clauses.append(f"json_extract(body, '{path}') IN ({', '.join('?' * len(values))})")
                params.extend(_sql_value(v) for v in values)
            elif condition.value is None and condition.op in ("==", "!="):
                clauses.append(f"json_type(body, '{path}') {'=' if condition.op == '==' else '!='} 'null'")
            else:
                clauses.append(f"json_extract(body, '{path}') {_COMPARISONS[condition.op]} ?")
                params.append(_sql_value(condition.value))
        ordering = []
        for order in result_order(where, order_by):
            direction = "DESC" if order.descending else "ASC"
            if order.field == KEY:
                ordering.append(f"key {direction}")
                continue
            path = _json_path(order.field)
            clauses.append(f"json_type(body, '{path}') IS NOT NULL")
            ordering.append(f"json_extract(body, '{path}') {direction}")
        sql = f"SELECT body FROM documents WHERE {' AND '.join(clauses)} ORDER BY {', '.join(ordering)}"
        sql += " LIMIT ? OFFSET ?"
        params.extend([-1 if limit is None else limit, offset])
        with self._lock():
            rows = self._connection().execute(sql, params).fetchall()
        return [from_json(row[0]) for row in rows]

    def transaction(self, work: Callable[[_SqliteTransaction], T]) -> T:
        with self._lock():
            connection = self._connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                transaction = _SqliteTransaction(connection)
                result = work(transaction)
                transaction.commit()
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
            return result

