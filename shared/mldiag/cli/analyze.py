"""``mldiag analyze PATH``: analyse a profile and write ``analysis.json`` and ``summary.html``.

PATH is a logdir, a session folder, one ``<host>.xplane.pb``, or a ``gs://``
URI of any of these (downloaded through the configured blob store). The
investigation's reasoner is the offline analyst unless ``--reasoner vertex``
(or ``MLDIAG_REASONER``) asks for Gemini on Vertex AI; if Vertex AI fails, the
offline analyst finishes and the report says why. Progress goes to stderr;
stdout gets the report as text or JSON. A path that holds no readable profile
(missing, empty, truncated, not an XSpace) exits with 3 and a one-line reason.

The analysis stops after ``--timeout`` (default 30 minutes; exit 124), or on
SIGTERM or Ctrl-C (exit 143 or 130), with a one-line reason; its scratch copy
is removed on every way out. The analysis itself runs in
:mod:`mldiag.local.analyze`; this command shows its progress and the report.

Profile strings are untrusted: the text report prints them literally, never as
console markup.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mldiag.domain.errors import InvalidArgument, NotFound
from mldiag.domain.sizes import parse_size
from mldiag.domain.types import parse_duration

if TYPE_CHECKING:
    from mldiag.analysis.evidence import Analysis

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


class ReportFormat(StrEnum):
    json = "json"
    text = "text"


class ReasonerChoice(StrEnum):
    offline = "offline"
    vertex = "vertex"


def _positive_duration(value: str) -> str:
    try:
        seconds = parse_duration(value).total_seconds()
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    if seconds <= 0:
        raise typer.BadParameter("must be longer than 0s")
    return value


def _memory_size(value: str) -> str:
    if value:
        try:
            parse_size(value)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
    return value


def analyze(
    path: str = typer.Argument(..., help="A logdir, a session folder, one .xplane.pb, or a gs:// URI."),
    out: Path = typer.Option(Path("."), "--out", help="Folder to write analysis.json and summary.html into "
                                                     "(the current one by default; the command names it)."),
    fmt: ReportFormat = typer.Option(ReportFormat.text, "--format", help="How to print the report."),
    reasoner: ReasonerChoice | None = typer.Option(
        None, "--reasoner", help="Who investigates: the offline analyst or Gemini on Vertex AI "
                                 "(default: MLDIAG_REASONER, else offline)."),
    memory_ceiling: str = typer.Option(
        "", "--memory-ceiling", callback=_memory_size, show_default=False,
        help="Most memory the analysis may use (e.g. 8GiB, 512MiB); XProf tools that need more are skipped, "
             "each with what it needs. Default: MLDIAG_ANALYSIS_MEMORY_CEILING, else 80% of the memory "
             "available (the machine's or the container's, the lower).",
    ),
    timeout: str = typer.Option(
        "30m", "--timeout", callback=_positive_duration,
        help="Stop, and exit with 124, if the analysis has not finished within this long (e.g. 90s, 30m, 2h).",
    ),
) -> None:
    """Run the 15 XProf tools, investigate with up to 4 follow-ups, and write the report."""
    from mldiag.analysis.report import write_reports
    from mldiag.local.analyze import scratch_folder

    ceiling = parse_size(memory_ceiling) if memory_ceiling else None
    with scratch_folder("mldiag analyze", timeout_s=parse_duration(timeout).total_seconds(), limit=timeout,
                        memory_ceiling_bytes=ceiling, before_stop=lambda: stderr.show_cursor(True)) as scratch:
        analysis = analyse_or_exit(path, scratch, reasoner, "mldiag analyze", ceiling)

    report = analysis.to_json_dict()
    written = write_reports(analysis, out.resolve())
    stderr.print(Text(f"Wrote {' and '.join(map(str, written))} in {analysis.seconds:.1f} s"))
    if analysis.investigation and analysis.investigation.fallback_reason:
        stderr.print(Text(f"Vertex AI did not answer usably ({analysis.investigation.fallback_reason}); "
                          "the offline analyst wrote the report."))
    if fmt is ReportFormat.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        _print_text(report)


def analyse_or_exit(path: str, scratch: Path, reasoner: ReasonerChoice | None, command: str,
                    memory_ceiling_bytes: int | None = None) -> Analysis:
    """The analysis of the profile at ``path``, made in ``scratch`` with its progress on stderr;
    exit 3 with ``command``'s one-line reason if there is no readable profile."""
    from mldiag.analysis.profile.profiles import UNREADABLE_EXIT
    from mldiag.local.analyze import analyse

    try:
        with stderr.status("Looking for the profile", spinner="dots") as status:
            return analyse(path, scratch, reasoner=reasoner.value if reasoner else None,
                           memory_ceiling_bytes=memory_ceiling_bytes,
                           progress=lambda message: status.update(Text(message)),
                           note=lambda message: stderr.print(Text(message)))
    except (InvalidArgument, NotFound) as error:
        stderr.print(Text(f"{command}: {error}"))
        raise typer.Exit(UNREADABLE_EXIT) from None


def _print_text(report: dict[str, Any]) -> None:
    stdout.print(Text(report["status"], style="bold red" if report["status"] != "OPTIMAL" else "bold green"))
    stdout.print(Text(report["summary"]))
    metrics = Table("METRIC", "VALUE", box=None)
    for name, value in report["metrics"].items():
        if value not in (None, ""):
            metrics.add_row(Text(name), Text(f"{value:.4g}" if isinstance(value, float) else str(value)))
    stdout.print(metrics)
    for finding in report["findings"]:
        stdout.print(Text(f"\n{finding['priority']} [{finding['category']}] {finding['title']}", style="bold"))
        stdout.print(Text(finding["what"]))
        for line in finding["evidence"]:
            stdout.print(Text(f"  - {line}"))
        stdout.print(Text(f"  Impact: {finding['impact']}"))
        stdout.print(Text(f"  Fix: {finding['fix']}"))
    followups = Table("FOLLOW-UP", "STATUS", "SECONDS", "SHOWED", box=None)
    for followup in report.get("followups", []):
        followups.add_row(Text(followup["tool"]), Text(followup["status"]), Text(f"{followup['seconds']:.2f}"),
                          Text(followup["showed"]))
    if followups.rows:
        stdout.print()
        stdout.print(followups)
    tools = Table("TOOL", "STATUS", "SECONDS", "NOTE", box=None)
    for tool in report["tools"]:
        tools.add_row(Text(tool["name"]), Text(tool["status"]), Text(f"{tool['seconds']:.2f}"),
                      Text(tool["reason"] or tool.get("note", "")))
    stdout.print()
    stdout.print(tools)
