"""Signed, expiring links to one stored object, for the embedded default.

In the cloud a share link is a Cloud Storage V4 signed URL. Without Cloud
Storage the control plane serves the object itself at ``/share/<token>``: the
token names the object and an expiry, with an HMAC-SHA256 of both under a key
only the server holds (``MLDIAG_SHARE_KEY``, or one generated once and kept in
the data dir, readable by its owner only). A changed byte makes the token
worthless; an expired one is refused as gone.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from mldiag.domain.errors import LinkExpired, PermissionDenied
from mldiag.domain.clock import utcnow

KEY_FILE = "share.key"


def load_key(data_dir: Path, configured: str = "", file: str = KEY_FILE) -> bytes:
    """The configured key, else the one kept in ``data_dir/file``, readable by its owner only (created on first
    use)."""
    if configured:
        return configured.encode()
    path = Path(data_dir) / file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{file}.{os.getpid()}")
        descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32))
        try:
            os.link(staged, path)  # atomic, and the first writer wins a race
        except FileExistsError:
            pass
        finally:
            staged.unlink()
    return path.read_text().strip().encode()


def _encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class LinkSigner:
    """Issues and checks share tokens for object URIs."""

    def __init__(self, key: bytes, now: Callable[[], datetime] = utcnow):
        if len(key) < 16:
            raise ValueError("a share key needs at least 16 bytes")
        self._key = key
        self._now = now

    def _mac(self, payload: str) -> str:
        return _encode(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def token(self, uri: str, expires: datetime) -> str:
        payload = _encode(json.dumps({"uri": uri, "exp": int(expires.timestamp())}, separators=(",", ":")).encode())
        return f"{payload}.{self._mac(payload)}"

    def verify(self, token: str) -> str:
        """The URI the token grants; :class:`PermissionDenied` if forged, :class:`LinkExpired` if old."""
        payload, _, mac = token.partition(".")
        if not payload or not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            raise PermissionDenied("this share link is not valid")
        try:
            claims = json.loads(_decode(payload))
            uri, expires = str(claims["uri"]), int(claims["exp"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise PermissionDenied("this share link is not valid") from None
        if self._now() >= datetime.fromtimestamp(expires, timezone.utc):
            raise LinkExpired("this share link has expired; ask for a new one")
        return uri
