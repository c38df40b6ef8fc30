"""``mldiag up`` attacked as a process of its own: what a client without the credential can make it do."""

from __future__ import annotations

import json
import os
import socket
import stat
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import grpc
from up_process_support import UpProcess

from mldiag.local.http_server import CONNECTION_LIMIT
from mldiag.local.otlp_grpc import SERVICE

TOKEN = "hardening-token"


def test_unauthenticated_garbage_over_otlp_grpc_is_refused_before_it_is_parsed(tmp_path):
    up = UpProcess.start(tmp_path / "data", "import mldiag.local.otlp_grpc as grpc_server",
                         "grpc_server.DEFAULT_PORT = 0", env={"MLDIAG_API_TOKEN": TOKEN})
    codes = []
    try:
        endpoint = up.wait_for("OTEL_EXPORTER_OTLP_ENDPOINT=").split("=", 1)[1]
        up.wait_for("Stop with Ctrl-C")
        with grpc.insecure_channel(endpoint.removeprefix("http://")) as channel:
            export = channel.unary_unary(f"/{SERVICE}/Export")
            for metadata in ((), (("authorization", f"Bearer {TOKEN}"),)):
                try:
                    export(b"\xff\xff\xff", metadata=metadata, timeout=30)
                except grpc.RpcError as refused:
                    codes.append(refused.code())
    finally:
        up.stop()
    assert codes == [grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT]
    assert not [line for line in up.lines if " error: " in line or "Traceback" in line], up.lines
    logged = [json.loads(line) for line in (tmp_path / "data" / "logs" / "mldiag.log").read_text().splitlines()]
    assert not [record for record in logged if record["severity"] == "ERROR" or "exception" in record]
    assert up.process.returncode == 0


def _served_once(data: Path, env: dict[str, str] | None = None, options: tuple[str, ...] = ()) -> list[str]:
    """What ``mldiag up --no-otlp [options]`` printed from its start until it was stopped."""
    up = UpProcess.start(data, env=env, options=("--no-otlp", *options))
    try:
        up.wait_for("Stop with Ctrl-C")
    finally:
        up.stop()
    assert up.process.returncode == 0
    return up.lines


def test_every_interface_runs_open_only_when_asked_and_then_says_so(tmp_path):
    insecure = _served_once(tmp_path / "open", options=("--host", "0.0.0.0", "--insecure"))
    warned = [line for line in insecure if "warning: listening on 0.0.0.0 port" in line]
    assert len(warned) == 1 and "with no MLDIAG_API_TOKEN lets anyone who reaches it change runs" in warned[0]
    with_token = _served_once(tmp_path / "token", {"MLDIAG_API_TOKEN": TOKEN}, ("--host", "0.0.0.0"))
    assert not [line for line in with_token if "warning:" in line], with_token


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_data_directory_and_its_files_are_the_owners_only(tmp_path):
    data = tmp_path / "data"
    previous = os.umask(0o022)
    try:
        assert not [line for line in _served_once(data) if "warning:" in line]
        made = {path: _mode(path) for path in
                (data, data / "mldiag.sqlite3", data / "logs", data / "logs" / "mldiag.log")}
        assert made == {data: 0o700, data / "mldiag.sqlite3": 0o600, data / "logs": 0o700,
                        data / "logs" / "mldiag.log": 0o600}
        for path in made:  # a data directory from before, as the umask left it
            path.chmod(0o755 if path.is_dir() else 0o644)
        warned = [line for line in _served_once(data) if "warning:" in line]
    finally:
        os.umask(previous)
    assert len(warned) == 1 and "the data directory was open to other users" in warned[0], warned
    assert f"{data} (was 0755)" in warned[0] and f"{data / 'mldiag.sqlite3'} (was 0644)" in warned[0]
    assert {path: _mode(path) for path in made} == made


def _answered_within(url: str, seconds: float) -> float:
    """How long ``GET url`` took to be answered 200 (it fails past ``seconds``)."""
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=seconds) as answer:
        assert answer.status == 200
    return time.monotonic() - started


def test_a_thousand_idle_connections_do_not_keep_a_new_client_waiting(tmp_path):
    up = UpProcess.start(tmp_path / "data", options=("--no-otlp",))
    held: list[socket.socket] = []
    try:
        url = up.wait_for("mldiag control plane at ").split(" at ", 1)[1].split()[0]
        up.wait_for("Stop with Ctrl-C")
        address = urlsplit(url)
        runs = f"{url.rstrip('/')}/v1alpha/projects/local-project/locations/local/machineLearningRuns"
        for index in range(CONNECTION_LIMIT):  # no credential, no byte sent; half of them done with a request
            held.append(socket.create_connection((address.hostname, address.port), timeout=30))
            if index % 2:
                held[-1].sendall(b"GET /v1alpha/projects/local-project/locations/local/machineLearningRuns "
                                 b"HTTP/1.1\r\nHost: x\r\n\r\n")
                held[-1].recv(65536)
        time.sleep(2)
        seconds = [_answered_within(runs, 8.0) for _ in range(3)]
    finally:
        for connection in held:
            connection.close()
        up.stop()
    assert max(seconds) < 8.0, seconds
