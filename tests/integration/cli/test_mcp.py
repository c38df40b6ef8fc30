"""``mldiag mcp`` driven over stdio by the MCP SDK's own client, against a real ``mldiag up``.

A committed fixture profile lands in the bucket folder as a run's session, as a workload's upload
would; once the control plane has analysed it, the client lists the server's tools, finds the run by
its display name, reads the session's analysis and attribution, and reads the report resource.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client  # the [test] extra has the MCP SDK
from up_process_support import UpProcess

PROFILE = (Path(__file__).resolve().parents[2] / "fixtures" / "profiles" / "input_bound" / "plugins" / "profile"
           / "input_bound" / "fixture-host.xplane.pb")
RUN = "mcp-input"
TOOLS = {"list_runs", "find_run", "list_sessions", "read_analysis", "read_attribution", "compare_sessions",
         "fleet_query", "fleet_report", "request_capture"}


def _structured(result: Any) -> Any:
    assert not result.is_error, result.content
    content = result.structured_content
    return content["result"] if set(content) == {"result"} else content


async def _drive(url: str) -> dict[str, Any]:
    server = StdioServerParameters(
        command=sys.executable, args=["-c", "from mldiag.cli.main import run; run()", "mcp", "--api-url", url],
        env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    seen: dict[str, Any] = {}
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        seen["tools"] = {tool.name for tool in (await session.list_tools()).tools}
        deadline = time.monotonic() + 240
        # The run exists once the bucket watcher has seen the file and registration has run.
        while not (runs := _structured(await session.call_tool("list_runs", {"display_name": RUN}))) and (
                time.monotonic() < deadline):
            await anyio.sleep(0.5)
        seen["runs"] = runs
        sessions: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not any(s.get("analysis", {}).get("state") == "DONE" for s in sessions):
            await anyio.sleep(0.5)
            sessions = _structured(await session.call_tool("list_sessions", {"run": RUN}))
        seen["sessions"] = sessions
        seen["analysis"] = _structured(await session.call_tool("read_analysis", {"run": RUN, "session": "s1"}))
        seen["attribution"] = _structured(await session.call_tool("read_attribution", {"run": RUN, "session": "s1"}))
        report = await session.read_resource(f"mldiag://runs/{RUN}/sessions/s1/analysis.json")
        seen["report"] = json.loads(report.contents[0].text)
        seen["compared"] = await session.call_tool("compare_sessions",
                                                   {"run": RUN, "baseline": "s1", "candidate": "s1"})
        seen["top_waste"] = await session.call_tool("fleet_report", {"report": "top-waste"})
        seen["query"] = await session.call_tool("fleet_query", {"sql": "SELECT run_display_name FROM fleet_records"})
        seen["capture"] = await session.call_tool("request_capture", {"run": RUN, "session": "s2"})
        seen["missing"] = await session.call_tool("read_analysis", {"run": "no-such-run", "session": "s1"})
    return seen


def test_an_agent_finds_the_run_and_reads_its_analysis_over_mcp(tmp_path):
    data = tmp_path / "data"
    up = UpProcess.start(data, env={"MLDIAG_SETTLE_SECONDS": None, "MLDIAG_MAINTENANCE_INTERVAL_SECONDS": None})
    try:
        url = up.wait_for("mldiag control plane at ").split(" at ", 1)[1].split()[0]
        up.wait_for("Full log, as JSON lines: ")
        session = data / "buckets" / "mldiag-profiles" / RUN / "plugins" / "profile" / "s1"
        session.mkdir(parents=True)
        shutil.copyfile(PROFILE, session / "host-0.xplane.pb.part")
        (session / "host-0.xplane.pb.part").rename(session / "host-0.xplane.pb")
        seen = anyio.run(_drive, url)
    finally:
        up.stop()

    assert seen["tools"] == TOOLS
    assert [run["displayName"] for run in seen["runs"]] == [RUN]
    assert [s["analysis"]["state"] for s in seen["sessions"]] == ["DONE"], up.lines[-10:]
    analysis = seen["analysis"]
    assert analysis["status"] == seen["report"]["status"] == "NEEDS_ATTENTION"
    assert analysis["findings"][0]["category"] == "input_bound"
    assert [host["steps"] for host in analysis["hosts"]] == [10]
    attribution = seen["attribution"][0]["attribution"]
    assert attribution == seen["report"]["hosts"][0]["attribution"]
    assert attribution["parts"][0]["cause"] == "host_work"
    assert seen["missing"].is_error and "no-such-run" in seen["missing"].content[0].text
    assert _structured(seen["compared"])["step_time"]["median_change"] == 0.0
    top_waste = _structured(seen["top_waste"])["rows"]
    assert [row["display_name"] for row in top_waste] == [RUN] and top_waste[0]["host_work_device_ms"] > 0
    assert _structured(seen["query"])["rows"] == [{"run_display_name": RUN}]
    assert seen["capture"].is_error and "no active profiler targets" in seen["capture"].content[0].text


TOKEN = "mcp-test-token-0123456789abcdef0123"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _over_http(endpoint: str) -> set[str]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as client, \
            streamable_http_client(endpoint, http_client=client) as (read, write, *_), \
            ClientSession(read, write) as session:
        await session.initialize()
        return {tool.name for tool in (await session.list_tools()).tools}


def test_over_http_the_server_answers_only_callers_with_the_api_token(tmp_path):
    up = UpProcess.start(tmp_path / "data", env={"MLDIAG_API_TOKEN": TOKEN})
    port = _free_port()
    server = None
    try:
        url = up.wait_for("mldiag control plane at ").split(" at ", 1)[1].split()[0]
        server = subprocess.Popen([sys.executable, "-c", "from mldiag.cli.main import run; run()", "mcp",
                                   "--transport", "http", "--port", str(port), "--api-url", url, "--token", TOKEN],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        endpoint = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert server.poll() is None, server.stderr.read()
                time.sleep(0.2)
        request = urllib.request.Request(endpoint, data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        tools = anyio.run(_over_http, endpoint)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        up.stop()

    assert refused.value.code == 401
    assert tools == TOOLS


def test_over_http_without_a_token_the_server_does_not_start():
    done = subprocess.run([sys.executable, "-c", "from mldiag.cli.main import run; run()", "mcp", "--transport",
                           "http", "--port", str(_free_port())], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MLDIAG_API_TOKEN": ""})
    assert done.returncode == 2 and "needs the API token" in done.stderr
