"""The BigQuery fleet adapter at the client boundary: what it asks the client library, and how it reads the answer.

The library is not loaded here: a stand-in module with the two config classes the adapter builds, and a client that
answers as ``google.cloud.bigquery`` does (rows whose ``values()`` hold datetimes and repeated records as lists of
dicts, a result with a ``schema``)."""

from __future__ import annotations

import concurrent.futures
import sys
import types
from datetime import datetime, timezone

import google.cloud
import pytest
from google.api_core import exceptions as google_errors

from mldiag.adapters.fleet.bigquery import MAX_BYTES_BILLED, BigQueryFleet
from mldiag.domain.errors import InvalidArgument


class Config:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class Parameter:
    def __init__(self, name, type_, value):
        self.name, self.type_, self.value = name, type_, value


class Row(dict):
    pass


class Result(list):
    schema = [types.SimpleNamespace(name="run"), types.SimpleNamespace(name="last"),
              types.SimpleNamespace(name="attribution")]


class Client:
    def __init__(self, rows=(), error=None):
        self.rows, self.error, self.asked, self.inserted = list(rows), error, [], []

    def query(self, sql, job_config, timeout):
        self.asked.append((sql, job_config, timeout))
        if self.error:
            raise self.error
        client = self

        class Job:
            def result(self, timeout, max_results):
                client.max_results = max_results
                return Result(client.rows[:max_results])

        return Job()

    def insert_rows_json(self, table, rows, row_ids):
        self.inserted.append((table, rows, row_ids))
        return [] if rows[0]["record_id"] != "bad" else [{"index": 0, "errors": [{"reason": "invalid"}]}]


@pytest.fixture(autouse=True)
def bigquery_module(monkeypatch):
    module = types.ModuleType("google.cloud.bigquery")
    module.QueryJobConfig, module.ScalarQueryParameter = Config, Parameter
    monkeypatch.setitem(sys.modules, "google.cloud.bigquery", module)
    monkeypatch.setattr(google.cloud, "bigquery", module, raising=False)


def _row(run: str) -> Row:
    return Row(run=run, last=datetime(2025, 3, 8, 12, tzinfo=timezone.utc),
               attribution=[{"cause": "host_work", "ms": 200.0}])


def test_a_query_names_its_parameters_limits_and_dataset_and_reads_rows_as_json():
    client = Client([_row("r1"), _row("r2"), _row("r3")])
    table = BigQueryFleet("proj", "mldiag_fleet", client=client)
    since = datetime(2025, 3, 1, tzinfo=timezone.utc)

    result = table.query(f"SELECT run FROM {table.table} WHERE analyzed_at >= @since AND run != @run",
                         {"since": since, "run": "x", "limit": 5}, max_rows=2, timeout_s=10)

    sql, config, timeout = client.asked[0]
    assert "`proj.mldiag_fleet.fleet_records`" in sql and timeout == 10
    assert [(p.name, p.type_, p.value) for p in config.query_parameters] == [
        ("since", "TIMESTAMP", since), ("run", "STRING", "x"), ("limit", "INT64", 5)]
    assert (config.default_dataset, config.maximum_bytes_billed, config.use_legacy_sql, config.job_timeout_ms) == (
        "proj.mldiag_fleet", MAX_BYTES_BILLED, False, 10_000)
    assert client.max_results == 3
    assert result.columns == ["run", "last", "attribution"] and result.truncated
    assert result.rows == [["r1", "2025-03-08T12:00:00.000000Z", [{"cause": "host_work", "ms": 200.0}]],
                           ["r2", "2025-03-08T12:00:00.000000Z", [{"cause": "host_work", "ms": 200.0}]]]


@pytest.mark.parametrize("error", [google_errors.BadRequest("Syntax error: Unexpected keyword DELETE at [1:1]"),
                                   google_errors.Forbidden("Access Denied: Table proj:other.secrets"),
                                   concurrent.futures.TimeoutError()])
def test_a_refused_or_slow_query_is_a_clear_invalid_argument(error):
    table = BigQueryFleet("proj", "mldiag_fleet", client=Client(error=error))
    with pytest.raises(InvalidArgument, match=r"Syntax error|Access Denied|ran past 3 s"):
        table.query("SELECT 1", max_rows=10, timeout_s=3)


def test_a_parameter_of_another_type_is_refused_before_asking():
    client = Client()
    with pytest.raises(InvalidArgument, match="not list"):
        BigQueryFleet("proj", "d", client=client).query("SELECT 1", {"x": [1]}, max_rows=1, timeout_s=1)
    assert client.asked == []


def test_insert_streams_the_row_keyed_by_its_record_id_and_reports_a_refusal():
    client = Client()
    table = BigQueryFleet("proj", "mldiag_fleet", client=client)

    table.insert({"record_id": "s@g", "run": "r"})
    assert client.inserted == [("proj.mldiag_fleet.fleet_records", [{"record_id": "s@g", "run": "r"}], ["s@g"])]
    with pytest.raises(RuntimeError, match="refused the row bad"):
        table.insert({"record_id": "bad"})
