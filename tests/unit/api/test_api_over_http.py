"""The API behind the real WSGI server ``mldiag up`` uses: what only a real connection can send."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator

import pytest
from cheroot import wsgi

from api_suite import RUNS
from mldiag.entrypoints.http.app import create_app
from mldiag.entrypoints.http.rest import MAX_BODY_BYTES


@pytest.fixture
def server(services) -> Iterator[wsgi.Server]:
    server = wsgi.Server(("127.0.0.1", 0), create_app(services), numthreads=2)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield server
    server.stop()
    thread.join(timeout=10)


def _post_chunked(server: wsgi.Server, path: str, body: bytes, headers: dict[str, str] | None = None,
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
