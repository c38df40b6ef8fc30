"""``mldiag machine-learning-run set-auto-capture``, ``report-metrics`` and ``set-notifications``: automatic
capture's knobs and input, and where its results are announced."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from mldiag.cli.capture import wire_duration
from mldiag.cli.options import (
    DEFAULT_API_URL,
    DEFAULT_LOCATION,
    DEFAULT_PROJECT,
    ApiUrl,
    Fmt,
    Location,
    Project,
    Token,
    api_command,
    print_resources,
)
from mldiag.cli.output import Format
from mldiag.client.api import ApiClient

RunId = Annotated[str, typer.Argument(help="The run's id, full resource name or display name.")]


@api_command
def set_auto_capture(
    run: RunId,
    cooldown: Annotated[str, typer.Option(
        "--cooldown", callback=wire_duration, help="Least time between automatic captures.")] = "10m",
    duration: Annotated[str, typer.Option(
        "--duration", callback=wire_duration, help="How long each automatic capture records (100ms to 5m).")] = "3s",
    max_per_hour: Annotated[int, typer.Option("--max-per-hour", min=1, max=60)] = 4,
    disable: Annotated[bool, typer.Option("--disable", help="Record alerts but never capture.")] = False,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Set how monitoring alerts capture this run's profiles (storm control)."""
    body = {"enabled": not disable, "cooldown": cooldown, "duration": duration, "maxPerHour": max_per_hour}
    client = ApiClient(api_url, token)
    path = client.resolve_run_path(project, location, run) + ":setAutoCapture"
    print_resources(client.call("POST", path, body=body), fmt)


@api_command
def report_metrics(
    run: RunId,
    points_file: Annotated[Path, typer.Argument(help="JSON lines of {step, stepTimeSeconds, dutyCycle?}; - for stdin.",
                                                allow_dash=True)],
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Feed step times to the run's degradation analyzer; prints any alert they caused."""
    text = sys.stdin.read() if str(points_file) == "-" else points_file.read_text()
    try:
        points: list[Any] = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as error:
        raise typer.BadParameter(f"not JSON lines: {error}", param_hint="POINTS_FILE") from None
    client = ApiClient(api_url, token)
    path = client.resolve_run_path(project, location, run) + ":reportMetrics"
    print_resources(client.call("POST", path, body={"points": points}), fmt)


@api_command
def set_notifications(
    run: RunId,
    webhook: Annotated[str, typer.Option("--webhook", help="URL that receives a signed CloudEvent per event.")] = "",
    webhook_secret: Annotated[str, typer.Option(
        "--webhook-secret", envvar="MLDIAG_WEBHOOK_SECRET",
        help="The key of the webhook's X-Mldiag-Signature (HMAC-SHA256 of the body).")] = "",
    webhook_mode: Annotated[str, typer.Option(
        "--webhook-mode", help="CloudEvents HTTP binding: binary (ce-* headers) or structured.")] = "binary",
    slack: Annotated[str, typer.Option("--slack", envvar="MLDIAG_SLACK_URL",
                                       help="A Slack incoming-webhook URL.")] = "",
    pagerduty_routing_key: Annotated[str, typer.Option(
        "--pagerduty-routing-key", envvar="MLDIAG_PAGERDUTY_ROUTING_KEY",
        help="A PagerDuty Events API v2 integration's routing key.")] = "",
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.yaml,
) -> None:
    """Say where this run's finished analyses and monitored events are announced (unset: the deployment's)."""
    body = {"webhookUrl": webhook, "webhookSecret": webhook_secret, "webhookMode": webhook_mode,
            "slackUrl": slack, "pagerdutyRoutingKey": pagerduty_routing_key}
    client = ApiClient(api_url, token)
    path = client.resolve_run_path(project, location, run) + ":setNotifications"
    print_resources(client.call("POST", path, body=body), fmt)
