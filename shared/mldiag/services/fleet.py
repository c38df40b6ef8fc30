"""The fleet view: a record per finished analysis, published beside the notification, and the queries over them.

:func:`fleet_record` turns an analysis, its session and its run into a
:class:`~mldiag.domain.fleet.FleetRecord`; :func:`publish_record` sends it on
``analysis-events`` (:func:`mldiag.domain.messages.fleet_record_message`) from
the unit of work that records the analysis.

The queries: any one SELECT, in the dialect of the deployment's store, and
three named ones written for both dialects (``DIALECTS``): the runs that lost
the most accelerator time, and to what; the runs whose step time rose; and the
lost time per value of a run label.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from mldiag.analysis.evidence import Analysis
from mldiag.analysis.host_evidence import HostEvidence, TimeCause
from mldiag.analysis.rules.frameworks import detect
from mldiag.domain.errors import FailedPrecondition, InvalidArgument
from mldiag.domain.fleet import CauseTime, FindingCost, FleetRecord, Label
from mldiag.domain.messages import fleet_record_message
from mldiag.domain.names import parent_of
from mldiag.domain.resources import FindingCategory, MachineLearningRun, Priority, ProfilerSession
from mldiag.domain.topics import ANALYSIS_EVENTS
from mldiag.domain.clock import format_timestamp
from mldiag.ports import FleetRecords, QueryResult
from mldiag.services.dependencies import Configured, Fleet, Stored
from mldiag.services.repository import document_key
from mldiag.services.unit_of_work import UnitOfWork

# The causes of loop time a finding's category is about: its cost is their time.
CATEGORY_CAUSES: dict[FindingCategory, tuple[TimeCause, ...]] = {
    FindingCategory.INPUT_BOUND: (TimeCause.HOST_WORK, TimeCause.WAITING, TimeCause.INTERPRETER),
    FindingCategory.DISPATCH_OVERHEAD: (TimeCause.DISPATCH,),
    FindingCategory.RECOMPILATION: (TimeCause.COMPILATION,),
    FindingCategory.COMMUNICATION: (TimeCause.COLLECTIVES,),
    FindingCategory.DATA_MOVEMENT: (TimeCause.TRANSFERS,),
}
COSTED_PRIORITIES = (Priority.P0, Priority.P1)


def capture_kind(session: ProfilerSession) -> str:
    if session.auto_captured:
        return "automatic"
    return session.kind.value.removeprefix("KIND_").lower()


def _attribution(hosts: Iterable[HostEvidence]) -> tuple[list[CauseTime], float, float]:
    """Each cause's time summed over hosts, largest first; the loop time and accelerator loop time summed too."""
    ms: dict[TimeCause, float] = defaultdict(float)
    device_ms: dict[TimeCause, float] = defaultdict(float)
    useful: dict[TimeCause, bool] = {}
    loop_ms = loop_device_ms = 0.0
    for host in hosts:
        if host.attribution is None:
            continue
        devices = max(host.devices, 1)
        loop_ms += host.attribution.loop_ms
        loop_device_ms += host.attribution.loop_ms * devices
        for part in host.attribution.parts:
            ms[part.cause] += part.ms
            device_ms[part.cause] += part.ms * devices
            useful[part.cause] = useful.get(part.cause, False) or part.useful
    causes = [CauseTime(cause=cause.value, ms=ms[cause], share=ms[cause] / loop_ms if loop_ms else 0.0,
                        device_ms=device_ms[cause], useful=useful[cause])
              for cause in sorted(ms, key=lambda cause: -ms[cause])]
    return causes, loop_ms, loop_device_ms


def _finding_costs(analysis: Analysis, causes: list[CauseTime], loop_ms: float) -> list[FindingCost]:
    by_cause = {cause.cause: cause.ms for cause in causes}
    costed = []
    for finding in analysis.findings:
        if finding.priority not in COSTED_PRIORITIES:
            continue
        named = CATEGORY_CAUSES.get(finding.category)
        cost = sum(by_cause.get(cause.value, 0.0) for cause in named) if named else None
        costed.append(FindingCost(priority=finding.priority.value, category=finding.category.value,
                                  title=finding.title, cost_ms=cost,
                                  cost_share=cost / loop_ms if cost is not None and loop_ms else None))
    return costed


def fleet_record(analysis: Analysis, session: ProfilerSession, run: MachineLearningRun | None,
                 analyzed_at: datetime) -> FleetRecord:
    """The fleet record of ``session``'s analysis (``run`` is ``None`` when it was deleted meanwhile)."""
    causes, loop_ms, loop_device_ms = _attribution(analysis.hosts)
    lost = [cause for cause in causes if not cause.useful]
    lost_device_ms = sum(cause.device_ms for cause in lost)
    steps = [host.step_ms for host in analysis.hosts if host.step_ms is not None]
    slowest = max(steps, key=lambda distribution: distribution.median, default=None)
    top = analysis.findings[0] if analysis.findings else None
    hardware = analysis.metrics.hardware or next((host.device_type for host in analysis.hosts if host.device_type), "")
    return FleetRecord(
        record_id=f"{session.name}@{session.analysis.generation_set}",
        analyzed_at=analyzed_at,
        run=parent_of(session.name),
        run_display_name=run.display_name if run else "",
        session=session.name,
        generation_set=session.analysis.generation_set,
        session_created_at=session.create_time,
        capture_kind=capture_kind(session),
        status=analysis.status.value,
        top_finding=f"{top.priority.value} {top.title}" if top else "",
        host_count=len(analysis.hosts),
        device_count=sum(host.devices for host in analysis.hosts),
        device_kind=analysis.hosts[0].device_kind.value if analysis.hosts else "",
        hardware=hardware,
        framework=detect(analysis.hosts).value,
        steps=analysis.metrics.steps,
        step_time_ms=analysis.metrics.step_time_ms,
        step_time_mean_ms=slowest.mean if slowest else None,
        step_time_median_ms=slowest.median if slowest else None,
        step_time_p90_ms=slowest.p90 if slowest else None,
        step_time_min_ms=min(d.min for d in steps) if steps else None,
        step_time_max_ms=max(d.max for d in steps) if steps else None,
        mfu=analysis.metrics.mfu,
        busy_fraction=analysis.metrics.busy_fraction,
        loop_ms=loop_ms,
        loop_device_ms=loop_device_ms,
        lost_ms=sum(cause.ms for cause in lost),
        lost_device_ms=lost_device_ms,
        lost_share=lost_device_ms / loop_device_ms if loop_device_ms else None,
        attribution=causes,
        findings=_finding_costs(analysis, causes, loop_ms),
        labels=[Label(key=key, value=value) for key, value in sorted((run.labels if run else {}).items())],
    )


def publish_record(unit: UnitOfWork, services: Configured, record: FleetRecord) -> None:
    """Send ``record`` on ``analysis-events`` once ``unit`` has committed."""
    settings = services.settings
    source = f"//mldiag/projects/{settings.project}/locations/{settings.location}"
    unit.publish(f"{ANALYSIS_EVENTS}:{document_key(record.record_id)}:record", fleet_record_message(record, source))


def table(services: Fleet) -> FleetRecords:
    if services.fleet is None:
        raise FailedPrecondition("this deployment keeps no fleet table")
    return services.fleet


def record_delivered(services: Fleet, record: FleetRecord) -> str:
    """The embedded ``record_fleet`` handler body: a fleet record into the fleet table.

    The row is keyed by session and generation set, so a redelivery writes the same row again.
    """
    table(services).insert(record.row())
    return f"recorded {record.record_id}"


# --- reading the table ----------------------------------------------------------------------------

MAX_ROWS = 10_000
QUERY_TIMEOUT_S = 10.0
LOST_CAUSES = tuple(cause.value for cause in TimeCause if cause is not TimeCause.DEVICE_COMPUTE)
_READING = re.compile(r"(?:\s|--[^\n]*\n|/\*.*?\*/)*(select|with)\b", re.IGNORECASE | re.DOTALL)


class FleetPorts(Fleet, Stored, Protocol):
    """What the fleet queries use: the table, and the clock their windows end at."""


def query(services: Fleet, sql: str, max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """One SELECT (or WITH ... SELECT) over the fleet table in the store's dialect, limited in time and rows."""
    if not _READING.match(sql):
        raise InvalidArgument("only a SELECT or WITH statement may be run", field="sql")
    if not 1 <= max_rows <= MAX_ROWS:
        raise InvalidArgument(f"maxRows is 1 to {MAX_ROWS}", field="maxRows")
    fleet = table(services)
    return _answer(fleet, "query", fleet.query(sql, max_rows=max_rows, timeout_s=QUERY_TIMEOUT_S))


def _answer(fleet: FleetRecords, name: str, result: QueryResult) -> dict[str, Any]:
    return {"query": name, "dialect": fleet.dialect, "columns": result.columns, "rows": result.rows,
            "truncated": result.truncated}


@dataclass(frozen=True)
class _Dialect:
    """How the named queries are written for one store: its parameters, its repeated fields and its duplicates."""

    parameter: str  # the prefix of a named parameter
    unnest: str  # a repeated field as rows: {column}, {alias}
    field: str  # one field of such a row: {alias}, {name}
    newest_only: str  # what keeps only the newest row of each record after a WHERE

    def recent(self, table: str, condition: str = "") -> str:
        return (f"SELECT * FROM {table} WHERE analyzed_at >= {self.parameter}since"
                + (f" AND {condition}" if condition else "") + self.newest_only)

    def of(self, alias: str, name: str) -> str:
        return self.field.format(alias=alias, name=name)

    def rows_of(self, column: str, alias: str) -> str:
        return self.unnest.format(column=column, alias=alias)

    def label(self, key_parameter: str, row: str = "r") -> str:
        """The value of the label named by ``key_parameter`` on ``row``; '' where it has none."""
        return (f"COALESCE((SELECT {self.of('l', 'value')} FROM {self.rows_of(f'{row}.labels', 'l')} "
                f"WHERE {self.of('l', 'key')} = {self.parameter}{key_parameter}), '')")

    def since(self, when: datetime) -> Any:
        return format_timestamp(when) if self.parameter == ":" else when


DIALECTS = {
    "sqlite": _Dialect(":", "json_each({column}) AS {alias}", "json_extract({alias}.value, '$.{name}')", ""),
    "bigquery": _Dialect("@", "UNNEST({column}) AS {alias}", "{alias}.{name}",
                         " QUALIFY ROW_NUMBER() OVER (PARTITION BY record_id ORDER BY analyzed_at DESC) = 1"),
}


def _per_cause(dialect: _Dialect, alias: str) -> str:
    cause, device_ms = dialect.of(alias, "cause"), dialect.of(alias, "device_ms")
    return ", ".join(f"SUM(CASE WHEN {cause} = '{name}' THEN {device_ms} ELSE 0 END) AS {name}_device_ms"
                     for name in LOST_CAUSES)


def _cause_columns(alias: str) -> str:
    return ", ".join(f"{alias}.{name}_device_ms" for name in LOST_CAUSES)


def top_waste_sql(dialect: _Dialect, table: str, labelled: bool) -> str:
    p = dialect.parameter
    condition = (f"EXISTS (SELECT 1 FROM {dialect.rows_of('labels', 'l')} WHERE {dialect.of('l', 'key')} = "
                 f"{p}label_key AND {dialect.of('l', 'value')} = {p}label_value)") if labelled else ""
    return f"""
WITH recent AS ({dialect.recent(table, condition)}),
latest AS (SELECT run, session, analyzed_at, lost_device_ms / NULLIF(loop_device_ms, 0) AS share,
                  ROW_NUMBER() OVER (PARTITION BY run ORDER BY analyzed_at DESC) AS newest,
                  ROW_NUMBER() OVER (PARTITION BY run ORDER BY analyzed_at) AS oldest FROM recent),
runs AS (SELECT run, MAX(run_display_name) AS display_name, COUNT(*) AS analyses,
                SUM(lost_device_ms) AS lost_device_ms, SUM(loop_device_ms) AS loop_device_ms FROM recent GROUP BY run),
causes AS (SELECT r.run AS run, {_per_cause(dialect, 'a')}
           FROM recent AS r, {dialect.rows_of('r.attribution', 'a')} GROUP BY r.run)
SELECT runs.run, runs.display_name, runs.analyses, runs.lost_device_ms, runs.loop_device_ms,
       runs.lost_device_ms / NULLIF(runs.loop_device_ms, 0) AS lost_share, {_cause_columns('causes')},
       latest.session AS latest_session, latest.analyzed_at AS latest_analyzed_at,
       oldest.share AS oldest_lost_share, latest.share AS latest_lost_share
FROM runs JOIN latest ON latest.run = runs.run AND latest.newest = 1
JOIN latest AS oldest ON oldest.run = runs.run AND oldest.oldest = 1
LEFT JOIN causes ON causes.run = runs.run
ORDER BY runs.lost_device_ms DESC, runs.run LIMIT {p}limit"""


def regressions_sql(dialect: _Dialect, table: str) -> str:
    p = dialect.parameter
    return f"""
WITH recent AS ({dialect.recent(table, "step_time_ms IS NOT NULL")}),
ordered AS (SELECT record_id, run, run_display_name, session, analyzed_at, step_time_ms, framework, hardware,
                   ROW_NUMBER() OVER (PARTITION BY run ORDER BY analyzed_at) AS oldest,
                   ROW_NUMBER() OVER (PARTITION BY run ORDER BY analyzed_at DESC) AS newest FROM recent)
SELECT last.run, last.run_display_name AS display_name, first.step_time_ms AS before_ms,
       last.step_time_ms AS after_ms, last.step_time_ms / first.step_time_ms - 1 AS change,
       first.framework AS framework_before, last.framework AS framework_after,
       first.hardware AS hardware_before, last.hardware AS hardware_after,
       first.session AS before_session, last.session AS latest_session, last.analyzed_at AS latest_analyzed_at
FROM ordered AS first JOIN ordered AS last ON first.run = last.run AND first.oldest = 1 AND last.newest = 1
WHERE first.record_id != last.record_id AND last.step_time_ms > first.step_time_ms * (1 + {p}threshold)
ORDER BY change DESC, last.run LIMIT {p}limit"""


def by_cause_sql(dialect: _Dialect, table: str) -> str:
    p = dialect.parameter
    return f"""
WITH recent AS ({dialect.recent(table)}),
labelled AS (SELECT r.*, {dialect.label('label')} AS label_value FROM recent AS r),
totals AS (SELECT label_value, COUNT(DISTINCT run) AS runs, COUNT(*) AS analyses,
                  SUM(lost_device_ms) AS lost_device_ms, SUM(loop_device_ms) AS loop_device_ms
           FROM labelled GROUP BY label_value),
causes AS (SELECT x.label_value AS label_value, {_per_cause(dialect, 'a')}
           FROM labelled AS x, {dialect.rows_of('x.attribution', 'a')} GROUP BY x.label_value)
SELECT totals.label_value, totals.runs, totals.analyses, totals.lost_device_ms, totals.loop_device_ms,
       totals.lost_device_ms / NULLIF(totals.loop_device_ms, 0) AS lost_share, {_cause_columns('causes')}
FROM totals LEFT JOIN causes ON causes.label_value = totals.label_value
ORDER BY totals.lost_device_ms DESC, totals.label_value LIMIT {p}limit"""


def _named(services: FleetPorts, name: str, sql: Callable[[_Dialect, str], str], since: timedelta,
           parameters: dict[str, Any], limit: int) -> dict[str, Any]:
    if not 1 <= limit <= MAX_ROWS:
        raise InvalidArgument(f"limit is 1 to {MAX_ROWS}", field="limit")
    fleet = table(services)
    dialect = DIALECTS[fleet.dialect]
    bound = {"since": dialect.since(services.now() - since), "limit": limit, **parameters}
    result = fleet.query(sql(dialect, fleet.table), bound, max_rows=limit, timeout_s=QUERY_TIMEOUT_S)
    return _answer(fleet, name, result)


def top_waste(services: FleetPorts, since: timedelta, label: str = "", limit: int = 50) -> dict[str, Any]:
    """Runs by the accelerator time they lost in the window, with each cause's part and the trend (the lost share
    of the run's oldest and newest analysis in the window); ``label``: ``key=value``."""
    key, _, value = label.partition("=")
    if label and not (key and value):
        raise InvalidArgument("a label filter is key=value", field="label")
    parameters = {"label_key": key, "label_value": value} if label else {}
    return _named(services, "top-waste", lambda d, t: top_waste_sql(d, t, bool(label)), since, parameters, limit)


def regressions(services: FleetPorts, since: timedelta, threshold: float = 0.05, limit: int = 50) -> dict[str, Any]:
    """Runs whose newest step time in the window is more than ``threshold`` above their oldest in it."""
    if not 0 <= threshold <= 100:
        raise InvalidArgument("threshold is a fraction, 0 to 100", field="threshold")
    return _named(services, "regressions", regressions_sql, since, {"threshold": threshold}, limit)


def by_cause(services: FleetPorts, label: str, since: timedelta, limit: int = 50) -> dict[str, Any]:
    """Lost accelerator time per value of the run label ``label`` ('' for runs without it), and per cause."""
    if not label or "=" in label:
        raise InvalidArgument("by-cause groups by a label's name, such as team", field="label")
    return _named(services, "by-cause", by_cause_sql, since, {"label": label}, limit)
