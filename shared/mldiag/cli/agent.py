"""``mldiag agent``: run the node agent (:mod:`mldiag.agent.node`) until Ctrl-C or SIGTERM.

Uploads go where the control plane at ``--api-url`` reads (the data folder of
``mldiag up``, or Cloud Storage in the cloud); with ``MLDIAG_AUTH_AUDIENCE``
set, calls carry a Google ID token for that audience.
The run may be given before its workload registers it: the agent waits.
With ``--sdk-port``, workloads on the node set
``DIAGON_BASE_URL=http://127.0.0.1:<port>``.
"""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from mldiag.cli.options import (
    DEFAULT_API_URL,
    DEFAULT_LOCATION,
    DEFAULT_PROJECT,
    ApiUrl,
    Location,
    Project,
    Token,
    api_command,
)
from mldiag.config import Settings


@api_command
def agent(
    run: Annotated[str, typer.Option("--machine-learning-run", envvar="MLDIAG_RUN",
                                     help="The run whose workload runs on this node: id, full name or "
                                          "display name.")],
    ports: Annotated[list[int], typer.Option("--port", min=1, max=65535, metavar="<n>",
                                             help="A local profiler port (repeat for several processes).")] = [9999],
    node_index: Annotated[int, typer.Option("--node-index", envvar="MLDIAG_NODE_INDEX", min=0, metavar="<index>",
                                            help="This node's index; further ports count on from it.")] = 0,
    hostname: Annotated[str, typer.Option("--hostname", help="Hostname to register (default: this host's).")] = "",
    name: Annotated[str, typer.Option("--name", help="The agent's name (default: the hostname).")] = "",
    heartbeat: Annotated[float, typer.Option("--heartbeat-interval", min=1.0, metavar="<seconds>",
                                             help="Seconds between heartbeats.")] = 15.0,
    poll: Annotated[float, typer.Option("--poll-interval", min=0.1, metavar="<seconds>",
                                        help="Seconds between task polls.")] = 2.0,
    scratch_dir: Annotated[Path | None, typer.Option(
        "--scratch-dir", help="Where profilers write before the upload; containerised workloads must mount it "
                              "at the same path (default: the system's temporary folder).")] = None,
    sdk_port: Annotated[int | None, typer.Option(
        "--sdk-port", min=0, max=65535, metavar="<n>",
        help="Serve the official SDK's routes on 127.0.0.1:PORT (0: a free one), forwarded with this agent's "
             "credentials; workloads set DIAGON_BASE_URL to http://127.0.0.1:PORT.")] = None,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "",
) -> None:
    """Register this node's profiler servers as targets and capture them on request."""
    from mldiag import logs
    from mldiag.agent.node import NodeAgentOptions, SdkPortUnavailable, run_node_agent

    settings = Settings.from_env()
    logs.configure(settings.log_format)
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    options = NodeAgentOptions(
        run=run, project=project, location=location, api_url=api_url, token=token,
        hostname=hostname or socket.gethostname(), name=name, ports=ports, node_index=node_index,
        heartbeat_interval_s=heartbeat, poll_interval_s=poll,
        scratch_dir=str(scratch_dir) if scratch_dir else None, sdk_port=sdk_port,
    )
    try:
        run_node_agent(settings, options, stopping, lambda line: typer.echo(line, err=True))
    except SdkPortUnavailable as error:
        raise typer.BadParameter(str(error), param_hint="--sdk-port") from None
