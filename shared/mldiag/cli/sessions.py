"""``mldiag profiler-session``: list, describe and share profiler sessions."""

from __future__ import annotations

from typing import Annotated

import typer

from mldiag.cli.api_client import (
    DEFAULT_API_URL, DEFAULT_LOCATION, DEFAULT_PROJECT, ApiClient, ApiUrl, Filter, Fmt, Limit, Location,
    Project, RunOption, SortBy, Token, api_command, child_path, print_resources,
)
from mldiag.cli.output import Format, show
from mldiag.domain.types import format_duration, parse_duration

app = typer.Typer(help="Profiler sessions: list, describe, share.", no_args_is_help=True)

COLLECTION = "profilerSessions"
COLUMNS = ("kind", "createTime", "analysis.state", "analysis.health", "storageFolderUri")
SessionId = Annotated[str, typer.Argument(help="The session's id (or its full resource name).")]


def _ttl(value: str) -> str:
    try:
        return format_duration(parse_duration(value))
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


@app.command("list")
@api_command
def list_sessions(
    run: RunOption,
    filter: Filter = "", limit: Limit = 100, sort_by: SortBy = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """List a run's profiler sessions, newest first."""
    sessions = ApiClient(api_url, token).list_all(child_path(project, location, run, COLLECTION), COLLECTION,
                                                  limit=limit, filter=filter, order_by=sort_by)
    print_resources(sessions, fmt, COLUMNS)


@app.command()
@api_command
def describe(
    session: SessionId, run: RunOption = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Show one profiler session, with its analysis status and links."""
    print_resources(ApiClient(api_url, token).call("GET", child_path(project, location, run, COLLECTION, session)), fmt)


@app.command()
@api_command
def share(
    session: SessionId, run: RunOption = "",
    ttl: Annotated[str, typer.Option("--ttl", callback=_ttl, help="How long the link works (1m to 168h).")] = "1h",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Print a signed link to the session's report that expires after --ttl."""
    path = child_path(project, location, run, COLLECTION, session) + ":share"
    link = ApiClient(api_url, token).call("POST", path, body={"ttl": ttl})
    if fmt is Format.table:
        typer.echo(link["url"])
        typer.echo(f"expires {link['expireTime']}", err=True)
    else:
        show(link, fmt)
