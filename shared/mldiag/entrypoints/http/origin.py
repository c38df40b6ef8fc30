"""Requests a browser can be made to send to the control plane, and how they are refused.

A web page of another site can make a user's browser send two kinds of request
to a control plane it can reach (``mldiag up`` on 127.0.0.1, say):

* a *simple* cross-site request, sent without asking first: a ``POST`` of a
  form (even an empty one), of ``text/plain`` or of nothing at all. The API
  takes JSON only, so a mutation that declares any other ``Content-Type`` is
  refused whatever its length, one with a body must declare JSON, and one a
  browser marks as started by another site (``Sec-Fetch-Site``, or an
  ``Origin`` that is not this server: browsers send one with every ``POST``)
  is refused. Anything else needs a CORS preflight, and the API sends no CORS
  headers. A mutation with neither body nor type nor foreign origin is what
  ``curl -X POST`` sends; no page can send it without an ``Origin``.
* a request to a name the attacker controls that resolves to the control
  plane's address (DNS rebinding): the browser then treats the control plane as
  the attacker's own site. Such a request carries the attacker's name in
  ``Host``, so a server that knows its own names (:class:`HostNames`) refuses
  every other one.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import Request
from werkzeug.exceptions import RequestEntityTooLarge, UnsupportedMediaType

from mldiag.domain.errors import InvalidArgument, PermissionDenied
from mldiag.entrypoints.http.rest import MAX_BODY_BYTES

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_ONLY = frozenset({"application/json"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def refuse_browser_forgery(request: Request, body_types: frozenset[str] = JSON_ONLY) -> None:
    """Refuse a mutation of the API that a web page could have made a browser send.

    ``body_types``: what the route takes; none a form can send, so a page cannot post one without a preflight.
    """
    if request.headers.get("Sec-Fetch-Site", "") in ("cross-site", "same-site"):
        raise PermissionDenied("requests started by another site are refused")
    origin = request.headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc.lower() != request.host.lower():
        raise PermissionDenied(f"requests started by another site ({origin}) are refused")
    if request.content_length and request.content_length > MAX_BODY_BYTES:
        raise RequestEntityTooLarge()
    has_body = bool(request.content_length) or "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    if (request.mimetype or has_body) and request.mimetype not in body_types:
        raise UnsupportedMediaType(f"this route takes {' or '.join(sorted(body_types))} bodies, not "
                                   f"{request.mimetype or 'untyped'} ones (even empty)")


@dataclass(frozen=True)
class HostNames:
    """The ``Host`` values a server answers to: ``names`` on ``port`` and, with ``any_address``, any IP address."""

    port: int
    names: frozenset[str]
    any_address: bool = False

    @classmethod
    def serving(cls, listen_host: str, port: int) -> HostNames:
        """A server on ``listen_host:port``: its loopback names and the name it was told to listen on; on
        every interface also the machine's own names and any IP address (a page rebinding its own name to
        the server can only send that name, never an address)."""
        names = {"127.0.0.1", "localhost", "::1", listen_host.lower()} - set(_WILDCARDS)
        wildcard = listen_host in _WILDCARDS
        if wildcard:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        return cls(port, frozenset(names), any_address=wildcard)

    def check(self, host_header: str) -> None:
        """Raise :class:`InvalidArgument` unless ``host_header`` names this server."""
        parts = urlsplit(f"//{host_header}")
        try:
            name, port = (parts.hostname or "").rstrip("."), parts.port or 80
        except ValueError:
            name, port = "", 0
        if port == self.port and (name in self.names or (self.any_address and _is_address(name))):
            return
        shown = ", ".join(f"[{n}]:{self.port}" if ":" in n else f"{n}:{self.port}" for n in sorted(self.names))
        raise InvalidArgument(f"this server answers to {shown} only, not to Host {host_header!r} (a page of "
                              "another site reaching it through its own DNS name is refused)", field="Host")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
