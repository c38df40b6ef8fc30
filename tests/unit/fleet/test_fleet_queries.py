"""The fleet queries on the embedded table: a free SELECT within limits, and the three named ones, fast at 10,000."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from fleet_support import NOW, generated, record

from mldiag.domain.errors import InvalidArgument
from mldiag.services import fleet


@pytest.fixture
def services(embedded):
    embedded.now = lambda: NOW
    return embedded


def _rows(answer) -> list[dict]:
    return [dict(zip(answer["columns"], row)) for row in answer["rows"]]


def test_top_waste_ranks_runs_by_lost_accelerator_time_with_each_cause(services):
    services.fleet.insert(record("small", "s1", lost={"host_work": 100}, devices=1).row())
    services.fleet.insert(record("big", "s1", lost={"compilation": 50, "dispatch": 30}, devices=8).row())
    services.fleet.insert(record("big", "s2", at=NOW - timedelta(hours=1), lost={"dispatch": 10}, devices=8).row())
    services.fleet.insert(record("old", "s1", at=NOW - timedelta(days=9), lost={"host_work": 900}).row())

    rows = _rows(fleet.top_waste(services, timedelta(days=7)))

    assert [row["display_name"] for row in rows] == ["big", "small"]
    big = rows[0]
    assert (big["analyses"], big["lost_device_ms"]) == (2, (50 + 30 + 10) * 8)
    assert (big["compilation_device_ms"], big["dispatch_device_ms"], big["host_work_device_ms"]) == (400, 320, 0)
    assert big["latest_session"].endswith("/big/profilerSessions/s1")
    assert big["lost_share"] == pytest.approx(90 * 8 / ((800 + 80) * 8 + (800 + 10) * 8))


def test_top_waste_takes_a_label_filter(services):
    services.fleet.insert(record("a", labels={"team": "infra"}).row())
    services.fleet.insert(record("b", labels={"team": "research"}).row())

    rows = _rows(fleet.top_waste(services, timedelta(days=7), label="team=research"))

    assert [row["display_name"] for row in rows] == ["b"]
    with pytest.raises(InvalidArgument, match="key=value"):
        fleet.top_waste(services, timedelta(days=7), label="team")


def test_regressions_compare_each_runs_oldest_and_newest_step_time_in_the_window(services):
    services.fleet.insert(record("slower", "s1", at=NOW - timedelta(days=3), step_ms=100, framework="jax").row())
    services.fleet.insert(record("slower", "s2", at=NOW - timedelta(days=1), step_ms=130, framework="pytorch_xla").row())
    services.fleet.insert(record("steady", "s1", at=NOW - timedelta(days=3), step_ms=100).row())
    services.fleet.insert(record("steady", "s2", at=NOW - timedelta(days=1), step_ms=102).row())
    services.fleet.insert(record("alone", "s1", step_ms=500).row())

    rows = _rows(fleet.regressions(services, timedelta(days=7)))

    assert [(row["display_name"], row["before_ms"], row["after_ms"]) for row in rows] == [("slower", 100, 130)]
    assert rows[0]["change"] == pytest.approx(0.3)
    assert (rows[0]["framework_before"], rows[0]["framework_after"]) == ("jax", "pytorch_xla")


def test_by_cause_sums_lost_time_per_label_value(services):
    services.fleet.insert(record("a", lost={"host_work": 100}, devices=1, labels={"team": "infra"}).row())
    services.fleet.insert(record("b", lost={"host_work": 50, "transfers": 10}, devices=1,
                                 labels={"team": "infra"}).row())
    services.fleet.insert(record("c", lost={"collectives": 300}, devices=1).row())

    rows = {row["label_value"]: row for row in _rows(fleet.by_cause(services, "team", timedelta(days=7)))}

    assert set(rows) == {"infra", ""}
    assert (rows["infra"]["runs"], rows["infra"]["host_work_device_ms"], rows["infra"]["transfers_device_ms"]) == (
        2, 150, 10)
    assert rows[""]["collectives_device_ms"] == 300


@pytest.mark.parametrize("sql", ["DELETE FROM fleet_records", "PRAGMA table_info(fleet_records)",
                                 "  -- a comment\n  VACUUM", "ATTACH 'x' AS y"])
def test_only_a_select_is_run(services, sql):
    with pytest.raises(InvalidArgument, match="only a SELECT or WITH"):
        fleet.query(services, sql)


def test_a_select_is_answered_with_its_columns_in_the_stores_dialect(services):
    services.fleet.insert(record().row())

    answer = fleet.query(services, "/* how many */ SELECT COUNT(*) AS n FROM fleet_records", max_rows=5)

    assert answer == {"query": "query", "dialect": "sqlite", "columns": ["n"], "rows": [[1]], "truncated": False}
    with pytest.raises(InvalidArgument, match="only execute one statement|one statement"):
        fleet.query(services, "SELECT 1; DELETE FROM fleet_records")


def test_each_named_query_answers_over_10000_records_in_under_a_second(services):
    for made in generated(10_000):
        services.fleet.insert(made.row())

    timings = {}
    for name, ask in {"top-waste": lambda: fleet.top_waste(services, timedelta(days=7)),
                      "regressions": lambda: fleet.regressions(services, timedelta(days=7)),
                      "by-cause": lambda: fleet.by_cause(services, "team", timedelta(days=7))}.items():
        started = time.perf_counter()
        answer = ask()
        timings[name] = time.perf_counter() - started
        assert answer["rows"], name
    print("named queries over 10,000 records (s):", {name: round(s, 3) for name, s in timings.items()})
    assert max(timings.values()) < 1.0, timings
