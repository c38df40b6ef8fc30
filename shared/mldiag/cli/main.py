"""``mldiag``: the command groups, and the global error handling (exit 1 for API errors)."""

from __future__ import annotations

import typer

from mldiag import __version__
from mldiag.cli import events, status

app = typer.Typer(
    name="mldiag",
    help="Managed XProf profiling for ML workloads: runs, sessions, capture, analysis.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("status")(status.status)
app.add_typer(events.app, name="events")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mldiag {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Managed XProf profiling for ML workloads."""
