"""``mldiag profiler-target``: the hosts of a run that serve the XProf profiler."""

from __future__ import annotations

import typer

from mldiag.cli.options import list_children_command

app = typer.Typer(help="Profiler targets: list.", no_args_is_help=True)

COLLECTION = "profilerTargets"
COLUMNS = ("hostname", "nodeIndex", "isMaster", "profilerAddress", "state")

app.command("list")(list_children_command(COLLECTION, COLUMNS, "List a run's profiler targets, newest first."))
