"""Who made a call, as the services see it (the API's guard decides; :mod:`mldiag.entrypoints.http.auth`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    """``principal`` names the credential a call came with; an ``admin`` may change any run."""

    principal: str
    admin: bool = False


OPEN = Caller("", admin=True)  # the open mode: one machine, one user; runs it registers stay unclaimed
API_TOKEN = Caller("api-token", admin=True)
SDK_CAPABILITY = Caller("sdk-capability")
ALERT_SENDER = Caller("alert-token")  # a monitoring system posting to the alert webhooks
ANONYMOUS = Caller("anonymous")  # an uncredentialed read in token mode


def google_account(email_or_subject: str) -> Caller:
    """The holder of a verified Google ID token."""
    return Caller(f"google:{email_or_subject}")
