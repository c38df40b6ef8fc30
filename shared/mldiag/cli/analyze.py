"""``mldiag analyze PATH``: analyse a profile offline and write ``analysis.json``.

PATH is a logdir, a session folder, one ``<host>.xplane.pb``, or a ``gs://``
URI of any of these (downloaded through the configured blob store). Progress
goes to stderr; stdout gets the report as text or JSON. A path that holds no
readable profile (missing, empty, truncated, not an XSpace) exits with 3 and a
one-line reason.

Profile strings are untrusted: the text report prints them literally, never as
console markup.
"""

from __future__ import annotations

import json
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mldiag import bootstrap
from mldiag.domain.errors import InvalidArgument, NotFound

ANALYSIS_FILE = "analysis.json"

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


class ReportFormat(StrEnum):
    json = "json"
    text = "text"


def analyze(
    path: str = typer.Argument(..., help="A logdir, a session folder, one .xplane.pb, or a gs:// URI."),
    out: Path = typer.Option(Path("."), "--out", help="Folder to write analysis.json into."),
    fmt: ReportFormat = typer.Option(ReportFormat.text, "--format", help="How to print the report."),
) -> None:
    """Run the 15 XProf tools and the offline analyst on one profiling session."""
    from mldiag.analysis import analyze_session, download_session, find_session
    from mldiag.analysis.profiles import UNREADABLE_EXIT

    try:
        with tempfile.TemporaryDirectory(prefix="mldiag-analyze-") as scratch, stderr.status(
            "Looking for the profile", spinner="dots"
        ) as status:
            def progress(message: str) -> None:
                status.update(Text(message))

            if path.startswith("gs://"):
                progress(f"Downloading {path}")
                session = download_session(path, bootstrap.build().blobs, Path(scratch) / "download")
            else:
                session = find_session(Path(path).expanduser())
            if session.note:
                stderr.print(Text(session.note))
            analysis = analyze_session(list(session.files), Path(scratch), source=path, progress=progress)
    except (InvalidArgument, NotFound) as error:
        stderr.print(Text(f"mldiag analyze: {error}"))
        raise typer.Exit(UNREADABLE_EXIT) from None

    report = analysis.to_json_dict()
    out.mkdir(parents=True, exist_ok=True)
    (out / ANALYSIS_FILE).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    stderr.print(Text(f"Wrote {out / ANALYSIS_FILE} in {analysis.seconds:.1f} s"))
    if fmt is ReportFormat.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        _print_text(report)


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
    tools = Table("TOOL", "STATUS", "SECONDS", "NOTE", box=None)
    for tool in report["tools"]:
        tools.add_row(Text(tool["name"]), Text(tool["status"]), Text(f"{tool['seconds']:.2f}"), Text(tool["reason"]))
    stdout.print()
    stdout.print(tools)
