"""The node agent's local door for the official SDK: ``DIAGON_BASE_URL=http://127.0.0.1:<port>``.

The SDK's self-hosted client sends no credentials, and a control plane behind
Cloud Run IAM (or a token) refuses such calls. The agent already holds
credentials (an ID token for the control plane's audience in the cloud, the
API token when self-hosted), so it listens on 127.0.0.1 and forwards the SDK's
calls with them. Only the SDK's routes pass (:data:`ROUTES`); bodies are
bounded, every call has a timeout, the ``Host`` must be this loopback address
(a web page that rebinds a name to 127.0.0.1 gets nothing), and a refusal by
the control plane is logged in one line and handed back to the SDK as it came.
"""

from __future__ import annotations

import json
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import structlog

from mldiag.client.api import ApiClient, ApiError

LOCALHOST = "127.0.0.1"
MAX_BODY_BYTES = 64 * 1024  # the SDK's bodies are a few hundred bytes
READ_TIMEOUT_S = 10.0  # a client that stops sending mid-request frees its thread
SHUTDOWN_POLL_S = 0.05  # how soon stop() is answered (the standard library waits up to 0.5 s)
ROUTES = (
    ("PATCH", re.compile(r"/v1/machineLearningRuns(/[A-Za-z0-9][A-Za-z0-9._-]{0,127})?")),  # a run id
    ("GET", re.compile(r"/v1/agent-info")),
)
_FORWARDED_HEADERS = ("Content-Type",)

log = structlog.get_logger(__name__)


def allowed(method: str, path: str) -> bool:
    return any(method == allowed_method and pattern.fullmatch(path) for allowed_method, pattern in ROUTES)


class SdkForwarder:
    """Serves the SDK's routes on ``127.0.0.1:port`` (0: a free port), forwarded through ``client``."""

    def __init__(self, client: ApiClient, port: int = 0):
        self.client = client
        self.server = ThreadingHTTPServer((LOCALHOST, port), _handler(self))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S},
                                       name="sdk-forwarder", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{LOCALHOST}:{self.port}"

    def start(self) -> SdkForwarder:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(forwarder: SdkForwarder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = READ_TIMEOUT_S

        def do_GET(self) -> None:
            self._forward()

        def do_PATCH(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def do_PUT(self) -> None:
            self._forward()

        def do_DELETE(self) -> None:
            self._forward()

        def _forward(self) -> None:
            target = urlsplit(self.path)
            if self.headers.get("Host", "") not in (f"{LOCALHOST}:{forwarder.port}", f"localhost:{forwarder.port}"):
                return self._refuse(HTTPStatus.FORBIDDEN, "PERMISSION_DENIED", "the Host is not this agent's")
            if not allowed(self.command, target.path):
                return self._refuse(HTTPStatus.NOT_FOUND, "NOT_FOUND",
                                    f"the node agent forwards the SDK's routes only, not {self.command} {target.path}")
            body = self._body()
            if body is None:
                return None
            try:
                response = forwarder.client.send(
                    self.command, target.path + (f"?{target.query}" if target.query else ""), data=body or None,
                    headers={name: self.headers[name] for name in _FORWARDED_HEADERS if name in self.headers})
            except ApiError as error:
                log.warning("SDK call not forwarded: the control plane cannot be reached", path=target.path,
                            error=str(error))
                return self._refuse(HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE", str(error))
            except Exception as error:  # noqa: BLE001 - e.g. no ID token: the SDK gets a 503, the log one line
                log.warning("SDK call not forwarded: the agent has no credentials", path=target.path,
                            error=f"{type(error).__name__}: {error}")
                return self._refuse(HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE",
                                    f"the node agent could not authenticate: {type(error).__name__}")
            if response.status_code >= 400:
                log.warning("the control plane refused an SDK call", method=self.command, path=target.path,
                            status=response.status_code, reason=_message(response.content))
            self._send(response.status_code, response.content, response.headers.get("Content-Type", ""))
            return None

        def _body(self) -> bytes | None:
            if self.headers.get("Transfer-Encoding"):
                self._refuse(HTTPStatus.LENGTH_REQUIRED, "INVALID_ARGUMENT", "send a Content-Length, not chunks")
                return None
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY_BYTES:
                self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "INVALID_ARGUMENT",
                             f"the body must be 0 to {MAX_BODY_BYTES} bytes")
                return None
            return self.rfile.read(length)

        def _refuse(self, status: HTTPStatus, code: str, message: str) -> None:
            self.close_connection = True
            error = {"error": {"code": status.value, "message": message, "status": code}}
            self._send(status.value, json.dumps(error).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # the refusals are logged above; successful calls need no line each

    return Handler


def _message(content: bytes) -> str:
    try:
        return str(json.loads(content)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return content[:200].decode(errors="replace")
