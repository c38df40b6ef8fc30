"""Who may act in the console, and proof that a form was posted by the console itself.

Credentials follow the API's modes (:mod:`mldiag.entrypoints.http.auth`):

* **open**: anyone who reaches the server may read and act (the embedded
  default on 127.0.0.1).
* **token** (``MLDIAG_API_TOKEN``): pages are readable by anyone, as the API's
  reads are; actions need a sign-in. The sign-in form takes the token once and
  sets an HttpOnly, SameSite=Strict cookie holding an expiry and an HMAC of it
  keyed by the token (never the token itself), so it stops working when the
  token is rotated. ``Authorization: Bearer <token>`` works too.
* **cloud** (``MLDIAG_AUTH_AUDIENCE``): every request carries a Google ID
  token, as for the API; a browser gets there through a proxy that adds it
  (``gcloud run services proxy``).

Wrong sign-ins are throttled per client address (:class:`SignInThrottle`):
after :data:`MAX_FAILED_SIGN_INS` in :data:`SIGN_IN_WINDOW_S`, that address's
sign-ins are refused, without looking at the token, until the oldest failure
leaves the window, so guessing the token takes centuries.

Every form post is checked against cross-site request forgery twice: the form
carries the value of a random, HttpOnly, SameSite=Strict cookie that a page of
another site can neither read nor set (double submit), and a browser's
``Sec-Fetch-Site`` must say the post came from this origin.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from mldiag.domain.errors import PermissionDenied, ResourceExhausted, Unauthenticated
from mldiag.entrypoints.http.auth import Guard

SIGN_IN_COOKIE = "mldiag_console"
CSRF_COOKIE = "mldiag_csrf"
CSRF_FIELD = "csrf_token"
SIGN_IN_TTL_S = 12 * 3600
# A report is untrusted content: no scripts, no same-origin access to the console, inline styles and images only.
# The console's report view and share links both serve reports under it.
REPORT_POLICY = ("sandbox allow-popups allow-popups-to-escape-sandbox; default-src 'none'; "
                 "style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; base-uri 'none'; "
                 "form-action 'none'")
MAX_FAILED_SIGN_INS = 10
SIGN_IN_WINDOW_S = 60.0
MAX_THROTTLED_ADDRESSES = 10_000
_SAME_ORIGIN_FETCHES = frozenset({"", "same-origin", "none"})


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def check_form_origin(cookie: str, submitted: str, fetch_site: str) -> None:
    """Refuse a post that the console's own page did not send."""
    if fetch_site not in _SAME_ORIGIN_FETCHES:
        raise PermissionDenied(f"a form posted from another site ({fetch_site}) is refused")
    if not cookie or not hmac.compare_digest(cookie.encode(), submitted.encode()):
        raise PermissionDenied("the form is out of date or was not sent by this console; reload the page and "
                               "try again")


class SignInThrottle:
    """Recent failed sign-ins per client address, and the refusal of more once there are too many."""

    def __init__(self, now: Callable[[], float] = time.monotonic):
        self._now = now
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, address: str) -> None:
        """Raise :class:`ResourceExhausted` while ``address`` has used up its failures."""
        with self._lock:
            recent = self._recent(address)
            if len(recent) < MAX_FAILED_SIGN_INS:
                return
            wait = math.ceil(recent[0] + SIGN_IN_WINDOW_S - self._now())
        raise ResourceExhausted(f"too many wrong sign-ins from {address}; try again in {wait}s",
                                retry_after_s=max(wait, 1))

    def failed(self, address: str) -> None:
        with self._lock:
            self._recent(address).append(self._now())
            self._failures.move_to_end(address)
            while len(self._failures) > MAX_THROTTLED_ADDRESSES:
                self._failures.popitem(last=False)

    def _recent(self, address: str) -> deque[float]:
        recent = self._failures.setdefault(address, deque())
        while recent and recent[0] <= self._now() - SIGN_IN_WINDOW_S:
            recent.popleft()
        return recent


class ConsoleAuth:
    """The API's :class:`Guard`, plus the sign-in cookie of token mode."""

    def __init__(self, guard: Guard, now=time.time):
        self.guard = guard
        self._now = now

    @property
    def mode(self) -> str:
        return self.guard.mode

    @property
    def needs_sign_in(self) -> bool:
        return self.mode == "token"

    def check_read(self, authorization: str) -> None:
        """Reads are open unless the API's are not (cloud mode)."""
        self.guard.check("GET", authorization)

    def may_act(self, authorization: str, cookie: str) -> bool:
        try:
            self.check_action(authorization, cookie)
        except (Unauthenticated, PermissionDenied):
            return False
        return True

    def check_action(self, authorization: str, cookie: str) -> None:
        """Token mode: the sign-in cookie or the bearer token. Open and cloud mode: what reads need."""
        if self.mode != "token" or self._valid_cookie(cookie):
            return  # cloud mode: every request's ID token was verified before it reached a route
        if not authorization:
            raise Unauthenticated("sign in with the control plane's API token to act")
        self.guard.check("POST", authorization)

    def sign_in(self, token: str) -> tuple[str, int]:
        """The cookie value for a correct ``token`` and its lifetime in seconds."""
        if self.mode != "token":
            raise PermissionDenied(f"this control plane runs in {self.mode} mode: there is nothing to sign in to")
        if not hmac.compare_digest(token.strip().encode(), self.guard.token.encode()):
            raise PermissionDenied("that is not this control plane's API token")
        expires = int(self._now()) + SIGN_IN_TTL_S
        return f"{expires}.{self._mac(expires)}", SIGN_IN_TTL_S

    def _mac(self, expires: int) -> str:
        return hmac.new(self.guard.token.encode(), f"mldiag console until {expires}".encode(),
                        hashlib.sha256).hexdigest()

    def _valid_cookie(self, cookie: str) -> bool:
        expires, _, mac = cookie.partition(".")
        if not expires.isdigit() or int(expires) <= self._now():
            return False
        return hmac.compare_digest(mac.encode(), self._mac(int(expires)).encode())
