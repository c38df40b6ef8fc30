"""``mldiag machine-learning-run``: create, describe, list, update and delete runs, and set how they are
profiled (continuous profiling from :mod:`mldiag.cli.capture`, automatic capture from
:mod:`mldiag.cli.auto_capture`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mldiag.cli import auto_capture, capture
from mldiag.cli.options import (
    DEFAULT_API_URL,
    DEFAULT_LOCATION,
    DEFAULT_PROJECT,
    ApiUrl,
    Filter,
    Fmt,
    Limit,
    Location,
    Project,
    SortBy,
    Token,
    api_command,
    key_values,
    print_resources,
)
from mldiag.cli.output import Column, Format, milliseconds
from mldiag.client.api import ApiClient, location_path

app = typer.Typer(help="Machine learning runs: create, describe, list, update, delete, "
                       "start-continuous-profiling, stop-continuous-profiling, set-auto-capture, report-metrics, "
                       "set-notifications.",
                  no_args_is_help=True)

COLUMNS = (Column("displayName"), Column("runPhase", "PHASE"), Column("createTime", "CREATED"),
           Column("latestAnalysis.stepTimeMs", "LATEST STEP TIME", milliseconds),
           Column("latestAnalysis.health", "HEALTH"))
RunId = Annotated[str, typer.Argument(help="The run's id, full resource name or display name.")]
NewRunId = Annotated[str, typer.Argument(help="The new run's id.")]
Labels = Annotated[list[str], typer.Option("--labels", help="KEY=VALUE; repeat for more.")]


@app.command()
@api_command
def create(
    run: NewRunId,
    display_name: Annotated[str, typer.Option("--display-name")] = "",
    run_set: Annotated[str, typer.Option("--run-set", help="The set (group) of runs it belongs to.")] = "",
    labels: Labels = [],
    gcs_path: Annotated[str, typer.Option("--gcs-path", help="Where its profiles go (gs://bucket/path).")] = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """Create a run."""
    body: dict[str, Any] = {"displayName": display_name or run, "runSet": run_set,
                            "labels": key_values(labels, "--labels")}
    if gcs_path:
        body["artifacts"] = {"gcsPath": gcs_path}
    created = ApiClient(api_url, token).mutate(
        "POST", f"{location_path(project, location)}/machineLearningRuns",
        params={"machineLearningRunId": run}, body=body)
    print_resources(created, fmt)


@app.command()
@api_command
def describe(
    run: RunId,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Show one run."""
    print_resources(ApiClient(api_url, token).find_run(project, location, run), fmt)


@app.command("list")
@api_command
def list_runs(
    filter: Filter = "", limit: Limit = 100, sort_by: SortBy = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table,
) -> None:
    """List runs, newest first."""
    runs = ApiClient(api_url, token).list_all(f"{location_path(project, location)}/machineLearningRuns",
                                              "machineLearningRuns", limit=limit, filter=filter, order_by=sort_by)
    print_resources(runs, fmt, COLUMNS)


@app.command()
@api_command
def update(
    run: RunId,
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    run_set: Annotated[str | None, typer.Option("--run-set")] = None,
    update_labels: Annotated[list[str], typer.Option("--update-labels", help="KEY=VALUE to set; repeat.")] = [],
    run_phase: Annotated[str | None, typer.Option(
        "--run-phase", help="COMPLETED or FAILED; ACTIVE again once ended (counts a restart).")] = None,
    etag: Annotated[str, typer.Option("--etag", help="Only if the run still has this etag.")] = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Change the given fields of a run (and nothing else)."""
    labels = key_values(update_labels, "--update-labels")
    body: dict[str, Any] = {"labels": labels, "etag": etag}
    mask = [f"labels.{key}" for key in labels]
    for field, value in (("displayName", display_name), ("runSet", run_set), ("runPhase", run_phase)):
        if value is not None:
            body[field] = value
            mask.append(field)
    if not mask:
        raise typer.BadParameter("nothing to update: give at least one of the options")
    client = ApiClient(api_url, token)
    updated = client.mutate(
        "PATCH", client.resolve_run_path(project, location, run), params={"updateMask": ",".join(mask)}, body=body)
    print_resources(updated, fmt)


@app.command()
@api_command
def delete(
    run: RunId,
    etag: Annotated[str, typer.Option("--etag", help="Only if the run still has this etag.")] = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "",
) -> None:
    """Delete a run and the records of its sessions (profiles in the bucket stay)."""
    params = {"etag": etag} if etag else None
    client = ApiClient(api_url, token)
    client.mutate("DELETE", client.resolve_run_path(project, location, run), params=params)
    typer.echo(f"Deleted {run}.")


app.command("start-continuous-profiling")(capture.start_continuous_profiling)
app.command("stop-continuous-profiling")(capture.stop_continuous_profiling)
app.command("set-auto-capture")(auto_capture.set_auto_capture)
app.command("report-metrics")(auto_capture.report_metrics)
app.command("set-notifications")(auto_capture.set_notifications)
