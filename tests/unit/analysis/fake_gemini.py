"""A local stand-in for Vertex AI's ``generateContent`` REST endpoint, replaying scripted answers.

``google-genai`` reaches it through ``HttpOptions(base_url=...)`` and sends
exactly what it would send to Google (``POST /v1beta1/projects/P/locations/L/
publishers/google/models/M:generateContent`` with a bearer token); the server
keeps every request for the test to inspect. The answers come from
``tests/fixtures/gemini/*.json``: response bodies in the REST shape Vertex AI
returns (``candidates[].content.parts[]`` with ``functionCall`` or ``text``,
``usageMetadata``, ``modelVersion``), each optionally with an HTTP status or a
delay.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parents[2] / "fixtures" / "gemini"


@dataclass
class Reply:
    body: dict[str, Any]
    status: int = 200
    delay_s: float = 0.0


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def text(self) -> str:
        """Everything the client sent as text: system instruction, messages, function responses."""
        return json.dumps(self.body, ensure_ascii=False)


def script(name: str) -> list[Reply]:
    """A recorded conversation: ``tests/fixtures/gemini/<name>.json``, a list of replies."""
    entries = json.loads((SCRIPTS / f"{name}.json").read_text())
    return [Reply(entry["response"], entry.get("status", 200), entry.get("delay_s", 0.0)) for entry in entries]


def error_reply(status: int, message: str) -> Reply:
    """The error body Google's APIs return."""
    names = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 403: "PERMISSION_DENIED"}
    return Reply({"error": {"code": status, "message": message, "status": names.get(status, "UNKNOWN")}}, status)


@dataclass
class FakeGemini:
    replies: list[Reply]
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                fake.requests.append(Request(self.path, dict(self.headers), body))
                reply = fake.replies.pop(0) if fake.replies else error_reply(500, "the script has no more replies")
                time.sleep(reply.delay_s)
                payload = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> FakeGemini:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def generate_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith(":generateContent")]
