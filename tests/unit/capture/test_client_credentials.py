"""How the node agent's client authenticates: a Google ID token for the audience, refreshed as it ages, else the
bearer token."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from google.oauth2 import id_token

from mldiag.client.credentials import ID_TOKEN_REFRESH_S, IdTokenClient, authenticated_client

AUDIENCE = "https://control-plane.example"


@pytest.fixture
def echo_url() -> Iterator[str]:
    """A server that answers every GET with the Authorization header it got."""

    class Echo(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"authorization": self.headers.get("Authorization", "")}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def fetched(monkeypatch) -> list[str]:
    """The audiences ID tokens were fetched for; the n-th token fetched is ``id-token-n``."""
    audiences: list[str] = []

    def fetch_id_token(request: object, audience: str) -> str:
        audiences.append(audience)
        return f"id-token-{len(audiences)}"

    monkeypatch.setattr(id_token, "fetch_id_token", fetch_id_token)
    return audiences


@pytest.mark.slow
def test_with_an_audience_calls_carry_an_id_token_fetched_once_and_refreshed_as_it_ages(echo_url, fetched):
    client = authenticated_client(echo_url, token="ignored-bearer", audience=AUDIENCE)
    assert isinstance(client, IdTokenClient)
    assert client.call("GET", "/a")["authorization"] == "Bearer id-token-1"
    assert client.call("GET", "/b")["authorization"] == "Bearer id-token-1"
    assert fetched == [AUDIENCE]

    client.fetched_at -= ID_TOKEN_REFRESH_S + 1  # the token has aged past its refresh
    assert client.call("GET", "/c")["authorization"] == "Bearer id-token-2"
    assert fetched == [AUDIENCE, AUDIENCE]


@pytest.mark.slow
def test_without_an_audience_calls_carry_the_bearer_token_or_nothing(echo_url, fetched):
    assert authenticated_client(echo_url, token="s3cret").call("GET", "/")["authorization"] == "Bearer s3cret"
    assert authenticated_client(echo_url).call("GET", "/")["authorization"] == ""
    assert fetched == []
