"""``mldiag up``: run the control plane and every function locally, on the embedded default."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mldiag.config import Settings

if TYPE_CHECKING:
    from mldiag.server import Banner


def _announce(banner: Banner) -> None:
    typer.echo(f"mldiag control plane at {banner.url} (data in {banner.data_dir})")
    typer.echo("Point workloads using google-cloud-mldiagnostics at it:")
    typer.echo(f"  export DIAGON_BASE_URL={banner.sdk_url or banner.url}")
    if banner.sdk_url and banner.sdk_url != banner.url:
        typer.echo("  (the SDK's capability URL: it lets its holder register runs; give it to workloads only)")
    typer.echo(f"and give them gcs_path={banner.bucket_folder} (the local folder standing for {banner.bucket_uri}).")
    typer.echo(f"Console: {banner.url}/ui")
    if banner.viewer_url:
        typer.echo(f"XProf viewer: {banner.viewer_url} (the sessions' XProf links open there)")
    typer.echo(f"CLI: export MLDIAG_API_URL={banner.url}. Stop with Ctrl-C.")


def up(
    data: Annotated[Path | None, typer.Option("--data", help="Data directory (default: MLDIAG_DATA_DIR or ~/.mldiag).")] = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port; 0 picks a free one.")] = 8080,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    viewer: Annotated[bool, typer.Option("--viewer", help="Also run the XProf viewer over the local bucket.")] = False,
    viewer_port: Annotated[int, typer.Option("--viewer-port", min=0, max=65535,
                                             help="The viewer's port on 127.0.0.1; 0 picks a free one.")] = 8791,
) -> None:
    """Run the control plane, the event functions, a bucket watcher and maintenance, until Ctrl-C."""
    from mldiag import logs
    from mldiag.server import serve
    from mldiag.ui.xprof_viewer import ViewerFailed

    settings = Settings.from_env()
    if data is not None:
        settings = settings.model_copy(update={"data_dir": data.expanduser().resolve()})
    if settings.backend != "embedded":
        raise typer.BadParameter("mldiag up runs the embedded default; for emulators use scripts/devstack",
                                 param_hint="MLDIAG_BACKEND")
    logs.configure(settings.log_format)
    try:
        serve(settings, host, port, _announce, viewer_port if viewer else None)
    except ViewerFailed as error:
        typer.echo(f"mldiag up: {error}", err=True)
        raise typer.Exit(1) from None
