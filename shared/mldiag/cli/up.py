"""``mldiag up``: run the control plane and every function locally, on the embedded default."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mldiag import logs
from mldiag.config import Settings
from mldiag.server import Banner, serve


def _announce(banner: Banner) -> None:
    typer.echo(f"mldiag control plane at {banner.url} (data in {banner.data_dir})")
    typer.echo("Point workloads using google-cloud-mldiagnostics at it:")
    typer.echo(f"  export DIAGON_BASE_URL={banner.url}")
    typer.echo(f"and give them gcs_path={banner.bucket_folder} (the local folder standing for {banner.bucket_uri}).")
    typer.echo(f"CLI: export MLDIAG_API_URL={banner.url}. Stop with Ctrl-C.")


def up(
    data: Annotated[Path | None, typer.Option("--data", help="Data directory (default: MLDIAG_DATA_DIR or ~/.mldiag).")] = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port; 0 picks a free one.")] = 8080,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
) -> None:
    """Run the control plane, the event functions, a bucket watcher and maintenance, until Ctrl-C."""
    settings = Settings.from_env()
    if data is not None:
        settings = settings.model_copy(update={"data_dir": data.expanduser().resolve()})
    if settings.backend != "embedded":
        raise typer.BadParameter("mldiag up runs the embedded default; for emulators use scripts/devstack",
                                 param_hint="MLDIAG_BACKEND")
    logs.configure(settings.log_format)
    serve(settings, host, port, _announce)
