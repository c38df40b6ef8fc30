"""``mldiag events``: the event archive, dead letters, and replay, through the control plane's operator routes.

Like every other command they talk to ``--api-url`` / ``MLDIAG_API_URL``, with
``--token`` / ``MLDIAG_API_TOKEN`` when the control plane asks for one (it does
for these routes, reads included). Filters are checked by the server, so
``--since 1h`` means an hour before the server's clock.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer

from mldiag.cli.options import DEFAULT_API_URL, ApiUrl, Fmt, Token, api_command
from mldiag.config import MAINTENANCE_TICKS, TOPIC_SUBSCRIBERS
from mldiag.cli.output import Format, show
from mldiag.client.api import ApiClient

app = typer.Typer(help="Archived events: list, show, replay, dead-letters, prune.", no_args_is_help=True)

MAINTENANCE = TOPIC_SUBSCRIBERS[MAINTENANCE_TICKS]
_COLUMNS = ("id", "function", "type", "outcome", "attempts", "firstReceived", "error")

Type = Annotated[str, typer.Option(
    "--type", help="CloudEvent type, e.g. google.cloud.storage.object.v1.finalized.")]
Function = Annotated[str, typer.Option("--function", help="The function that handled it.")]
Outcome = Annotated[str, typer.Option("--outcome", help="ok, ignored, rejected, failed or received.")]
Since = Annotated[str, typer.Option("--since", help="A time (2026-01-01T00:00:00Z), or how long ago (1h).")]
Until = Annotated[str, typer.Option("--until", help="A time, or how long ago.")]
Limit = Annotated[int, typer.Option("--limit", min=1, max=10_000, help="The most events.")]


def _filters(type: str, function: str, outcome: str, since: str, until: str, limit: int) -> dict[str, Any]:
    given = {"type": type, "function": function, "outcome": outcome, "since": since, "until": until}
    return {**{key: value for key, value in given.items() if value}, "limit": limit}


@app.command("list")
@api_command
def list_events(
    type: Type = "", function: Function = "", outcome: Outcome = "", since: Since = "", until: Until = "",
    limit: Limit = 100,
    everything: Annotated[bool, typer.Option(
        "--all", help=f"Include the {MAINTENANCE} function's ticks, left out unless --function names it.")] = False,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """List archived events, newest first (without the maintenance ticks unless --all)."""
    params = _filters(type, function, outcome, since, until, limit)
    if not everything and not function:
        params["excludeFunction"] = MAINTENANCE
    found = ApiClient(api_url, token).call("GET", "v1alpha/events", params=params)
    show(found.get("events", []), fmt, _COLUMNS)


@app.command("show")
@api_command
def show_event(
    event: Annotated[str, typer.Argument(help="function:id, or the event id alone.")],
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "",
    fmt: Annotated[Format, typer.Option("--format", help="Output format.")] = Format.yaml,
) -> None:
    """Show one archived event with its raw CloudEvent."""
    show(ApiClient(api_url, token).call("GET", f"v1alpha/events/{quote(event, safe=':')}"), fmt)


@app.command("replay")
@api_command
def replay(
    events: Annotated[list[str] | None, typer.Argument(help="Events to replay (function:id or id).")] = None,
    type: Type = "", function: Function = "", outcome: Outcome = "", since: Since = "", until: Until = "",
    limit: Limit = 100,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would happen; change nothing.")] = False,
    to: Annotated[str, typer.Option(
        "--to", help="local: the control plane runs the handler itself; topic: re-publish to the source topic.")]
        = "local",
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Re-deliver archived events by id, or every event matching the filters."""
    if not events and not any([type, function, outcome, since, until]):
        raise typer.BadParameter("name events to replay, or select them with --type/--function/--outcome/--since")
    body = {"events": events or [], **_filters(type, function, outcome, since, until, limit),
            "dryRun": dry_run, "to": to}
    results = ApiClient(api_url, token).call("POST", "v1alpha/events:replay", body=body).get("results", [])
    show(results, fmt, ("key", "function", "before", "result"))
    if any(result["result"].startswith("failed") for result in results):
        raise typer.Exit(1)


@app.command("dead-letters")
@api_command
def dead_letters(
    limit: Limit = 100, api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Messages that exhausted their retries, with the last error their function recorded."""
    found = ApiClient(api_url, token).call("GET", "v1alpha/deadLetters", params={"limit": limit})
    show(found.get("deadLetters", []), fmt,
         ("messageId", "deadLetterTopic", "sourceSubscription", "deliveryCount", "receivedAt", "lastError"))


@app.command("prune")
@api_command
def prune(api_url: ApiUrl = DEFAULT_API_URL, token: Token = "") -> None:
    """Delete archived events past their retention (the cloud's Firestore TTL does this by itself)."""
    pruned = ApiClient(api_url, token).call("POST", "v1alpha/events:prune", body={})["pruned"]
    typer.echo(f"pruned {pruned} event(s)")
