"""Who may call the control plane, and as whom.

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

The official SDK's self-hosted client sends no ``Authorization`` header; in
the cloud and token modes it calls through the capability URL
``/sdk/<secret>/v1/...`` (:mod:`mldiag.api.capability`), which opens the SDK's
``/v1`` routes and nothing else. A call without credentials gets 401, one with
credentials that do not pass gets 403; neither reaches a service.

Every call that passes is made by a :class:`Caller`: the SDK's routes let a
caller change only the runs it registered (:mod:`mldiag.services.self_hosted`).
"""

from __future__ import annotations

import functools
import hmac
from typing import Any

from mldiag.config import Settings
from mldiag.domain.callers import ANONYMOUS, API_TOKEN, OPEN, Caller, google_account
from mldiag.domain.errors import PermissionDenied, Unauthenticated

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Guard:
    def __init__(self, settings: Settings):
        self.audience = settings.auth_audience
        self.token = settings.api_token

    @property
    def mode(self) -> str:
        return "cloud" if self.audience else "token" if self.token else "open"

    def check(self, method: str, authorization: str, *, operator_route: bool = False) -> Caller:
        """The caller; :class:`Unauthenticated` / :class:`PermissionDenied` unless the call may proceed."""
        if self.mode == "open":
            return OPEN
        credential = _bearer(authorization)
        if not credential:
            if self.mode == "cloud" or operator_route or method not in READ_METHODS:
                raise Unauthenticated("this call needs 'Authorization: Bearer <token>' "
                                      "(the official SDK: DIAGON_BASE_URL=<control plane>/sdk/<secret>)")
            return ANONYMOUS
        if self.mode == "cloud":
            claims = self._verify_id_token(credential)
            return google_account(claims.get("email") or claims.get("sub", ""))
        if not hmac.compare_digest(credential.encode(), self.token.encode()):
            raise PermissionDenied("the bearer token is not valid for this control plane")
        return API_TOKEN

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
