"""``mldiag events``: the event archive, dead letters, and replay.

These commands act on the backend the environment names (``MLDIAG_BACKEND``
and friends), not through the API: they are the operator's debugging tools.
"""

from __future__ import annotations

from datetime import datetime

import typer

from mldiag.cli.output import Format, errors, show
from mldiag.deadletters import list_dead_letters
from mldiag.domain.errors import MldiagError
from mldiag.domain.types import parse_duration
from mldiag.eventlog import Outcome
from mldiag.replay import Target, find_record, replay_one

app = typer.Typer(help="Archived events: list, show, replay, dead-letters, prune.", no_args_is_help=True)

def _services():
    from mldiag import bootstrap

    return bootstrap.build()


_COLUMNS = ("id", "function", "type", "outcome", "attempts", "firstReceived", "error")


def _when(value: str | None) -> datetime | None:
    """An RFC 3339 time, or a duration meaning that long ago (``1h``, ``30m``, ``1d``)."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        pass
    try:
        ago = parse_duration(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is neither a time (2026-01-01T00:00:00Z) nor a duration "
                                 "(30m, 1h, 1d)") from None
    try:
        return _services().now() - ago
    except OverflowError:
        raise typer.BadParameter(f"{value!r} ago is before the year 1") from None


def _fail(error: MldiagError) -> None:
    errors.print(f"[red]error:[/red] {error}")
    raise typer.Exit(1)


@app.command("list")
def list_events(
    type: str = typer.Option("", "--type", help="CloudEvent type, e.g. google.cloud.storage.object.v1.finalized."),
    function: str = typer.Option("", "--function", help="The function that handled it."),
    outcome: Outcome | None = typer.Option(None, "--outcome", help="ok, ignored, rejected, failed or received."),
    since: str = typer.Option("", "--since", help="A time, or how long ago (1h)."),
    until: str = typer.Option("", "--until", help="A time, or how long ago."),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000),
    fmt: Format = typer.Option(Format.table, "--format"),
) -> None:
    """List archived events, newest first."""
    records = _services().events.list(
        type=type, function=function, outcome=outcome.value if outcome else "",
        since=_when(since), until=_when(until), limit=limit,
    )
    show([r.to_json_dict() for r in records], fmt, _COLUMNS)


@app.command("show")
def show_event(
    event: str = typer.Argument(..., help="function:id, or the event id alone."),
    fmt: Format = typer.Option(Format.yaml, "--format"),
) -> None:
    """Show one archived event with its raw CloudEvent."""
    services = _services()
    try:
        record = find_record(services, event)
        document = record.to_json_dict()
        document["raw"] = services.events.load_raw(record)
    except MldiagError as error:
        _fail(error)
    show(document, fmt)


@app.command("replay")
def replay(
    events: list[str] = typer.Argument(None, help="Events to replay (function:id or id)."),
    type: str = typer.Option("", "--type"),
    function: str = typer.Option("", "--function"),
    outcome: Outcome | None = typer.Option(None, "--outcome", help="e.g. failed"),
    since: str = typer.Option("", "--since"),
    until: str = typer.Option("", "--until"),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would happen; change nothing."),
    to: Target = typer.Option(Target.local, "--to", help="local: run the handler here; topic: re-publish."),
    fmt: Format = typer.Option(Format.table, "--format"),
) -> None:
    """Re-deliver archived events by id, or every event matching the filters."""
    services = _services()
    selective = any([type, function, outcome, since, until])
    if not events and not selective:
        raise typer.BadParameter("name events to replay, or select them with --type/--function/--outcome/--since")
    try:
        records = [find_record(services, e) for e in events or []]
        if selective:
            records += services.events.list(
                type=type, function=function, outcome=outcome.value if outcome else "",
                since=_when(since), until=_when(until), limit=limit,
            )
        results = [replay_one(services, record, to, dry_run) for record in records]
    except MldiagError as error:
        _fail(error)
    show([vars(r) for r in results], fmt, ("key", "function", "before", "result"))
    if any(r.result.startswith("failed") for r in results):
        raise typer.Exit(1)


@app.command("dead-letters")
def dead_letters(
    limit: int = typer.Option(100, "--limit", min=1, max=10_000),
    fmt: Format = typer.Option(Format.table, "--format"),
) -> None:
    """Messages that exhausted their retries, with the last error their function recorded."""
    show(list_dead_letters(_services(), limit), fmt,
         ("messageId", "deadLetterTopic", "sourceSubscription", "deliveryCount", "receivedAt", "lastError"))


@app.command("prune")
def prune() -> None:
    """Delete archived events past their retention (the cloud's Firestore TTL does this by itself)."""
    typer.echo(f"pruned {_services().events.prune()} event(s)")
