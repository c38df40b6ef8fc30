"""``mldiag``: the command groups, and the global error handling (exit 1 for API errors)."""

from __future__ import annotations

import typer

from mldiag import __version__
from mldiag.cli import agent, analyze, auto_capture, capture, demo, events, monitored_events, runs, sessions, status, targets, up

app = typer.Typer(
    name="mldiag",
    help="Managed XProf profiling for ML workloads: runs, sessions, capture, analysis.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("status")(status.status)
app.command("up")(up.up)
app.command("analyze")(analyze.analyze)
app.command("demo")(demo.demo)
app.add_typer(events.app, name="events")
app.add_typer(runs.app, name="machine-learning-run")
app.add_typer(targets.app, name="profiler-target")
app.add_typer(sessions.app, name="profiler-session")
app.add_typer(monitored_events.app, name="monitored-events")
app.command("agent")(agent.agent)
sessions.app.command("capture")(capture.capture)
runs.app.command("start-continuous-profiling")(capture.start_continuous_profiling)
runs.app.command("stop-continuous-profiling")(capture.stop_continuous_profiling)
runs.app.command("set-auto-capture")(auto_capture.set_auto_capture)
runs.app.command("report-metrics")(auto_capture.report_metrics)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mldiag {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Managed XProf profiling for ML workloads."""
