"""``mldiag``: the command groups, and the global error handling (exit 1 for API errors).

A command's module is imported only when the command line names it, so that
``mldiag analyze`` does not load the API client, the agent or the event archive;
``mldiag --help`` and a command line that names no command load them all.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

import typer

from mldiag import __version__

# Name on the command line -> (module in mldiag.cli, its command function; None for a group: the module's `app`).
COMMANDS = {
    "status": ("status", "status"),
    "up": ("up", "up"),
    "analyze": ("analyze", "analyze"),
    "compare": ("compare", "compare"),
    "demo": ("demo", "demo"),
    "events": ("events", None),
    "machine-learning-run": ("runs", None),
    "profiler-target": ("targets", None),
    "profiler-session": ("sessions", None),
    "monitored-events": ("monitored_events", None),
    "agent": ("agent", "agent"),
    "query": ("fleet", "query"),
    "fleet": ("fleet", None),
    "mcp": ("mcp_server", "serve_mcp"),
}


def _flags_take_no_value() -> None:
    """Show flags in the rich help as the plain help does: without a type, which reads as a value to give.

    Typer's rich help labels every option with its type, ``--help <bool>``
    included, where its plain help leaves flags and counters bare.
    """
    from typer.core import TyperOption

    typed = TyperOption.display_type_rich

    def display_type_rich(option: TyperOption, ctx: Any) -> str | None:
        return None if option.is_flag or option.count else typed(option, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mldiag {__version__}")
        raise typer.Exit()


def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Managed XProf profiling for ML workloads."""


def build(only: str | None = None) -> typer.Typer:
    """The ``mldiag`` app: every command, or only the one called ``only``."""
    app = typer.Typer(
        name="mldiag",
        help="Managed XProf profiling for ML workloads: runs, sessions, capture, analysis.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
    )
    app.callback()(_main)
    for name, (module_name, function) in COMMANDS.items():
        if only in (None, name):
            module = importlib.import_module(f"mldiag.cli.{module_name}")
            if function is None:
                app.add_typer(module.app, name=name)
            else:
                app.command(name)(getattr(module, function))
    return app


def run() -> None:
    """The ``mldiag`` console script."""
    named = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in COMMANDS else None
    build(named)()


@functools.cache
def _whole_app() -> typer.Typer:
    return build()


def __getattr__(name: str) -> Any:
    # `app`, the whole app, is built on first use: importing this module for `run` loads no command.
    if name == "app":
        return _whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
