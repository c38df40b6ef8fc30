"""What the API-backed commands share: the common options, the error handling, and list/describe commands.

Commands talk to the control plane at ``--api-url`` / ``MLDIAG_API_URL`` (the
local ``mldiag up`` by default) through :class:`~mldiag.client.api.ApiClient`,
with ``--token`` / ``MLDIAG_API_TOKEN`` when it asks for one. A failed call
prints the server's message and exits with status 1 (through
:func:`api_command`); usage mistakes exit with 2.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer

from mldiag.cli.output import Column, Format, errors, show
from mldiag.client.api import ApiClient, ApiError, RunNotGiven
from mldiag.config import Settings

DEFAULT_API_URL = Settings.model_fields["api_url"].default
DEFAULT_PROJECT = Settings.model_fields["project"].default
DEFAULT_LOCATION = Settings.model_fields["location"].default

ApiUrl = Annotated[str, typer.Option("--api-url", envvar="MLDIAG_API_URL", help="The control plane's URL.")]
Token = Annotated[str, typer.Option("--token", envvar="MLDIAG_API_TOKEN", show_default=False,
                                    help="Bearer token for calls that change something, and for events and status.")]
Project = Annotated[str, typer.Option("--project", envvar="MLDIAG_PROJECT", help="Project of the resources.")]
Location = Annotated[str, typer.Option("--location", envvar="MLDIAG_LOCATION", help="Location of the resources.")]
RunOption = Annotated[str, typer.Option("--machine-learning-run", help="The run: its id, full name or display name.")]
Fmt = Annotated[Format, typer.Option("--format", help="Output format.")]
Filter = Annotated[str, typer.Option("--filter", help='e.g. \'runPhase = ACTIVE AND labels.team = "infra"\'.')]
Limit = Annotated[int, typer.Option("--limit", min=1, help="The most resources to list.")]
SortBy = Annotated[str, typer.Option("--sort-by", help="e.g. 'createTime desc'.")]


F = TypeVar("F", bound=Callable[..., Any])


class MissingRunOption(typer.BadParameter):
    """A child given by id without its run: click's usage error for a missing option (exit status 2)."""

    def format_message(self) -> str:
        return "Missing option '--machine-learning-run'."


def api_command(command: F) -> F:
    """Let ``command`` end with exit status 1 and the server's message when a call fails."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ApiError as error:
            errors.print(f"[red]error:[/red] {error}", highlight=False, markup=True)
            raise typer.Exit(1) from None
        except RunNotGiven:
            raise MissingRunOption("") from None

    return run  # type: ignore[return-value]


def print_resources(items: Sequence[dict[str, Any]] | dict[str, Any], fmt: Format,
                    columns: Sequence[str | Column] = ()) -> None:
    """``show`` with a short ``id`` column in tables (names are long; JSON and YAML keep them whole)."""
    if fmt is Format.table and not isinstance(items, dict):
        items = [{"id": item.get("name", "").rsplit("/", 1)[-1], **item} for item in items]
        columns = ("id", *columns)
    show(items, fmt, columns)


def key_values(pairs: Sequence[str], option: str) -> dict[str, str]:
    """``["team=infra", "tier=1"]`` → a dict; a pair without ``=`` is a usage error (exit 2)."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=option)
        parsed[key] = value
    return parsed


def list_children_command(collection: str, columns: Sequence[str | Column], summary: str) -> Callable[..., None]:
    """A ``list`` command for one kind of child of a run (sessions, targets, events)."""

    @api_command
    def list_children(
        run: RunOption,
        filter: Filter = "", limit: Limit = 100, sort_by: SortBy = "",
        project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
        api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
    ) -> None:
        client = ApiClient(api_url, token)
        items = client.list_all(client.resolve_child_path(project, location, run, collection), collection,
                                limit=limit, filter=filter, order_by=sort_by)
        print_resources(items, fmt, columns)

    list_children.__doc__ = summary
    return list_children


def describe_child_command(collection: str, summary: str) -> Callable[..., None]:
    """A ``describe`` command for one child of a run, given by id (with the run) or by full name."""

    @api_command
    def describe_child(
        child: Annotated[str, typer.Argument(metavar="ID", help="Its id (with --machine-learning-run) or full name.")],
        run: RunOption = "",
        project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
        api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
    ) -> None:
        client = ApiClient(api_url, token)
        print_resources(client.call("GET", client.resolve_child_path(project, location, run, collection, child)), fmt)

    describe_child.__doc__ = summary
    return describe_child
