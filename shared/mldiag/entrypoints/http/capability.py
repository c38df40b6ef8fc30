"""The SDK's capability URL: ``/sdk/<secret>/v1/...`` stands for ``/v1/...`` with the SDK's credential.

The official SDK's self-hosted client sends no ``Authorization`` header but
builds every URL as ``{DIAGON_BASE_URL}/v1/...``, so a base URL of
``https://<host>/sdk/<secret>`` carries a credential without changing the SDK.
This WSGI middleware takes the prefix off before the app sees the request,
compares the secret in constant time, and leaves the outcome in the WSGI
environ (:data:`ENVIRON_KEY`) for the app's guard, which lets a valid
capability reach the ``/v1`` routes and nothing else. The secret is removed
from every field of the environ that carries the URL, so nothing the app logs
can contain it.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from typing import Any

PREFIX = "/sdk/"
ENVIRON_KEY = "mldiag.sdk_capability"
VALID, INVALID = "valid", "invalid"
REDACTED = "/sdk/<secret>"
_URL_FIELDS = ("REQUEST_URI", "RAW_URI")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class CapabilityPrefix:
    """Serve ``/sdk/<secret>/...`` as ``/...``, marked :data:`VALID` or :data:`INVALID` in the environ."""

    def __init__(self, app: WsgiApp, secret: str):
        self.app, self.secret = app, secret.encode()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if self.secret and path.startswith(PREFIX):
            presented, _, rest = path[len(PREFIX):].partition("/")
            environ[ENVIRON_KEY] = VALID if hmac.compare_digest(presented.encode(), self.secret) else INVALID
            environ["PATH_INFO"] = "/" + rest
            for field in _URL_FIELDS:
                if field in environ:
                    environ[field] = REDACTED + "/" + environ[field].partition(PREFIX)[2].partition("/")[2]
        return self.app(environ, start_response)
