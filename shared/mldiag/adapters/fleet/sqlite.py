"""``SqliteFleet``: the embedded fleet table, a SQLite file of its own under the data dir.

The columns are the record's (:func:`mldiag.domain.fleet.bigquery_schema`): a
repeated record (attribution, findings, labels) is JSON text, read with
``json_each``; a timestamp is its fixed-width RFC 3339 text, which sorts as time
does. Queries run on a connection of their own that cannot write or reach
anything but this file: opened read-only, ``PRAGMA query_only``, no attached
databases, and an authorizer that allows reading and functions only. A
progress handler stops a query past its time.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from mldiag.domain.errors import InvalidArgument
from mldiag.domain.fleet import TABLE, bigquery_schema
from mldiag.ports import QueryResult

SQLITE_TYPES = {"STRING": "TEXT", "INT64": "INTEGER", "FLOAT64": "REAL", "BOOL": "INTEGER", "TIMESTAMP": "TEXT",
                "RECORD": "TEXT"}
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_PROGRESS_OPS = 20_000  # virtual machine steps between two looks at the clock


def create_table_sql() -> str:
    columns = [f"{field['name']} {SQLITE_TYPES[field['type']]}"
               + (" NOT NULL" if field["mode"] == "REQUIRED" else "")
               + (" PRIMARY KEY" if field["name"] == "record_id" else "")
               for field in bigquery_schema()]
    return (f"CREATE TABLE IF NOT EXISTS {TABLE} (\n    " + ",\n    ".join(columns) + "\n);\n"
            f"CREATE INDEX IF NOT EXISTS {TABLE}_analyzed_at ON {TABLE} (analyzed_at);\n"
            f"CREATE INDEX IF NOT EXISTS {TABLE}_run ON {TABLE} (run, analyzed_at);\n")


def _authorize(action: int, table: str | None, *_: object) -> int:
    # A table-valued function (json_each) declares its columns through sqlite_master as it is set up; the
    # read-only connection keeps that, or anything else, from writing.
    declaring = action == sqlite3.SQLITE_UPDATE and table == "sqlite_master"
    return sqlite3.SQLITE_OK if action in _ALLOWED or declaring else sqlite3.SQLITE_DENY


class SqliteFleet:
    dialect: Literal["sqlite", "bigquery"] = "sqlite"
    table = TABLE

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._columns = [field["name"] for field in bigquery_schema()]
        self._repeated = {field["name"] for field in bigquery_schema() if field["mode"] == "REPEATED"}
        self._lock = threading.Lock()
        self._writer = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._writer.execute("PRAGMA journal_mode=WAL")
        self._writer.executescript(create_table_sql())

    def insert(self, row: Mapping[str, Any]) -> None:
        values = [json.dumps(row.get(name) or []) if name in self._repeated else row.get(name)
                  for name in self._columns]
        updates = ", ".join(f"{name} = excluded.{name}" for name in self._columns if name != "record_id")
        with self._lock:
            self._writer.execute(
                f"INSERT INTO {TABLE} ({', '.join(self._columns)}) VALUES ({', '.join('?' * len(self._columns))}) "
                f"ON CONFLICT (record_id) DO UPDATE SET {updates} WHERE excluded.analyzed_at >= {TABLE}.analyzed_at",
                values)

    def _reader(self, deadline: float) -> sqlite3.Connection:
        connection = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
        connection.execute("PRAGMA query_only = ON")
        connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        connection.set_authorizer(_authorize)
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_OPS)
        return connection

    def query(self, sql: str, parameters: Mapping[str, Any] | None = None, *, max_rows: int,
              timeout_s: float) -> QueryResult:
        connection = self._reader(time.monotonic() + timeout_s)
        try:
            cursor = connection.execute(sql, dict(parameters or {}))
            rows = cursor.fetchmany(max_rows + 1)
            columns = [description[0] for description in cursor.description or ()]
        except sqlite3.OperationalError as error:
            reason = f"the query ran past {timeout_s:g} s" if "interrupted" in str(error) else str(error)
            raise InvalidArgument(reason, field="sql") from None
        except (sqlite3.DatabaseError, sqlite3.Warning, sqlite3.ProgrammingError) as error:
            raise InvalidArgument(str(error), field="sql") from None
        finally:
            connection.close()
        return QueryResult(columns, [list(row) for row in rows[:max_rows]], truncated=len(rows) > max_rows)
