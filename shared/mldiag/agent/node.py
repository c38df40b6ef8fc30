"""The node agent for one run, as ``mldiag agent`` runs it: its credentials, the SDK's door, its uploads.

Uploads go where the control plane reads (``GET /v1alpha/agentConfig``), whatever
the agent's own environment says: the local buckets under the data folder of
the ``mldiag up`` it talks to, or Cloud Storage in the control plane's project
(the node's service account needs write access to the profiles bucket). With
``MLDIAG_AUTH_AUDIENCE`` set, calls carry a Google ID token for that audience
(:mod:`mldiag.client.credentials`).

The run is given by id, full name or display name; a node's agent often starts
before its workload registers the run, so it waits for the run to exist (and
for the control plane to answer) before it registers any target.

With an SDK port it also serves the official SDK's routes on 127.0.0.1 and
forwards them with its own credentials (:mod:`mldiag.agent.sdk_forwarder`). It
serves them at once, so the workload can register the run the agent waits for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mldiag import bootstrap
from mldiag.agent.daemon import Agent, AgentConfig, LocalTarget
from mldiag.agent.sdk_forwarder import SdkForwarder
from mldiag.client.api import ApiClient, ApiError
from mldiag.client.credentials import authenticated_client
from mldiag.config import Settings
from mldiag.domain.names import RunName, parse_run

SDK_FORWARD_TIMEOUT_S = 4.0  # the SDK gives up on a call after 5 s
WAIT_FOR = ("", "NOT_FOUND", "UNAVAILABLE")  # an unreachable control plane, a run not registered yet


class SdkPortUnavailable(Exception):
    """The SDK's local port could not be listened on."""


@dataclass(frozen=True)
class NodeAgentOptions:
    """What ``mldiag agent`` was asked for: the run (id, full name or display name) and this node's servers."""

    run: str
    project: str
    location: str
    api_url: str
    hostname: str
    ports: list[int]
    node_index: int
    heartbeat_interval_s: float
    poll_interval_s: float
    token: str = ""
    name: str = ""  # the hostname when empty
    scratch_dir: str | None = None
    sdk_port: int | None = None  # 0: a free one; None: no SDK door


def wait_for_run(client: ApiClient, project: str, location: str, run: str, stopping: threading.Event,
                 interval_s: float, say: Callable[[str], None]) -> RunName | None:
    """The run's name, once the control plane knows it; None if stopped while waiting."""
    while not stopping.is_set():
        try:
            return parse_run(client.find_run(project, location, run)["name"])
        except ApiError as error:
            if error.status not in WAIT_FOR:
                raise
            say(f"waiting for run {run}: {error}")
        stopping.wait(interval_s)
    return None


def with_control_plane_storage(settings: Settings, api: ApiClient) -> Settings:
    """``settings`` with the control plane's blob store: the agent uploads where the control plane reads."""
    storage = api.call("GET", "v1alpha/agentConfig")["storage"]
    if storage["backend"] == "gcp":
        return settings.model_copy(update={"backend": "gcp", "project": storage["project"]})
    return settings.model_copy(update={"backend": "embedded", "data_dir": Path(storage["dataDir"])})


def _uploads_go_to(settings: Settings) -> str:
    return f"Cloud Storage in {settings.project}" if settings.backend == "gcp" else f"{settings.data_dir / 'buckets'}"


def run_node_agent(settings: Settings, options: NodeAgentOptions, stopping: threading.Event,
                   say: Callable[[str], None]) -> None:
    """Serve the run's targets on this node until ``stopping`` is set; ``say`` gets the agent's progress lines.

    Raises :class:`SdkPortUnavailable` when the SDK's port cannot be listened on, and
    :class:`~mldiag.client.api.ApiError` when the control plane refuses the run.
    """
    def client(timeout: float = 30.0) -> ApiClient:
        return authenticated_client(options.api_url, token=options.token, audience=settings.auth_audience,
                                    timeout=timeout)

    forwarder = None
    if options.sdk_port is not None:
        try:
            forwarder = SdkForwarder(client(SDK_FORWARD_TIMEOUT_S), options.sdk_port).start()
        except OSError as error:
            raise SdkPortUnavailable(f"cannot listen on 127.0.0.1:{options.sdk_port} ({error.strerror})") from None
        say(f"mldiag agent: the SDK's routes on {forwarder.url} → {options.api_url} "
            f"(DIAGON_BASE_URL={forwarder.url})")
    try:
        api = client()
        run_name = wait_for_run(api, options.project, options.location, options.run, stopping,
                                options.heartbeat_interval_s, say)
        if run_name is None:
            return
        config = AgentConfig(
            name=options.name or options.hostname, hostname=options.hostname, run=run_name,
            targets=[LocalTarget(port, options.node_index + i) for i, port in enumerate(options.ports)],
            heartbeat_interval_s=options.heartbeat_interval_s, poll_interval_s=options.poll_interval_s,
            scratch_dir=options.scratch_dir,
        )
        storage = with_control_plane_storage(settings, api)
        daemon = Agent(config, api, bootstrap.build_blobs(storage), stopping,
                       say=lambda line: say(f"mldiag agent {config.name}: {line}"))
        say(f"mldiag agent {config.name}: ports {', '.join(map(str, options.ports))} of run {run_name.run} → "
            f"{options.api_url}, uploads into {_uploads_go_to(storage)}")
        daemon.run_forever()
    finally:
        if forwarder is not None:
            forwarder.stop()
