"""The embedded fleet table: filled by its subscriber once per record, and a query that can only read, briefly."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fleet_support import NOW, record

from mldiag.adapters.fleet.sqlite import SqliteFleet
from mldiag.config import ANALYSIS_EVENTS
from mldiag.domain.errors import InvalidArgument
from mldiag.domain.messages import fleet_record_message
from mldiag.local.server import wire_functions
from mldiag.services import fleet, unit_of_work


@pytest.fixture
def table(tmp_path) -> SqliteFleet:
    return SqliteFleet(tmp_path / "fleet.sqlite3")


def _ids(table: SqliteFleet) -> list[tuple[str, float]]:
    return [tuple(row) for row in table.query("SELECT record_id, step_time_ms FROM fleet_records ORDER BY record_id",
                                               max_rows=100, timeout_s=5).rows]


def test_a_row_reads_back_with_its_repeated_fields_as_json(table):
    table.insert(record(labels={"team": "infra"}).row())

    result = table.query("SELECT run, analyzed_at, json_extract(labels, '$[0].value') AS team, "
                         "(SELECT SUM(json_extract(a.value, '$.device_ms')) FROM json_each(attribution) a "
                         " WHERE NOT json_extract(a.value, '$.useful')) AS lost FROM fleet_records",
                         max_rows=10, timeout_s=5)

    assert result.columns == ["run", "analyzed_at", "team", "lost"]
    assert result.rows == [["projects/p/locations/l/machineLearningRuns/run1", "2025-03-08T12:00:00.000000Z",
                            "infra", 800.0]] and not result.truncated


def test_the_same_files_analysed_again_replace_their_row_and_an_older_delivery_does_not(table):
    table.insert(record(step_ms=100).row())
    table.insert(record(step_ms=100).row())
    assert len(_ids(table)) == 1
    table.insert(record(step_ms=120, at=NOW + timedelta(hours=1)).row())
    table.insert(record(step_ms=100).row())  # a late redelivery of the first analysis
    assert [step for _, step in _ids(table)] == [120]


@pytest.mark.parametrize("statement", [
    "DELETE FROM fleet_records",
    "UPDATE fleet_records SET run = 'x'",
    "INSERT INTO fleet_records (record_id) VALUES ('x')",
    "DROP TABLE fleet_records",
    "ATTACH DATABASE 'other.sqlite3' AS other",
    "PRAGMA query_only = OFF",
    "CREATE TABLE t (x)",
])
def test_a_query_cannot_write_or_reach_another_database(table, statement):
    table.insert(record().row())
    with pytest.raises(InvalidArgument):
        table.query(statement, max_rows=10, timeout_s=5)
    assert len(_ids(table)) == 1


def test_a_query_stops_at_its_time_and_its_rows(table):
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
    with pytest.raises(InvalidArgument, match="ran past 0.2 s"):
        table.query(endless, max_rows=10, timeout_s=0.2)

    many = table.query("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n",
                       max_rows=3, timeout_s=5)
    assert many.rows == [[1], [2], [3]] and many.truncated


def test_the_subscriber_writes_each_published_record_once_and_ignores_notifications(embedded):
    wire_functions(embedded, embedded.bus)
    row = record().row()
    for _ in range(2):  # published twice: a redelivery
        unit_of_work.run(embedded, lambda unit: unit.publish("record", fleet_record_message(record(), "//mldiag")))
    embedded.bus.publish(ANALYSIS_EVENTS, b'{"type": "dev.mldiag.event.v1.opened", "data": {"run": "r"}}',
                         {"ce-type": "dev.mldiag.event.v1.opened"})
    embedded.bus.drain()

    assert _ids(embedded.fleet) == [(row["record_id"], 100.0)]


def test_a_deployment_without_a_fleet_table_says_so(embedded):
    from mldiag.domain.errors import FailedPrecondition

    with pytest.raises(FailedPrecondition, match="keeps no fleet table"):
        fleet.table(type("NoFleet", (), {"fleet": None})())
