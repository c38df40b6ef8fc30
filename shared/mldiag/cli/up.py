"""``mldiag up``: run the control plane and every function locally, on the embedded default.

The terminal gets the banner, then a line per thing that happened (``--log-format
console``, the default here) or every log line as JSON (``--log-format json``, or
``MLDIAG_LOG_FORMAT=json``); the log file under the data directory has every line.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mldiag.config import Settings

if TYPE_CHECKING:
    from mldiag.local.server import Banner


class LogFormat(StrEnum):
    CONSOLE = "console"
    JSON = "json"


def _announce(banner: Banner) -> None:
    typer.echo(f"mldiag control plane at {banner.url} (data in {banner.data_dir})")
    typer.echo("Point workloads using google-cloud-mldiagnostics at it:")
    typer.echo(f"  export DIAGON_BASE_URL={banner.sdk_url or banner.url}")
    if banner.sdk_url and banner.sdk_url != banner.url:
        typer.echo("  (the SDK's capability URL: it lets its holder register runs; give it to workloads only)")
    typer.echo(f"and give them gcs_path={banner.bucket_folder} (the local folder standing for {banner.bucket_uri}).")
    typer.echo(f"Every folder under {Path(banner.bucket_folder).parent} is a bucket: gs://<folder>.")
    if banner.otlp_endpoint:
        typer.echo("Step times over OpenTelemetry (the SDK's [otel] extra):")
        typer.echo(f"  export OTEL_EXPORTER_OTLP_ENDPOINT={banner.otlp_endpoint}")
        if banner.sdk_url != banner.url:
            typer.echo("  export OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>")
    elif banner.otlp_note:
        typer.echo(f"OTLP/gRPC is off: {banner.otlp_note} (OTLP/HTTP: {banner.url}/v1/metrics)")
    typer.echo(f"Console: {banner.url}/ui")
    if banner.viewer_url:
        typer.echo(f"XProf viewer: {banner.viewer_url} (the sessions' XProf links open there)")
    typer.echo(f"Full log, as JSON lines: {banner.log_file}")
    typer.echo(f"CLI: export MLDIAG_API_URL={banner.url}. Stop with Ctrl-C.")


def up(
    data: Annotated[Path | None, typer.Option("--data", help="Data directory (default: MLDIAG_DATA_DIR or ~/.mldiag).")] = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port; 0 picks a free one.")] = 8080,
    host: Annotated[str, typer.Option(
        "--host", help="Address to listen on (the API and OTLP/gRPC). Any but loopback needs MLDIAG_API_TOKEN, "
                       "or --insecure.")] = "127.0.0.1",
    insecure: Annotated[bool, typer.Option(
        "--insecure", help="Listen beyond loopback without MLDIAG_API_TOKEN: anyone who reaches the port may "
                           "change runs, read the operator routes and post alerts.")] = False,
    viewer: Annotated[bool, typer.Option("--viewer", help="Also run the XProf viewer over the local bucket.")] = False,
    viewer_port: Annotated[int, typer.Option("--viewer-port", min=0, max=65535,
                                             help="The viewer's port on 127.0.0.1; 0 picks a free one.")] = 8791,
    otlp: Annotated[bool, typer.Option("--otlp/--no-otlp",
                                       help="Take OpenTelemetry (OTLP/gRPC) metrics: step time, duty cycle.")] = True,
    otlp_port: Annotated[int | None, typer.Option(
        "--otlp-port", min=0, max=65535,
        help="The OTLP/gRPC port, on --host; 0 picks a free one. Default 4317, or none if 4317 is in use "
             "(the banner says so).")] = None,
    log_format: Annotated[LogFormat | None, typer.Option(
        "--log-format",
        help="The terminal's lines: 'console', a sentence per thing that happened, or 'json', every log line "
             "in Cloud Logging's shape (default: MLDIAG_LOG_FORMAT, else console). The log file under the data "
             "directory has every line either way.")] = None,
) -> None:
    """Run the control plane, the event functions, a bucket watcher and maintenance, until Ctrl-C."""
    from mldiag.local.otlp_grpc import DEFAULT_PORT
    from mldiag.local.server import LOCAL_SETTLE_SECONDS, StartFailed, serve
    from mldiag.local.xprof_viewer import ViewerFailed

    settings = Settings.from_env()
    explicit_format = "log_format" in settings.model_fields_set  # set by MLDIAG_LOG_FORMAT
    settings = settings.model_copy(update={
        **({} if "settle_seconds" in settings.model_fields_set else {"settle_seconds": LOCAL_SETTLE_SECONDS}),
        "log_format": log_format.value if log_format else (settings.log_format if explicit_format else "console"),
        **({"data_dir": data.expanduser().resolve()} if data is not None else {}),
    })
    if settings.backend != "embedded":
        raise typer.BadParameter("mldiag up runs the embedded default; for emulators use scripts/devstack",
                                 param_hint="MLDIAG_BACKEND")
    try:
        serve(settings, host, port, _announce, viewer_port if viewer else None,
              otlp_port=(DEFAULT_PORT if otlp_port is None else otlp_port) if otlp else None,
              otlp_optional=otlp_port is None, insecure=insecure)
    except (StartFailed, ViewerFailed) as error:
        typer.echo(f"mldiag up: {error}", err=True)
        raise typer.Exit(1) from None
