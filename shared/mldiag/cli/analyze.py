"""``mldiag analyze PATH``: analyse a profile and write ``analysis.json`` and ``summary.html``.

PATH is a logdir, a session folder, one ``<host>.xplane.pb``, or a ``gs://``
URI of any of these (downloaded through the configured blob store). The
investigation's reasoner is the offline analyst unless ``--reasoner vertex``
(or ``MLDIAG_REASONER``) asks for Gemini on Vertex AI; if Vertex AI fails, the
offline analyst finishes and the report says why. Progress goes to stderr;
stdout gets the report as text or JSON. A path that holds no readable profile
(missing, empty, truncated, not an XSpace) exits with 3 and a one-line reason.
XProf's tools log each failure's traceback through Python's root logger; those
records are not printed, since the report's tool table names each failure.

The analysis stops after ``--timeout`` (default 30 minutes; exit 124), or on
SIGTERM or Ctrl-C (exit 143 or 130), with a one-line reason; its scratch copy
is removed on every way out.

Profile strings are untrusted: the text report prints them literally, never as
console markup.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mldiag.analysis.budget import parse_size
from mldiag.domain.errors import InvalidArgument, NotFound
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
    out: Path = typer.Option(Path("."), "--out", help="Folder to write analysis.json and summary.html into."),
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
    from mldiag.analysis.stopping import stop_now, stopping

    scratch = tempfile.mkdtemp(prefix="mldiag-analyze-")

    def stop(why: str, code: int) -> NoReturn:
        stderr.show_cursor(True)
        stop_now([Path(scratch)], f"mldiag analyze: {why}", code)

    try:
        with stopping(stop, timeout_s=parse_duration(timeout).total_seconds(), limit=timeout), \
                _library_logs_unprinted():
            analysis = _analyse(path, Path(scratch), reasoner, parse_size(memory_ceiling) if memory_ceiling else None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    report = analysis.to_json_dict()
    written = write_reports(analysis, out)
    stderr.print(Text(f"Wrote {' and '.join(map(str, written))} in {analysis.seconds:.1f} s"))
    if analysis.investigation and analysis.investigation.fallback_reason:
        stderr.print(Text(f"Vertex AI did not answer usably ({analysis.investigation.fallback_reason}); "
                          "the offline analyst wrote the report."))
    if fmt is ReportFormat.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        _print_text(report)


@contextlib.contextmanager
def _library_logs_unprinted() -> Iterator[None]:
    """Keep Python's last-resort handler from printing records nobody configured a handler for."""
    root, unprinted = logging.getLogger(), logging.NullHandler()
    root.addHandler(unprinted)
    try:
        yield
    finally:
        root.removeHandler(unprinted)


def analyse_quietly(path: str, scratch: Path, reasoner: ReasonerChoice | None, command: str) -> Analysis:
    """The analysis of the profile at ``path``, made in ``scratch``, with XProf's logged tracebacks unprinted;
    exit 3 with ``command``'s one-line reason if there is no readable profile."""
    with _library_logs_unprinted():
        return _analyse(path, scratch, reasoner, None, command)


def _analyse(path: str, scratch: Path, reasoner: ReasonerChoice | None, memory_ceiling_bytes: int | None,
             command: str = "mldiag analyze") -> Analysis:
    """Find or download the profile and analyse it in ``scratch``; exit 3 if there is no readable profile."""
    from mldiag.analysis import download_session, find_session, start_analysis
    from mldiag.analysis.profiles import UNREADABLE_EXIT

    try:
        with stderr.status("Looking for the profile", spinner="dots") as status:
            def progress(message: str) -> None:
                status.update(Text(message))

            if path.startswith("gs://"):
                from mldiag import bootstrap
                from mldiag.config import Settings

                progress(f"Downloading {path}")
                session = download_session(path, bootstrap.build(Settings.from_env()).blobs, scratch / "download")
            else:
                session = find_session(Path(path).expanduser())
            if session.note:
                stderr.print(Text(session.note))
            with start_analysis(list(session.files), scratch, progress=progress,
                                memory_ceiling_bytes=memory_ceiling_bytes) as running:
                # Loaded while XProf converts the profile, which on a large one takes seconds.
                from mldiag.analysis.investigation import investigator
                from mldiag.config import Settings

                investigate = investigator(Settings.from_env(), reasoner.value if reasoner else None)
                analysis = running.finish(source=path, investigate=investigate)
    except (InvalidArgument, NotFound) as error:
        stderr.print(Text(f"{command}: {error}"))
        raise typer.Exit(UNREADABLE_EXIT) from None
    return analysis


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
        tools.add_row(Text(tool["name"]), Text(tool["status"]), Text(f"{tool['seconds']:.2f}"), Text(tool["reason"]))
    stdout.print()
    stdout.print(tools)
