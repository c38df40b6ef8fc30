"""``mldiag monitored-events``: what workload monitoring reported about a run."""

from __future__ import annotations

import typer

from mldiag.cli.options import describe_child_command, list_children_command

app = typer.Typer(help="Monitored events: list, describe.", no_args_is_help=True)

COLLECTION = "monitoredEvents"
COLUMNS = ("type", "displayName", "startTime", "endTime")

app.command("list")(list_children_command(COLLECTION, COLUMNS, "List a run's monitored events, newest first."))
app.command("describe")(describe_child_command(COLLECTION, "Show one monitored event with its analyzer reports."))
