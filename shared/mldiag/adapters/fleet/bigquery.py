"""``BigQueryFleet``: the fleet table in BigQuery, which a Pub/Sub BigQuery subscription fills.

In the cloud no code writes the table: the subscription on ``analysis-events``
writes each record message as a row (Terraform). This adapter runs the fleet
queries, in GoogleSQL, with the named parameters as query parameters, a
bytes-billed ceiling, a time limit and a row limit; ``insert`` streams a row
(to backfill records). The client library is imported on first use, so a
deployment that never queries never loads it.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from mldiag.domain.errors import InvalidArgument
from mldiag.domain.fleet import TABLE
from mldiag.domain.clock import format_timestamp
from mldiag.ports import QueryResult

MAX_BYTES_BILLED = 10 * 1024**3  # a query that would scan more is refused by BigQuery, not billed
_PARAMETER_TYPES = ((bool, "BOOL"), (int, "INT64"), (float, "FLOAT64"), (datetime, "TIMESTAMP"), (str, "STRING"))


def _parameter_type(value: Any) -> str:
    for python_type, name in _PARAMETER_TYPES:
        if isinstance(value, python_type):
            return name
    raise InvalidArgument(f"a query parameter is a string, number, boolean or time, not {type(value).__name__}")


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, list):
        return [_cell(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _cell(item) for key, item in value.items()}
    return value


class BigQueryFleet:
    dialect: Literal["sqlite", "bigquery"] = "bigquery"

    def __init__(self, project: str, dataset: str, client: Any = None):
        self.project = project
        self.dataset = dataset
        self.table = f"`{project}.{dataset}.{TABLE}`"
        self._client = client

    def _bigquery(self) -> Any:
        from google.cloud import bigquery

        if self._client is None:
            self._client = bigquery.Client(project=self.project)
        return bigquery

    def insert(self, row: Mapping[str, Any]) -> None:
        self._bigquery()
        errors = self._client.insert_rows_json(f"{self.project}.{self.dataset}.{TABLE}", [dict(row)],
                                               row_ids=[row["record_id"]])
        if errors:
            raise RuntimeError(f"BigQuery refused the row {row['record_id']}: {errors}")

    def query(self, sql: str, parameters: Mapping[str, Any] | None = None, *, max_rows: int,
              timeout_s: float) -> QueryResult:
        from google.api_core import exceptions as google_errors

        bigquery = self._bigquery()
        config = bigquery.QueryJobConfig(
            query_parameters=[bigquery.ScalarQueryParameter(name, _parameter_type(value), value)
                              for name, value in (parameters or {}).items()],
            default_dataset=f"{self.project}.{self.dataset}", maximum_bytes_billed=MAX_BYTES_BILLED,
            use_legacy_sql=False, job_timeout_ms=int(timeout_s * 1000))
        try:
            job = self._client.query(sql, job_config=config, timeout=timeout_s)
            result = job.result(timeout=timeout_s, max_results=max_rows + 1)
            rows = [[_cell(value) for value in row.values()] for row in result]
        except concurrent.futures.TimeoutError:
            raise InvalidArgument(f"the query ran past {timeout_s:g} s", field="sql") from None
        except (google_errors.BadRequest, google_errors.Forbidden, google_errors.NotFound) as error:
            raise InvalidArgument(getattr(error, "message", str(error)), field="sql") from None
        columns = [field.name for field in result.schema]
        return QueryResult(columns, rows[:max_rows], truncated=len(rows) > max_rows)
