"""The API behind the real WSGI server ``mldiag up`` uses: what only a real connection can send."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from api_suite import RUNS
from mldiag.entrypoints.http.app import create_app
from mldiag.entrypoints.http.rest import MAX_BODY_BYTES
from mldiag.local import http_server
from mldiag.local.http_server import HttpServer


@pytest.fixture
def server(services) -> Iterator[HttpServer]:
    server = HttpServer("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve, args=(create_app(services),), daemon=True)
    thread.start()
    yield server
    server.stop()
    thread.join(timeout=10)


def _post_chunked(server: HttpServer, path: str, body: bytes, headers: dict[str, str] | None = None,
                  ) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", server.bind_addr[1], timeout=30)
    chunks = (body[i:i + 65536] for i in range(0, len(body), 65536))
    connection.request("POST", path, body=chunks, headers={"Content-Type": "application/json"} if headers is None
                       else headers, encode_chunked=True)
    response = connection.getresponse()
    payload = json.loads(response.read())
    connection.close()
    return response.status, payload


def _run_body(size: int) -> bytes:
    head, tail = b'{"labels": {"k": "', b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


@pytest.mark.slow
def test_a_chunked_body_over_the_limit_is_refused_not_cut(server, api):
    status, payload = _post_chunked(server, f"{RUNS}?machine_learning_run_id=r1", _run_body(MAX_BODY_BYTES + 1))
    assert status == 413, payload
    assert "byte limit" in payload["error"]["message"]
    assert api.run("r1").status_code == 404


@pytest.mark.slow
def test_a_chunked_body_at_the_limit_is_read_whole(server, api):
    status, payload = _post_chunked(server, f"{RUNS}?machine_learning_run_id=r1", _run_body(MAX_BODY_BYTES))
    assert status == 200, payload
    assert len(api.run("r1").json["labels"]["k"]) == MAX_BODY_BYTES - len(b'{"labels": {"k": ""}}')


@pytest.mark.slow
@pytest.mark.parametrize("headers", [{}, {"Content-Type": "text/plain"}])
def test_a_chunked_body_that_is_not_declared_json_is_refused(server, api, headers):
    status, payload = _post_chunked(server, f"{RUNS}?machine_learning_run_id=r1", b'{"displayName": "x"}', headers)
    assert status == 415, payload
    assert api.run("r1").status_code == 404


def _slow_clients(server: HttpServer, count: int, partial: bytes) -> list[socket.socket]:
    clients = []
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", server.bind_addr[1]), timeout=10)
        client.sendall(partial)
        clients.append(client)
    return clients


def _answers_within(server: HttpServer, seconds: float) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", server.bind_addr[1], timeout=seconds)
    connection.request("GET", RUNS)
    status = connection.getresponse().status
    connection.close()
    return status


@pytest.mark.parametrize("partial", [
    b"GET / HTTP/1.1\r\nHost: x\r\nX-a: 1\r\n",  # a head that never ends (slowloris)
    b"POST " + RUNS.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{",  # a body that never comes
])
def test_a_hundred_slow_clients_leave_the_api_answering(server, partial):
    clients = _slow_clients(server, 100, partial)
    try:
        for _ in range(3):  # the slow clients keep trickling; everyone else is still answered at once
            for client in clients:
                client.sendall(b"X-b: 2\r\n" if partial.startswith(b"GET") else b" ")
            assert _answers_within(server, 2.0) == 200
    finally:
        for client in clients:
            client.close()


def test_a_request_that_takes_too_long_to_arrive_is_dropped(server, monkeypatch):
    monkeypatch.setattr(http_server, "REQUEST_READ_SECONDS", 1.0)
    (client,) = _slow_clients(server, 1, b"GET / HTTP/1.1\r\n")
    client.settimeout(10)
    deadline = time.monotonic() + 10
    closed = False
    while not closed and time.monotonic() < deadline:
        try:
            client.sendall(b"X-a: 1\r\n")
            closed = client.recv(1, socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            time.sleep(0.2)
        except OSError:  # reset by the server
            closed = True
    client.close()
    assert closed, "a request still trickling in after the deadline was not dropped"
