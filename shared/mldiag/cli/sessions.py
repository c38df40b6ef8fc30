"""``mldiag profiler-session``: list, describe, share and re-analyse profiler sessions, and capture new ones
(:mod:`mldiag.cli.capture`)."""

from __future__ import annotations

from typing import Annotated

import typer

from mldiag.cli import capture
from mldiag.cli.options import (
    DEFAULT_API_URL,
    DEFAULT_LOCATION,
    DEFAULT_PROJECT,
    ApiUrl,
    Fmt,
    Location,
    Project,
    RunOption,
    Token,
    api_command,
    describe_child_command,
    list_children_command,
)
from mldiag.cli.output import Column, Format, milliseconds, show
from mldiag.client.api import ApiClient

app = typer.Typer(help="Profiler sessions: list, describe, share, analyze, capture.", no_args_is_help=True)

COLLECTION = "profilerSessions"
COLUMNS = (Column("sessionPhase", "PHASE"), Column("analysis.state", "ANALYSIS"), Column("analysis.health", "HEALTH"),
           Column("analysis.stepTimeMs", "STEP TIME", milliseconds), Column("analysis.topFinding", "TOP FINDING"))
SessionId = Annotated[str, typer.Argument(help="The session's id (or its full resource name).")]


app.command("list")(list_children_command(COLLECTION, COLUMNS, "List a run's profiler sessions, newest first."))
app.command("describe")(describe_child_command(
    COLLECTION, "Show one profiler session, with its analysis status and links."))


@app.command()
@api_command
def share(
    session: SessionId, run: RunOption = "",
    ttl: Annotated[str, typer.Option(
        "--ttl", callback=capture.wire_duration, help="How long the link works (1m to 7d).")] = "1h",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Print a signed link to the session's report that expires after --ttl."""
    client = ApiClient(api_url, token)
    link = client.call("POST", client.resolve_child_path(project, location, run, COLLECTION, session) + ":share",
                       body={"ttl": ttl})
    if fmt is Format.table:
        typer.echo(link["url"])
        typer.echo(f"expires {link['expireTime']}", err=True)
    else:
        show(link, fmt)


@app.command()
@api_command
def analyze(
    session: SessionId, run: RunOption = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Analyse the session's files again (after a failed or timed-out analysis, or a new mldiag)."""
    client = ApiClient(api_url, token)
    updated = client.call("POST", client.resolve_child_path(project, location, run, COLLECTION, session) + ":analyze",
                          body={})
    if fmt is Format.table:
        typer.echo(f"analysis of {updated['name']} is {updated['analysis']['state']}; "
                   f"follow it with `mldiag profiler-session describe`")
    else:
        show(updated, fmt)


app.command("capture")(capture.capture)
