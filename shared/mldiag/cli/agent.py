"""``mldiag agent``: run the node agent (see :mod:`mldiag.agent.daemon`) until Ctrl-C or SIGTERM.

Uploads go to the bucket the settings name: the local buckets under
``MLDIAG_DATA_DIR`` next to ``mldiag up``, Cloud Storage with
``MLDIAG_BACKEND=gcp`` (the node's service account needs write access to the
profiles bucket). With ``MLDIAG_AUTH_AUDIENCE`` set, calls carry a Google ID
token for that audience (the control plane behind IAM), refreshed as it ages.

The run is given by id, full name or display name; a node's agent often starts
before its workload registers the run, so it waits for the run to exist (and
for the control plane to answer) before it registers any target.

With ``--sdk-port`` it also serves the official SDK's routes on 127.0.0.1 and
forwards them with its own credentials (:mod:`mldiag.agent.sdk_forwarder`):
workloads on the node set ``DIAGON_BASE_URL=http://127.0.0.1:<port>``. It
serves them at once, so the workload can register the run the agent waits for.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from mldiag.client.api import (
    DEFAULT_API_URL, DEFAULT_LOCATION, DEFAULT_PROJECT, ApiClient, ApiError, ApiUrl, Location, Project, Token,
    api_command,
)
from mldiag.config import Settings
from mldiag.domain.names import RunName, parse_run

ID_TOKEN_REFRESH_S = 30 * 60  # Google ID tokens live an hour
SDK_FORWARD_TIMEOUT_S = 4.0  # the SDK gives up on a call after 5 s
WAIT_FOR = ("", "NOT_FOUND", "UNAVAILABLE")  # an unreachable control plane, a run not registered yet


class IdTokenClient(ApiClient):
    """An :class:`ApiClient` that authenticates with a Google ID token for ``audience``."""

    def __init__(self, api_url: str, audience: str, *, timeout: float = 30.0):
        super().__init__(api_url, timeout=timeout)
        self.audience, self.fetched_at = audience, float("-inf")
        self.lock = threading.Lock()

    def authorize(self) -> None:
        with self.lock:
            if time.monotonic() - self.fetched_at > ID_TOKEN_REFRESH_S:
                import google.auth.transport.requests
                from google.oauth2 import id_token

                token = id_token.fetch_id_token(google.auth.transport.requests.Request(), self.audience)
                self.session.headers["Authorization"] = f"Bearer {token}"
                self.fetched_at = time.monotonic()


def _client(settings: Settings, api_url: str, token: str, timeout: float = 30.0) -> ApiClient:
    """A client with the agent's credentials: an ID token in the cloud, else the bearer token."""
    if settings.auth_audience:
        return IdTokenClient(api_url, settings.auth_audience, timeout=timeout)
    return ApiClient(api_url, token, timeout=timeout)


def _find_run(client: ApiClient, project: str, location: str, run: str, stopping: threading.Event,
              interval_s: float) -> RunName | None:
    """The run's name, once the control plane knows it; None if stopped while waiting."""
    while not stopping.is_set():
        try:
            return parse_run(client.find_run(project, location, run)["name"])
        except ApiError as error:
            if error.status not in WAIT_FOR:
                raise
            typer.echo(f"waiting for run {run}: {error}", err=True)
        stopping.wait(interval_s)
    return None


@api_command
def agent(
    run: Annotated[str, typer.Option("--machine-learning-run", envvar="MLDIAG_RUN",
                                     help="The run whose workload runs on this node: id, full name or "
                                          "display name.")],
    ports: Annotated[list[int], typer.Option("--port", min=1, max=65535,
                                             help="A local profiler port (repeat for several processes).")] = [9999],
    node_index: Annotated[int, typer.Option("--node-index", envvar="MLDIAG_NODE_INDEX", min=0,
                                            help="This node's index; further ports count on from it.")] = 0,
    hostname: Annotated[str, typer.Option("--hostname", help="Hostname to register (default: this host's).")] = "",
    name: Annotated[str, typer.Option("--name", help="The agent's name (default: the hostname).")] = "",
    heartbeat: Annotated[float, typer.Option("--heartbeat-interval", min=1.0, help="Seconds between heartbeats.")]
        = 15.0,
    poll: Annotated[float, typer.Option("--poll-interval", min=0.1, help="Seconds between task polls.")] = 2.0,
    scratch_dir: Annotated[Path | None, typer.Option(
        "--scratch-dir", help="Where profilers write before the upload; containerised workloads must mount it "
                              "at the same path (default: the system's temporary folder).")] = None,
    sdk_port: Annotated[int | None, typer.Option(
        "--sdk-port", min=0, max=65535,
        help="Serve the official SDK's routes on 127.0.0.1:PORT (0: a free one), forwarded with this agent's "
             "credentials; workloads set DIAGON_BASE_URL=http://127.0.0.1:PORT.")] = None,
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "",
) -> None:
    """Register this node's profiler servers as targets and capture them on request."""
    from mldiag import bootstrap, logs
    from mldiag.agent.daemon import Agent, AgentConfig, LocalTarget
    from mldiag.agent.sdk_forwarder import SdkForwarder

    settings = Settings.from_env()
    logs.configure(settings.log_format)
    hostname = hostname or socket.gethostname()
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    client = _client(settings, api_url, token)
    forwarder = None
    if sdk_port is not None:
        try:
            forwarder = SdkForwarder(_client(settings, api_url, token, SDK_FORWARD_TIMEOUT_S), sdk_port).start()
        except OSError as error:
            raise typer.BadParameter(f"cannot listen on 127.0.0.1:{sdk_port} ({error.strerror})",
                                     param_hint="--sdk-port") from None
        typer.echo(f"mldiag agent: the SDK's routes on {forwarder.url} → {api_url} "
                   f"(DIAGON_BASE_URL={forwarder.url})", err=True)
    try:
        run_name = _find_run(client, project, location, run, stopping, heartbeat)
        if run_name is None:
            return
        config = AgentConfig(
            name=name or hostname, hostname=hostname, run=run_name,
            targets=[LocalTarget(port, node_index + i) for i, port in enumerate(ports)],
            heartbeat_interval_s=heartbeat, poll_interval_s=poll,
            scratch_dir=str(scratch_dir) if scratch_dir else None,
        )
        daemon = Agent(config, client, bootstrap.build_blobs(settings), stopping)
        typer.echo(f"mldiag agent {config.name}: ports {', '.join(map(str, ports))} of run {run_name.run} → "
                   f"{api_url}", err=True)
        daemon.run_forever()
    finally:
        if forwarder is not None:
            forwarder.stop()
