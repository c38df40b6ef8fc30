"""``/v1alpha/fleet`` routes: SQL over every analysis's fleet record, and the named queries.

* ``POST /v1alpha/fleet:query`` with ``{"sql", "maxRows"?}``: one SELECT (or WITH) in the
  deployment's dialect (SQLite for ``mldiag up``, GoogleSQL on BigQuery), run read-only
  with a time and a row limit;
* ``GET /v1alpha/fleet/topWaste?since=7d&label=team=infra&limit=``,
  ``GET /v1alpha/fleet/regressions?since=7d&threshold=0.05&limit=``,
  ``GET /v1alpha/fleet/byCause?label=team&since=7d&limit=``.

Each answers ``{"query", "dialect", "columns", "rows", "truncated"}``.
"""

from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, Response

from mldiag.domain.errors import InvalidArgument
from mldiag.domain.types import parse_duration
from mldiag.entrypoints.http.rest import json_body, ok, query, services
from mldiag.services import fleet

blueprint = Blueprint("fleet", __name__, url_prefix="/v1alpha")
DEFAULT_WINDOW = "7d"


def _number(name: str, default: str, kind: type) -> float | int:
    raw = query(name, default)
    try:
        return kind(raw)
    except ValueError:
        raise InvalidArgument(f"{raw!r} is not a number", field=name) from None


def _since() -> timedelta:
    try:
        return parse_duration(query("since", DEFAULT_WINDOW))
    except ValueError as error:
        raise InvalidArgument(str(error), field="since") from None


@blueprint.post("/fleet:query")
def run_query() -> Response:
    body = json_body()
    sql, max_rows = body.get("sql"), body.get("maxRows", fleet.MAX_ROWS)
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidArgument("'sql' is the statement to run", field="sql")
    if not isinstance(max_rows, int) or isinstance(max_rows, bool):
        raise InvalidArgument("'maxRows' is a number", field="maxRows")
    return ok(fleet.query(services(), sql, max_rows))


@blueprint.get("/fleet/topWaste")
def top_waste() -> Response:
    return ok(fleet.top_waste(services(), _since(), query("label"), int(_number("limit", "50", int))))


@blueprint.get("/fleet/regressions")
def regressions() -> Response:
    return ok(fleet.regressions(services(), _since(), float(_number("threshold", "0.05", float)),
                                int(_number("limit", "50", int))))


@blueprint.get("/fleet/byCause")
def by_cause() -> Response:
    return ok(fleet.by_cause(services(), query("label"), _since(), int(_number("limit", "50", int))))
