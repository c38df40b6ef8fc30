"""``mldiag profiler-target``: the hosts of a run that serve the XProf profiler."""

from __future__ import annotations

import typer

from mldiag.cli.api_client import (
    DEFAULT_API_URL, DEFAULT_LOCATION, DEFAULT_PROJECT, ApiClient, ApiUrl, Filter, Fmt, Limit, Location,
    Project, RunOption, Token, api_command, child_path, print_resources,
)
from mldiag.cli.output import Format

app = typer.Typer(help="Profiler targets: list.", no_args_is_help=True)

COLLECTION = "profilerTargets"
COLUMNS = ("hostname", "nodeIndex", "isMaster", "profilerAddress", "state")


@app.command("list")
@api_command
def list_targets(
    run: RunOption,
    filter: Filter = "", limit: Limit = 100,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """List a run's profiler targets."""
    targets = ApiClient(api_url, token).list_all(child_path(project, location, run, COLLECTION), COLLECTION,
                                                 limit=limit, filter=filter, order_by="createTime")
    print_resources(targets, fmt, COLUMNS)
