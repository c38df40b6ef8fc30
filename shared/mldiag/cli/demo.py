"""``mldiag demo``: walk a real JAX job through all four capture modes, then show the analysed sessions."""

from __future__ import annotations

import importlib.util
import signal
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from mldiag.cli.options import DEFAULT_LOCATION, DEFAULT_PROJECT, Location, Project, Token
from mldiag.cli.output import Format, show
from mldiag.client.api import ApiError
from mldiag.config import Settings
from mldiag.domain.resources import AnalysisState

DEMO_EXTRA = {"jax": "JAX", "google_cloud_mldiagnostics": "the official SDK (google-cloud-mldiagnostics)"}
DEMO_INSTALL = "pip install -e '.[demo]'"


def _default_gcs_path() -> Path:
    settings = Settings.from_env()
    return settings.data_dir / "buckets" / settings.bucket


def demo(
    api_url: Annotated[str, typer.Option(
        "--api-url", show_default=False,
        help="A running control plane (mldiag up) to use; by default the demo starts its own and stops it.")] = "",
    gcs_path: Annotated[Path | None, typer.Option(
        "--gcs-path", show_default=False,
        help="With --api-url: the local bucket folder that mldiag up printed (default: under MLDIAG_DATA_DIR).")]
        = None,
    work_dir: Annotated[Path | None, typer.Option(
        "--work-dir", show_default=False,
        help="Where the demo keeps its logs and its control plane's data (default: a new temporary folder).")]
        = None,
    analysis_timeout: Annotated[float, typer.Option(
        "--analysis-timeout", min=1, help="Seconds to wait for the last analysis.")] = 120.0,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION, token: Token = "",
    fmt: Annotated[Format, typer.Option("--format", help="How to print the sessions at the end.")] = Format.table,
) -> None:
    """Run a small JAX training job and capture it in all four modes, then show each session.

    The job uses the official SDK and is captured programmatically, on demand,
    as a snapshot and automatically; each session's state, analysis, report and
    top finding are printed.
    """
    from mldiag.local.demo.processes import DemoError
    from mldiag.local.demo.walkthrough import DemoSettings, print_summary, run_demo

    progress = Console(stderr=True)
    missing = [what for module, what in DEMO_EXTRA.items() if importlib.util.find_spec(module) is None]
    if missing:
        progress.print(f"[red]error:[/red] the demo needs {' and '.join(missing)}: "
                       f"{escape(DEMO_INSTALL)} (in the mldiag checkout)", highlight=False)
        raise typer.Exit(1)
    work_dir = (work_dir or Path(tempfile.mkdtemp(prefix="mldiag-demo-"))).expanduser().resolve()
    bucket_folder = (gcs_path or _default_gcs_path()).expanduser().resolve() if api_url else None
    settings = DemoSettings(work_dir=work_dir, api_url=api_url, token=token, gcs_path=bucket_folder,
                            project=project, location=location, analysis_timeout_s=analysis_timeout)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the children on SIGTERM too
    started = time.monotonic()
    try:
        summaries = run_demo(settings, progress)
    except (DemoError, ApiError) as error:
        progress.print(f"[red]error:[/red] {error}", highlight=False)
        progress.print(f"Logs in {work_dir}; nothing was left running.")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        progress.print(f"Interrupted; nothing was left running. Logs in {work_dir}.")
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    progress.print(f"Done in {time.monotonic() - started:.0f} s.")
    if fmt is Format.table:
        print_summary(Console(), summaries)
    else:
        show([summary.to_json() for summary in summaries], fmt)
    if not api_url:
        progress.print(f"The reports stay in {work_dir / 'data'}; browse them again with "
                       f"`mldiag up --data {work_dir / 'data'}`.", soft_wrap=True)
    unanalysed = [s.session.id for s in summaries if s.session.analysis.state is not AnalysisState.DONE]
    if unanalysed:
        progress.print(f"[red]error:[/red] no report for {', '.join(unanalysed)}; logs in {work_dir}")
        raise typer.Exit(1)
