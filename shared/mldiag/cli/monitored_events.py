"""``mldiag monitored-events``: what workload monitoring reported about a run."""

from __future__ import annotations

from typing import Annotated

import typer

from mldiag.cli.api_client import (
    DEFAULT_API_URL, DEFAULT_LOCATION, DEFAULT_PROJECT, ApiClient, ApiUrl, Filter, Fmt, Limit, Location,
    Project, RunOption, SortBy, Token, api_command, child_path, print_resources,
)
from mldiag.cli.output import Format

app = typer.Typer(help="Monitored events: list, describe.", no_args_is_help=True)

COLLECTION = "monitoredEvents"
COLUMNS = ("type", "displayName", "startTime", "endTime")


@app.command("list")
@api_command
def list_events(
    run: RunOption,
    filter: Filter = "", limit: Limit = 100, sort_by: SortBy = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """List a run's monitored events, newest first."""
    events = ApiClient(api_url, token).list_all(child_path(project, location, run, COLLECTION), COLLECTION,
                                                limit=limit, filter=filter, order_by=sort_by)
    print_resources(events, fmt, COLUMNS)


@app.command()
@api_command
def describe(
    event: Annotated[str, typer.Argument(help="The event's id (or its full resource name).")],
    run: RunOption = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Show one monitored event with its analyzer reports."""
    print_resources(ApiClient(api_url, token).call("GET", child_path(project, location, run, COLLECTION, event)), fmt)
