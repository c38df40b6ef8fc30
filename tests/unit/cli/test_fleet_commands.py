"""``mldiag query`` and ``mldiag fleet``, through the API of a control plane holding fleet records."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fleet"))
from fleet_support import record  # noqa: E402

from mldiag.domain.clock import utcnow  # noqa: E402


@pytest.fixture
def filled(server):
    now = utcnow()
    server.services.fleet.insert(record("llama", "s1", at=now - timedelta(days=2), step_ms=100,
                                        lost={"host_work": 300, "compilation": 20}, labels={"team": "infra"}).row())
    server.services.fleet.insert(record("llama", "s2", at=now - timedelta(hours=1), step_ms=140,
                                        lost={"host_work": 250}, labels={"team": "infra"}).row())
    server.services.fleet.insert(record("bert", "s1", at=now - timedelta(hours=2), lost={"dispatch": 5},
                                        labels={"team": "research"}).row())
    return server


def test_top_waste_lists_runs_with_lost_time_by_cause(filled, mldiag):
    result = mldiag("fleet", "top-waste", "--since", "7d")

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "host_work (device s)" in lines[1] and "compilation (device s)" in lines[1]
    assert "collectives" not in result.output  # no run lost time to it
    llama, bert = (line for line in lines if "llama" in line or "bert" in line)
    cells = llama.replace("│", " ").split()
    assert cells[:4] == ["llama", "2", "2.3", "26.3%"] and "bert" in bert


def test_top_waste_as_json_and_filtered_by_label(filled, mldiag):
    result = mldiag("fleet", "top-waste", "--label", "team=research", "--format", "json")

    rows = json.loads(result.output)
    assert [row["display_name"] for row in rows] == ["bert"] and rows[0]["dispatch_device_ms"] == 20


def test_regressions_and_by_cause(filled, mldiag):
    regressed = json.loads(mldiag("fleet", "regressions", "--since", "7d", "--format", "json").output)
    assert [(row["display_name"], row["before_ms"], row["after_ms"]) for row in regressed] == [("llama", 100, 140)]

    by_team = json.loads(mldiag("fleet", "by-cause", "--label", "team", "--format", "json").output)
    assert [(row["label_value"], row["runs"]) for row in by_team] == [("infra", 1), ("research", 1)]


def test_query_runs_a_select_and_refuses_anything_else(filled, mldiag):
    counted = mldiag("query", "SELECT run_display_name AS run, COUNT(*) AS n FROM fleet_records "
                              "GROUP BY run_display_name ORDER BY run_display_name", "--format", "json")
    assert json.loads(counted.output) == [{"run": "bert", "n": 1}, {"run": "llama", "n": 2}]

    refused = mldiag("query", "DELETE FROM fleet_records")
    assert refused.exit_code == 1 and "only a SELECT or WITH statement may be run" in refused.output
    broken = mldiag("query", "SELECT nope FROM fleet_records")
    assert broken.exit_code == 1 and "no such column: nope" in broken.output
    assert filled.services.fleet.query("SELECT COUNT(*) FROM fleet_records", max_rows=1, timeout_s=5).rows == [[3]]
