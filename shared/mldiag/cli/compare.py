"""``mldiag compare BASELINE CANDIDATE``: gate a change on whether the candidate session regresses.

BASELINE and CANDIDATE are two stored sessions (ids with
``--machine-learning-run``, or full names), compared by the control plane
(``GET .../profilerSessions/CANDIDATE:compare?baseline=BASELINE``); or two
session folders (local logdirs, ``.xplane.pb`` files, ``gs://`` URIs of
either), each analysed here as ``mldiag analyze`` would, with the offline
analyst. The verdict comes from
:mod:`mldiag.analysis.regression`: step time judged on the two step-time
distributions, with the p-value and confidence interval printed.

A side without steps cannot be judged: the command refuses it rather than pass
it. Sides that ran on different kinds of device are compared, with a warning
naming both.

Exit status: 0 when the candidate passes, 1 when it regresses (or the control
plane refuses the call), 2 on a usage error, 3 when a local folder does not
exist or holds no readable profile, or a side has no steps. Anything written as
a path (with a ``/``, or starting with ``.`` or ``~``) is a folder, so a
mistyped one is named as missing rather than looked up as a stored session.
"""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mldiag.analysis.regression import DEFAULT_MAX_MEMORY_REGRESSION, DEFAULT_MAX_STEP_TIME_REGRESSION, Thresholds
from mldiag.cli.options import (
    DEFAULT_API_URL,
    DEFAULT_LOCATION,
    DEFAULT_PROJECT,
    ApiUrl,
    Location,
    Project,
    RunOption,
    Token,
    api_command,
)
from mldiag.client.api import ApiClient
from mldiag.domain.devices import compared_hardware

stdout = Console(highlight=False, soft_wrap=True)
COLLECTION = "profilerSessions"
REGRESSED_EXIT = 1
NOTHING_TO_COMPARE_EXIT = 3


class VerdictFormat(StrEnum):
    table = "table"
    json = "json"


def percentage(value: str) -> float:
    """``5%`` or ``0.05`` as the fraction 0.05."""
    text = value.strip()
    try:
        fraction = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a percentage (e.g. 5% or 0.05)") from None
    if not text.endswith("%") and fraction > 1:
        raise typer.BadParameter(f"{value!r} reads as {fraction:.0%}; write {value}% or a fraction such as 0.05")
    if fraction < 0:
        raise typer.BadParameter(f"{value!r} is negative")
    return fraction


@api_command
def compare(
    baseline: Annotated[str, typer.Argument(
        help="The baseline: a session id or full name, or a folder (local or gs://).")],
    candidate: Annotated[str, typer.Argument(help="The candidate, named the same way as the baseline.")],
    max_step_time_regression: Annotated[str, typer.Option(
        "--max-step-time-regression", help="Step-time growth to allow, as 5% or 0.05.")]
        = f"{DEFAULT_MAX_STEP_TIME_REGRESSION:.0%}",
    max_memory_regression: Annotated[str, typer.Option(
        "--max-memory-regression", help="Peak-memory growth to allow, as 10% or 0.1.")]
        = f"{DEFAULT_MAX_MEMORY_REGRESSION:.0%}",
    run: RunOption = "",
    fmt: Annotated[VerdictFormat, typer.Option("--format", help="Output format.")] = VerdictFormat.table,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "",
) -> None:
    """Compare CANDIDATE with BASELINE; exit 1 if it regresses beyond the thresholds or has a new P0."""
    thresholds = Thresholds(
        max_step_time_regression=_option(max_step_time_regression, "--max-step-time-regression"),
        max_memory_regression=_option(max_memory_regression, "--max-memory-regression"))
    local = [_names_a_folder(path) for path in (baseline, candidate)]
    if all(local):
        verdict = _compare_folders(baseline, candidate, thresholds)
    elif any(local):
        raise typer.BadParameter("give two folders, or two stored sessions, not one of each")
    else:
        client = ApiClient(api_url, token)
        baseline_path = client.resolve_child_path(project, location, run, COLLECTION, baseline)
        candidate_path = client.resolve_child_path(project, location, run, COLLECTION, candidate)
        verdict = client.call("GET", candidate_path + ":compare", params={
            "baseline": baseline_path.removeprefix("v1alpha/"),
            "maxStepTimeRegression": thresholds.max_step_time_regression,
            "maxMemoryRegression": thresholds.max_memory_regression,
        })
    _check_sides(verdict)
    if fmt is VerdictFormat.json:
        print(json.dumps(verdict, indent=2, ensure_ascii=False))
    else:
        print_verdict(verdict)
    if verdict["regressed"]:
        raise typer.Exit(REGRESSED_EXIT)


def _option(value: str, name: str) -> float:
    try:
        return percentage(value)
    except typer.BadParameter as error:
        error.param_hint = name
        raise


def _check_sides(verdict: dict[str, Any]) -> None:
    """Refuse a side without steps (exit 3); warn when the sides ran on different kinds of device."""
    step = verdict["step_time"]
    for side in ("baseline", "candidate"):
        if not step[f"{side}_steps"]:
            typer.echo(f"mldiag compare: the {side} {verdict[side]} has no steps to compare; profile it over "
                       "some training steps", err=True)
            raise typer.Exit(NOTHING_TO_COMPARE_EXIT)
    hardware = verdict.get("hardware")  # absent from an older control plane's answer
    if hardware and not hardware["same"]:
        typer.echo(f"mldiag compare: warning: the baseline ran on {hardware['baseline']}, the candidate on "
                   f"{hardware['candidate']}; their step times are not comparable", err=True)


def _names_a_folder(path: str) -> bool:
    """Whether ``path`` is a folder or a file (it may be mistyped): a ``gs://`` URI, something that exists, or
    anything written as a path. Session ids hold no ``/``; full names start with ``projects/``."""
    if path.startswith("gs://") or Path(path).expanduser().exists():
        return True
    return not path.startswith("projects/") and ("/" in path or path.startswith((".", "~")))


def _compare_folders(baseline: str, candidate: str, thresholds: Thresholds) -> dict[str, Any]:
    from mldiag.analysis.regression import judge
    from mldiag.cli.analyze import ReasonerChoice, analyse_or_exit
    from mldiag.local.analyze import scratch_folder

    from mldiag.analysis.profile.profiles import UNREADABLE_EXIT

    for path in (baseline, candidate):
        if not path.startswith("gs://") and not Path(path).expanduser().exists():
            typer.echo(f"mldiag compare: {path} does not exist", err=True)
            raise typer.Exit(UNREADABLE_EXIT)
    with scratch_folder("mldiag compare") as scratch:
        before = analyse_or_exit(baseline, scratch / "baseline", ReasonerChoice.offline, "mldiag compare")
        after = analyse_or_exit(candidate, scratch / "candidate", ReasonerChoice.offline, "mldiag compare")
    verdict = judge(before, after, baseline, candidate, thresholds)
    return {**verdict.model_dump(mode="json"), "regressed": verdict.regressed,
            "hardware": dataclasses.asdict(compared_hardware(before.hosts, after.hosts))}


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "B":
        return f"{value / 2**20:.1f} MiB"
    return f"{value:.3g}{unit}"


def _change(before: float | None, after: float | None) -> str:
    return f"{after / before - 1:+.1%}" if before and after is not None else "-"


def print_verdict(verdict: dict[str, Any]) -> None:
    """The verdict as a table, the step-time test's confidence, and each regression; profile text printed
    literally."""
    comparison = verdict["comparison"]
    table = Table("METRIC", "BASELINE", "CANDIDATE", "CHANGE", box=None)
    table.add_row("status", Text(verdict["baseline_status"]), Text(verdict["candidate_status"]), "")
    rows = [("step time", "step_time_ms", " ms"), ("busy fraction", "busy_fraction", ""),
            ("host gap per step", "gap_ms_per_step", " ms"), ("idle per step", "idle_ms_per_step", " ms"),
            ("dispatches per step", "dispatches_per_step", ""), ("peak memory", "peak_memory_bytes", "B")]
    for label, key, unit in rows:
        before, after = comparison[key]["before"], comparison[key]["after"]
        table.add_row(label, _number(before, unit), _number(after, unit), _change(before, after))
    step = verdict["step_time"]
    table.add_row(f"median step ({step['baseline_steps']} / {step['candidate_steps']} steps)",
                  _number(step["baseline_median_ms"], " ms"), _number(step["candidate_median_ms"], " ms"),
                  _change(step["baseline_median_ms"], step["candidate_median_ms"]))
    stdout.print(table)
    if step["p_value"] is not None:
        stdout.print(Text(f"\nMedian step time {step['median_change']:+.1%}, 95% CI {step['ci_low']:+.1%} to "
                          f"{step['ci_high']:+.1%}; Mann-Whitney U p={step['p_value']:.2g} that it is slower."))
    else:
        stdout.print(Text(f"\nNo step-time test: {step['note']}; judged on the mean step time."))
    for line in comparison["headline"]:
        stdout.print(Text(line))
    thresholds = verdict["thresholds"]
    allowed = (f"(allowed: step time {thresholds['max_step_time_regression']:.0%}, "
               f"peak memory {thresholds['max_memory_regression']:.0%}, no new P0)")
    if verdict["regressed"]:
        stdout.print(Text(f"\nREGRESSED {allowed}", style="bold red"))
        for regression in verdict["regressions"]:
            stdout.print(Text(f"  - {regression}"))
    else:
        stdout.print(Text(f"\nPASSED {allowed}", style="bold green"))
