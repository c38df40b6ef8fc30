"""Who may call the control plane, and as whom.

Three modes, chosen by the settings:

* **cloud** (``MLDIAG_AUTH_AUDIENCE`` set): every call carries a Google ID token
  (the function also sits behind IAM's invoker role); its signature, issuer and
  audience are verified with ``google-auth``, against Google's certificates,
  cached for as long as Google says they stay valid. The audience is the one
  clients mint for, or one of ``MLDIAG_AUTH_OTHER_AUDIENCES``: Terraform lists
  there the gcloud CLI's OAuth client when Cloud Run checks the invoker role in
  front, so a person's own ``gcloud auth print-identity-token`` passes here as it
  passes Cloud Run.
* **token** (``MLDIAG_API_TOKEN`` set): every mutating call carries
  ``Authorization: Bearer <token>``, compared in constant time; reads of
  resources are open, reads of the operator routes (event archive, dead
  letters, status: raw payloads, errors, where the data lives) are not.
* **open** (neither): the embedded default on 127.0.0.1, nothing is checked.

The official SDK's self-hosted client sends no ``Authorization`` header; in
the cloud and token modes it calls through the capability URL
``/sdk/<secret>/v1/...`` (:mod:`mldiag.entrypoints.http.capability`), which opens the SDK's
``/v1`` routes and nothing else. A call without credentials gets 401, one with
credentials that do not pass gets 403; neither reaches a service.

The alert webhooks (:mod:`mldiag.entrypoints.http.alerts`) take neither: monitoring systems
send a shared secret, ``MLDIAG_ALERT_TOKEN``, as ``Authorization: Bearer
<token>`` or as the password of basic auth (any user name), the two ways
Alertmanager's ``http_config``, Grafana's contact points and Cloud
Monitoring's webhook channels can. Without that setting they are open in the
open mode and closed in the others.

Every call that passes is made by a :class:`Caller`: the SDK's routes let a
caller change only the runs it registered (:mod:`mldiag.services.resources.self_hosted`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
from typing import Any

from mldiag.config import Settings
from mldiag.domain.callers import ALERT_SENDER, ANONYMOUS, API_TOKEN, OPEN, Caller, google_account
from mldiag.domain.errors import PermissionDenied, Unauthenticated

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Guard:
    def __init__(self, settings: Settings):
        self.audience = settings.auth_audience
        self.accepted_audiences = list(settings.accepted_audiences)
        self.token = settings.api_token
        self.alert_token = settings.alert_token

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

    def check_alert_sender(self, authorization: str) -> Caller:
        """A monitoring system posting an alert: its bearer token or basic-auth password must be the alert token."""
        if not self.alert_token:
            if self.mode == "open":
                return OPEN
            raise Unauthenticated("the alert webhooks are closed: set MLDIAG_ALERT_TOKEN on the control plane")
        credential = _bearer(authorization) or _basic_password(authorization)
        if not credential:
            raise Unauthenticated("this call needs 'Authorization: Bearer <alert token>' or basic auth with the "
                                  "alert token as password")
        if not hmac.compare_digest(credential.encode(), self.alert_token.encode()):
            raise Unauthenticated("the alert token is not valid for this control plane")
        return ALERT_SENDER

    def _verify_id_token(self, token: str) -> dict[str, Any]:
        from google.auth import exceptions
        from google.oauth2 import id_token

        try:
            return id_token.verify_oauth2_token(token, _transport(), audience=self.accepted_audiences)
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


def _basic_password(authorization: str) -> str:
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return ""
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""
    return decoded.partition(":")[2]
