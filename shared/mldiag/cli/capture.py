"""``mldiag profiler-session capture`` and ``mldiag machine-learning-run start-/stop-continuous-profiling``.

Each answers with an operation that runs until every target is done. The
commands wait for it (``--async`` returns the operation at once) and print the
outcome per target; they exit with status 1 when every target failed, and
name the failed ones on stderr when only some did (with any note, such as an
on-demand fall-back, on the others).
"""

from __future__ import annotations

import time
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any

import typer

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
    print_resources,
)
from mldiag.cli.output import Format, errors, show
from mldiag.client.api import ApiClient, ApiError
from mldiag.domain.types import format_duration, parse_duration

POLL_INTERVAL_S = 0.5
# A task left unfinished this long past its duration is failed by maintenance, so waiting longer is pointless.
WAIT_GRACE = timedelta(minutes=10)


class CaptureKind(StrEnum):
    on_demand = "on-demand"
    snapshot = "snapshot"


class HostLevel(StrEnum):
    disabled = "disabled"
    critical = "critical"
    info = "info"
    verbose = "verbose"


class Switch(StrEnum):
    disabled = "disabled"
    enabled = "enabled"


class Fallback(StrEnum):
    on_demand = "on-demand"


def wire_duration(value: str) -> str:
    """An option's duration (``500ms``, ``2s``, ``1h30m``, ``7d``) as the API takes it; a usage error if it is none."""
    try:
        return format_duration(parse_duration(value))
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


Targets = Annotated[str, typer.Option("--targets", help="Comma-separated target ids, or 'all'.")]
DeviceLevel = Annotated[Switch | None, typer.Option("--device-tracer-level", help="Device tracer.")]
Async = Annotated[bool, typer.Option("--async", help="Return the operation at once instead of waiting.")]


def _target_list(targets: str) -> list[str]:
    wanted = [t.strip() for t in targets.split(",") if t.strip()]
    return [] if wanted == ["all"] else wanted


def _wait(client: ApiClient, operation: dict[str, Any], timeout: timedelta) -> dict[str, Any]:
    deadline = time.monotonic() + timeout.total_seconds()
    while not operation.get("done"):
        if time.monotonic() > deadline:
            raise ApiError(f"operation {operation['name']} is still running; poll it later")
        time.sleep(POLL_INTERVAL_S)
        operation = client.call("GET", f"v1alpha/{operation['name']}")
    return operation


def _outcomes(operation: dict[str, Any]) -> dict[str, Any]:
    if operation.get("error"):
        for detail in operation["error"].get("details", []):
            if "targets" in detail:
                return detail["targets"]
    return (operation.get("response") or {}).get("targets", {})


def _report(operation: dict[str, Any]) -> None:
    """Name failed targets (and notes on the others) on stderr; exit 1 (through :class:`ApiError`) when all of them failed."""
    if operation.get("error"):
        raise ApiError(operation["error"].get("message", "the operation failed"))
    for target, outcome in _outcomes(operation).items():
        if outcome.get("state") == "FAILED":
            errors.print(f"[yellow]target {target} failed:[/yellow] {outcome.get('error', '')}",
                         highlight=False, markup=True)
        elif outcome.get("note"):
            errors.print(f"target {target}: {outcome['note']}", highlight=False, markup=False)


@api_command
def capture(
    session: Annotated[str, typer.Argument(help="The new session's id.")],
    run: RunOption,
    duration: Annotated[str, typer.Option(
        "--duration", callback=wire_duration, help="How long to record (100ms to 5m), e.g. 2s, 1500ms.")] = "2s",
    targets: Targets = "all",
    host_tracer_level: Annotated[HostLevel | None, typer.Option(
        "--host-tracer-level", metavar="<level>",
        help="Host tracer: disabled, critical, info or verbose.")] = None,
    device_tracer_level: DeviceLevel = None,
    python_tracer_level: Annotated[Switch | None, typer.Option("--python-tracer-level", help="Python tracer.")] = None,
    kind: Annotated[CaptureKind, typer.Option("--kind", metavar="<kind>",
                                                    help="on-demand, or a snapshot of continuous profiling.")]
        = CaptureKind.on_demand,
    fallback: Annotated[Fallback | None, typer.Option(
        "--fallback", help="When a snapshot comes back empty (no TPU buffer), take an on-demand trace.")] = None,
    run_async: Async = False,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Capture a profile of the run's targets now, through their XProf profiler servers."""
    body: dict[str, Any] = {"kind": kind.value, "duration": duration, "profilerTargets": _target_list(targets)}
    for field, level in (("hostTracerLevel", host_tracer_level), ("deviceTracerLevel", device_tracer_level),
                         ("pythonTracerLevel", python_tracer_level)):
        if level is not None:
            body[field] = level.value
    if fallback is not None:
        body["fallback"] = fallback.value
    client = ApiClient(api_url, token)
    path = client.resolve_child_path(project, location, run, "profilerSessions") + ":capture"
    operation = client.call("POST", path, params={"profilerSessionId": session}, body=body)
    if run_async:
        show(operation, fmt)
        return
    operation = _wait(client, operation, parse_duration(duration) + WAIT_GRACE)
    print_resources(client.call("GET", f"v1alpha/{operation['metadata']['target']}"), fmt)
    _report(operation)


def _continuous(path: str, body: dict[str, Any], run_async: bool, client: ApiClient, fmt: Format) -> None:
    operation = client.call("POST", path, body=body)
    if not run_async:
        operation = _wait(client, operation, WAIT_GRACE)
        show(_outcomes(operation), fmt)
        _report(operation)
        return
    show(operation, fmt)


@api_command
def start_continuous_profiling(
    run: Annotated[str, typer.Argument(help="The run's id, full resource name or display name.")],
    targets: Targets = "all",
    device_tracer_level: DeviceLevel = None,
    run_async: Async = False,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Turn continuous profiling (device trace, snapshot mode) on for the run's targets."""
    body: dict[str, Any] = {"profilerTargets": _target_list(targets)}
    if device_tracer_level is not None:
        body["deviceTracerLevel"] = device_tracer_level.value
    client = ApiClient(api_url, token)
    _continuous(client.resolve_run_path(project, location, run) + ":startContinuousProfiling", body, run_async,
                client, fmt)


@api_command
def stop_continuous_profiling(
    run: Annotated[str, typer.Argument(help="The run's id, full resource name or display name.")],
    run_async: Async = False,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Turn the run's continuous profiling off."""
    client = ApiClient(api_url, token)
    _continuous(client.resolve_run_path(project, location, run) + ":stopContinuousProfiling", {}, run_async,
                client, fmt)
