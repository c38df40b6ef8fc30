"""How a client proves who calls: a bearer token, or a Google ID token when the control plane sits behind IAM.

With an audience (``MLDIAG_AUTH_AUDIENCE``, the control plane's URL on Cloud
Run), every call carries a Google ID token for it, fetched with the machine's
credentials (the node's service account) and refreshed as it ages; otherwise
the bearer token, if any.
"""

from __future__ import annotations

import threading
import time

from mldiag.client.api import ApiClient

ID_TOKEN_REFRESH_S = 30 * 60  # Google ID tokens live an hour


class IdTokenClient(ApiClient):
    """An :class:`ApiClient` that authenticates with a Google ID token for ``audience``."""

    def __init__(self, api_url: str, audience: str, *, timeout: float = 30.0):
        super().__init__(api_url, timeout=timeout)
        self.audience, self.fetched_at = audience, float("-inf")
        self.lock = threading.Lock()

    def authorize(self) -> None:
        with self.lock:
            if time.monotonic() - self.fetched_at > ID_TOKEN_REFRESH_S:
                import google.auth.transport.requests
                from google.oauth2 import id_token

                token = id_token.fetch_id_token(google.auth.transport.requests.Request(), self.audience)
                self.session.headers["Authorization"] = f"Bearer {token}"
                self.fetched_at = time.monotonic()


def authenticated_client(api_url: str, *, token: str = "", audience: str = "", timeout: float = 30.0) -> ApiClient:
    """A client for ``api_url``: with a Google ID token for ``audience`` when one is given, else ``token``."""
    if audience:
        return IdTokenClient(api_url, audience, timeout=timeout)
    return ApiClient(api_url, token, timeout=timeout)
