"""``mldiag query`` and ``mldiag fleet``: SQL over every analysis's fleet record, through the control plane.

``mldiag query "SELECT ..."`` runs one SELECT in the deployment's dialect (SQLite
under ``mldiag up``, GoogleSQL on BigQuery; ``docs/fleet.md`` has the table and
the differences). The ``fleet`` commands are the built-in queries: the runs that
lost the most accelerator time and to what, the runs whose step time rose, and
lost time per value of a run label.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mldiag.cli.options import DEFAULT_API_URL, ApiUrl, Fmt, Token, api_command
from mldiag.cli.output import Column, Format, show
from mldiag.client.api import ApiClient

app = typer.Typer(help="The fleet across runs: top-waste, regressions, by-cause.",
                  no_args_is_help=True)

Since = Annotated[str, typer.Option("--since", help="The window: how long ago, e.g. 7d, 12h.")]
Limit = Annotated[int, typer.Option("--limit", min=1, max=10_000, help="The most rows.")]
LOST_CAUSES = ("collectives", "transfers", "compilation", "dispatch", "host_work", "waiting", "interpreter", "untraced")


def _seconds(value: Any) -> str:
    return "" if value is None else f"{value / 1000:,.1f}"


def _percent(value: Any) -> str:
    return "" if value is None else f"{value * 100:.1f}%"


def answer_rows(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a fleet answer as records, column name to value."""
    return [dict(zip(answer["columns"], row, strict=True)) for row in answer["rows"]]


def _show(answer: dict[str, Any], fmt: Format, columns: list[Column]) -> None:
    rows = answer_rows(answer)
    if fmt is not Format.table:
        show(rows, fmt)
        return
    # The causes no row lost time to are left out of the table.
    lost = [name for name in LOST_CAUSES if any(row.get(f"{name}_device_ms") for row in rows)]
    show(rows, fmt, [*columns, *(Column(f"{name}_device_ms", f"{name} (device s)", _seconds) for name in lost)])
    if answer["truncated"]:
        typer.echo(f"(the first {len(rows)} rows)", err=True)


@api_command
def query(
    sql: Annotated[str, typer.Argument(help="One SELECT (or WITH) statement over the table fleet_records.")],
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, max=10_000, help="The most rows.")] = 1000,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Run SQL over the fleet records (read-only, time- and row-limited)."""
    answer = ApiClient(api_url, token).call("POST", "v1alpha/fleet:query", body={"sql": sql, "maxRows": max_rows})
    show(answer_rows(answer), fmt, answer["columns"])
    if answer["truncated"]:
        typer.echo(f"(the first {len(answer['rows'])} rows)", err=True)


@app.command("top-waste")
@api_command
def top_waste(
    since: Since = "7d", limit: Limit = 50,
    label: Annotated[str, typer.Option("--label", help="Only runs with this label, KEY=VALUE.")] = "",
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Runs by the accelerator time they lost in the window, split by cause."""
    params = {"since": since, "limit": limit, **({"label": label} if label else {})}
    answer = ApiClient(api_url, token).call("GET", "v1alpha/fleet/topWaste", params=params)
    _show(answer, fmt, [Column("display_name", "run"), Column("analyses"),
                        Column("lost_device_ms", "lost (device s)", _seconds), Column("lost_share", "lost", _percent)])


@app.command("regressions")
@api_command
def regressions(
    since: Since = "7d", limit: Limit = 50,
    threshold: Annotated[float, typer.Option("--threshold", min=0, help="The rise to report, e.g. 0.05.")] = 0.05,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Runs whose newest step time in the window is above their oldest by more than the threshold."""
    answer = ApiClient(api_url, token).call("GET", "v1alpha/fleet/regressions",
                                            params={"since": since, "limit": limit, "threshold": threshold})
    _show(answer, fmt, [Column("display_name", "run"), Column("before_ms", "before (ms)", lambda v: f"{v:.1f}"),
                        Column("after_ms", "after (ms)", lambda v: f"{v:.1f}"), Column("change", "change", _percent),
                        Column("framework_before"), Column("framework_after")])


@app.command("by-cause")
@api_command
def by_cause(
    label: Annotated[str, typer.Option("--label", help="The run label to group by, e.g. team.")],
    since: Since = "7d", limit: Limit = 50,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Lost accelerator time per value of a run label, split by cause."""
    answer = ApiClient(api_url, token).call("GET", "v1alpha/fleet/byCause",
                                            params={"label": label, "since": since, "limit": limit})
    _show(answer, fmt, [Column("label_value", label), Column("runs"), Column("analyses"),
                        Column("lost_device_ms", "lost (device s)", _seconds), Column("lost_share", "lost", _percent)])
