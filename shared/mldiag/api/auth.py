"""Who may call the control plane.

Three modes, chosen by the settings:

* **cloud** (``MLDIAG_AUTH_AUDIENCE`` set): every call carries a Google ID token
  (the function also sits behind IAM's invoker role); its signature, issuer and
  audience are verified with ``google-auth``, against Google's certificates,
  cached for as long as Google says they stay valid.
* **token** (``MLDIAG_API_TOKEN`` set): every mutating call carries
  ``Authorization: Bearer <token>``, compared in constant time; reads of
  resources are open, reads of the operator routes (event archive, dead
  letters, status: raw payloads, errors, where the data lives) are not.
* **open** (neither): the embedded default on 127.0.0.1, nothing is checked.

The official SDK's self-hosted client sends no ``Authorization`` header, so the
``/v1/...`` routes it uses take a token only if one is sent, unless
``MLDIAG_SDK_ROUTES_REQUIRE_TOKEN`` is true; restrict them by network (bind to
127.0.0.1, a private VPC, an ingress allow-list) when they are exposed.
A call without credentials gets 401, one with credentials that do not pass
gets 403; neither reaches a service.
"""

from __future__ import annotations

import functools
import hmac
from typing import Any

from mldiag.config import Settings
from mldiag.domain.errors import PermissionDenied, Unauthenticated

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Guard:
    def __init__(self, settings: Settings):
        self.audience = settings.auth_audience
        self.token = settings.api_token
        self.sdk_routes_require_token = settings.sdk_routes_require_token

    @property
    def mode(self) -> str:
        return "cloud" if self.audience else "token" if self.token else "open"

    def check(self, method: str, authorization: str, *, sdk_route: bool = False,
              operator_route: bool = False) -> None:
        """Raise :class:`Unauthenticated` / :class:`PermissionDenied` unless the call may proceed."""
        if self.mode == "open":
            return
        credential = _bearer(authorization)
        if sdk_route:
            required = self.sdk_routes_require_token
        else:
            required = self.mode == "cloud" or operator_route or method not in READ_METHODS
        if not credential:
            if required:
                raise Unauthenticated("this call needs 'Authorization: Bearer <token>'")
            return
        if self.mode == "cloud":
            self._verify_id_token(credential)
        elif not hmac.compare_digest(credential.encode(), self.token.encode()):
            raise PermissionDenied("the bearer token is not valid for this control plane")

    def _verify_id_token(self, token: str) -> dict[str, Any]:
        from google.auth import exceptions
        from google.oauth2 import id_token

        try:
            return id_token.verify_oauth2_token(token, _transport(), audience=self.audience)
        except exceptions.TransportError:
            raise  # Google's certificates could not be fetched: our failure, not the caller's
        except (ValueError, exceptions.GoogleAuthError) as error:
            raise PermissionDenied(f"the ID token was refused: {error}") from None


@functools.cache
def _transport() -> Any:
    """google-auth's HTTP transport, keeping Google's signing certificates as long as their
    ``Cache-Control`` allows (hours), rather than downloading them for every call."""
    import cachecontrol
    import requests
    from google.auth.transport import requests as google_requests

    return google_requests.Request(session=cachecontrol.CacheControl(requests.Session()))


def _bearer(authorization: str) -> str:
    scheme, _, credential = authorization.partition(" ")
    return credential.strip() if scheme.lower() == "bearer" else ""
