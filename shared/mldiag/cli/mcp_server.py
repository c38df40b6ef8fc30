"""``mldiag mcp``: the control plane as a Model Context Protocol server, for agents that read profiles.

The server speaks MCP over stdio, or over streamable HTTP on this machine
(``--transport http``, answering only requests that carry the control plane's
API token as a bearer token), with the official ``mcp`` SDK (the ``[mcp]`` extra).
It is a client of the control plane's HTTP API like every other command: each
tool is one or a few calls through :class:`~mldiag.client.api.ApiClient`, with
the same ``--api-url``, ``--token``, ``--project`` and ``--location``, so an
agent reaches exactly what the token lets it reach. Tools: list and find runs
(a run is named by id, full name or display name), list a run's sessions, read a
session's analysis and its time attribution, compare two sessions, run SQL or a
named query over the fleet, and request an on-demand capture. Resource: a
session's ``analysis.json`` (``mldiag://runs/{run}/sessions/{session}/analysis.json``).
A refused call becomes a tool error carrying the API's one-line message.
"""

from __future__ import annotations

import functools
import hmac
import json
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from mldiag import __version__
from mldiag.cli.fleet import answer_rows
from mldiag.cli.options import DEFAULT_API_URL, DEFAULT_LOCATION, DEFAULT_PROJECT, ApiUrl, Location, Project, Token
from mldiag.client.api import ApiClient, ApiError, RunNotGiven, location_path

if TYPE_CHECKING:
    from mcp.server import MCPServer

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_HTTP_PORT = 8793
HTTP_PATH = "/mcp"
SESSIONS = "profilerSessions"
RUNS = "machineLearningRuns"
MAX_LISTED = 1000
SUMMARY_HOST_FIELDS = ("host", "device_kind", "devices", "steps", "step_ms", "busy_fraction", "loop_busy_fraction")
INSTRUCTIONS = (
    "mldiag holds XProf profiles of ML training and serving runs and analyses each profiler session. "
    "Find a run with list_runs or find_run, its sessions with list_sessions, then read_analysis for the "
    "diagnosis and read_attribution for where the step time went. fleet_query and fleet_report answer "
    "questions across runs."
)


class FleetReport(StrEnum):
    top_waste = "top-waste"
    regressions = "regressions"
    by_cause = "by-cause"


FLEET_ROUTES = {FleetReport.top_waste: "topWaste", FleetReport.regressions: "regressions",
                FleetReport.by_cause: "byCause"}


def _rows(answer: dict[str, Any]) -> dict[str, Any]:
    """A fleet answer as records, column name to value, rather than parallel lists."""
    return {"rows": answer_rows(answer), "truncated": answer["truncated"]}


class ControlPlaneTools:
    """What the tools do, each through the API; kept apart from the MCP registration so that it reads as plain calls."""

    def __init__(self, client: ApiClient, project: str, location: str):
        self.client = client
        self.project = project
        self.location = location

    def list_runs(self, display_name: str = "", filter: str = "", limit: int = 50) -> list[dict[str, Any]]:
        conditions = [condition for condition in (filter, display_name and f"displayName = {json.dumps(display_name)}")
                      if condition]
        return self.client.list_all(f"{location_path(self.project, self.location)}/{RUNS}", RUNS,
                                    limit=min(limit, MAX_LISTED), filter=" AND ".join(conditions),
                                    order_by="createTime desc")

    def find_run(self, run: str) -> dict[str, Any]:
        return self.client.find_run(self.project, self.location, run)

    def list_sessions(self, run: str, limit: int = 50) -> list[dict[str, Any]]:
        return self.client.list_all(self.client.resolve_child_path(self.project, self.location, run, SESSIONS),
                                    SESSIONS, limit=min(limit, MAX_LISTED), order_by="createTime desc")

    def analysis(self, run: str, session: str) -> dict[str, Any]:
        """The session's latest ``analysis.json``, as the console serves it."""
        stored = self.client.call("GET", self.client.resolve_child_path(self.project, self.location, run, SESSIONS,
                                                                        session))
        _, run_id, _, session_id = stored["name"].rsplit("/", 3)
        response = self.client.send("GET", f"ui/runs/{run_id}/sessions/{session_id}/report/analysis.json")
        if response.status_code != 200:
            state = stored.get("analysis", {}).get("state", "NOT_STARTED")
            raise ApiError(f"NOT_FOUND: session {session_id} has no analysis.json (analysis {state}, "
                           f"HTTP {response.status_code})", "NOT_FOUND")
        return response.json()

    def analysis_summary(self, run: str, session: str) -> dict[str, Any]:
        analysis = self.analysis(run, session)
        return {
            "status": analysis.get("status"), "summary": analysis.get("summary"), "health": analysis.get("health"),
            "metrics": analysis.get("metrics"), "findings": analysis.get("findings", []),
            "hosts": [{field: host.get(field) for field in SUMMARY_HOST_FIELDS} for host in analysis.get("hosts", [])],
            "missing_hosts": analysis.get("missing_hosts", []),
        }

    def attribution(self, run: str, session: str) -> list[dict[str, Any]]:
        return [{"host": host.get("host"), "attribution": host.get("attribution")}
                for host in self.analysis(run, session).get("hosts", [])]

    def compare(self, run: str, baseline: str, candidate: str) -> dict[str, Any]:
        baseline_path = self.client.resolve_child_path(self.project, self.location, run, SESSIONS, baseline)
        candidate_path = self.client.resolve_child_path(self.project, self.location, run, SESSIONS, candidate)
        return self.client.call("GET", candidate_path + ":compare",
                                params={"baseline": baseline_path.removeprefix("v1alpha/")})

    def fleet_query(self, sql: str, max_rows: int = 1000) -> dict[str, Any]:
        return _rows(self.client.call("POST", "v1alpha/fleet:query", body={"sql": sql, "maxRows": max_rows}))

    def fleet_report(self, report: FleetReport, since: str = "7d", limit: int = 50, label: str = "",
                     threshold: float = 0.05) -> dict[str, Any]:
        params: dict[str, Any] = {"since": since, "limit": limit}
        if label:
            params["label"] = label
        if report is FleetReport.regressions:
            params["threshold"] = threshold
        return _rows(self.client.call("GET", f"v1alpha/fleet/{FLEET_ROUTES[report]}", params=params))

    def capture(self, run: str, session: str, duration: str = "2s", targets: list[str] | None = None) -> dict[str, Any]:
        path = self.client.resolve_child_path(self.project, self.location, run, SESSIONS) + ":capture"
        body = {"kind": "on-demand", "duration": duration, "profilerTargets": targets or []}
        return self.client.call("POST", path, params={"profilerSessionId": session}, body=body)


def _refused_as(error: type[Exception]) -> Callable[[F], F]:
    """Let a refused call reach the agent as ``error`` with the API's message (the SDK hides other exceptions)."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except (ApiError, RunNotGiven) as refused:
                raise error(str(refused)) from None

        return call  # type: ignore[return-value]

    return decorate


def build_server(tools: ControlPlaneTools) -> MCPServer:
    """The MCP server whose tools and resource are ``tools``' calls."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError

    server = MCPServer("mldiag", version=__version__, instructions=INSTRUCTIONS)
    refused_as_tool_error = _refused_as(ToolError)

    @server.tool()
    @refused_as_tool_error
    def list_runs(display_name: str = "", filter: str = "", limit: int = 50) -> list[dict[str, Any]]:
        """The newest machine-learning runs, optionally only those with a display name or matching an API filter
        (e.g. 'runPhase = ACTIVE AND labels.team = "infra"')."""
        return tools.list_runs(display_name, filter, limit)

    @server.tool()
    @refused_as_tool_error
    def find_run(run: str) -> dict[str, Any]:
        """One run, given by its id, full name, or display name (when exactly one run has it)."""
        return tools.find_run(run)

    @server.tool()
    @refused_as_tool_error
    def list_sessions(run: str, limit: int = 50) -> list[dict[str, Any]]:
        """A run's newest profiler sessions, each with its analysis state, health, step time and top finding."""
        return tools.list_sessions(run, limit)

    @server.tool()
    @refused_as_tool_error
    def read_analysis(run: str, session: str) -> dict[str, Any]:
        """A session's diagnosis: status, summary, metrics, findings with their evidence, and each host's steps."""
        return tools.analysis_summary(run, session)

    @server.tool()
    @refused_as_tool_error
    def read_attribution(run: str, session: str) -> list[dict[str, Any]]:
        """Where each host's training-loop time went: its parts by cause (device compute, host work, dispatch,
        transfers, collectives, ...), with milliseconds and share of the loop."""
        return tools.attribution(run, session)

    @server.tool()
    @refused_as_tool_error
    def compare_sessions(run: str, baseline: str, candidate: str) -> dict[str, Any]:
        """Whether the candidate session regresses against the baseline (step time and memory, with statistics)."""
        return tools.compare(run, baseline, candidate)

    @server.tool()
    @refused_as_tool_error
    def fleet_query(sql: str, max_rows: int = 1000) -> dict[str, Any]:
        """One read-only SELECT over the table fleet_records (one record per analysis; see docs/fleet.md)."""
        return tools.fleet_query(sql, max_rows)

    @server.tool()
    @refused_as_tool_error
    def fleet_report(report: FleetReport, since: str = "7d", limit: int = 50, label: str = "",
                     threshold: float = 0.05) -> dict[str, Any]:
        """A named fleet query: top-waste (runs by lost accelerator time, by cause; label KEY=VALUE filters),
        regressions (runs whose step time rose by more than threshold), by-cause (lost time per value of the run
        label named by label)."""
        return tools.fleet_report(report, since, limit, label, threshold)

    @server.tool()
    @refused_as_tool_error
    def request_capture(run: str, session: str, duration: str = "2s",
                        targets: list[str] | None = None) -> dict[str, Any]:
        """Capture a profile of the run's targets now (on-demand) into a new session with the id given; returns the
        capture's operation. Duration from 100ms to 5m, e.g. 2s; targets are target ids, none for all of them."""
        return tools.capture(run, session, duration, targets)

    @server.resource("mldiag://runs/{run}/sessions/{session}/analysis.json", mime_type="application/json")
    @_refused_as(ResourceError)
    def analysis_report(run: str, session: str) -> str:
        """A session's whole analysis.json: every finding, host, tool result and measure of the analysis."""
        return json.dumps(tools.analysis(run, session))

    return server


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


def serve_mcp(
    project: Project = DEFAULT_PROJECT, location: Location = DEFAULT_LOCATION,
    api_url: ApiUrl = DEFAULT_API_URL, token: Token = "",
    transport: Annotated[Transport, typer.Option(
        "--transport", help="stdio, or http: streamable HTTP at http://HOST:PORT/mcp, answering only requests "
                            "that carry the API token (Authorization: Bearer <token>).")] = Transport.stdio,
    host: Annotated[str, typer.Option("--host", help="With --transport http: the address to listen on.")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="With --transport http: the port.")
                    ] = DEFAULT_HTTP_PORT,
) -> None:
    """Serve the control plane to agents over MCP (needs the MCP SDK, mldiag's mcp extra)."""
    try:
        import mcp.server  # noqa: F401
    except ImportError:
        typer.echo("error: mldiag mcp needs the MCP SDK: pip install 'mldiag[mcp]'", err=True)
        raise typer.Exit(2) from None
    server = build_server(ControlPlaneTools(ApiClient(api_url, token), project, location))
    if transport is Transport.stdio:
        server.run("stdio")
        return
    if not token:
        typer.echo("error: mldiag mcp --transport http needs the API token (--token or MLDIAG_API_TOKEN): "
                   "its callers must present it", err=True)
        raise typer.Exit(2)
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    uvicorn.run(BearerTokenRequired(app, token), host=host, port=port, log_level="warning")


class BearerTokenRequired:
    """An ASGI app that answers 401 to any HTTP request without ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str):
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"the control plane's API token is required\n"})
                return
        await self.app(scope, receive, send)
