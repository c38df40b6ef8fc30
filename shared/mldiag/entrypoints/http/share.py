"""``/share/<token>``: the embedded default's signed, expiring links to one stored object.

The token is the credential (no other check runs on this route); it is
verified before anything is read, and the log shows its first characters only. Responses are private and uncacheable, ask
the browser not to leak the URL as a referrer, and carry the sandboxing policy
of the console's report view: a report holds strings from the profile and must
not run as the control plane's origin.
"""

from __future__ import annotations

import functools
import mimetypes

from flask import Blueprint, Response

from mldiag.domain.errors import NotFound
from mldiag.domain.share_links import LinkSigner, load_key
from mldiag.entrypoints.console.security import REPORT_POLICY
from mldiag.entrypoints.http.rest import services

blueprint = Blueprint("share", __name__, url_prefix="/share")
MAX_SHARED_BYTES = 64 * 1024 * 1024
LOGGED_TOKEN_CHARACTERS = 12  # enough to tell links apart in the log, far from the signature's 43


def logged_path(path: str) -> str:
    """``path`` as the log may show it: a share link's token, a credential, cut to its first characters."""
    prefix = f"{blueprint.url_prefix}/"
    if not path.startswith(prefix):
        return path
    return f"{prefix}{path[len(prefix):][:LOGGED_TOKEN_CHARACTERS]}..."


@functools.cache
def _signer(data_dir: str, configured_key: str) -> LinkSigner:
    return LinkSigner(load_key(data_dir, configured_key))


@blueprint.get("/<token>")
def open_link(token: str) -> Response:
    settings = services().settings
    if settings.backend != "embedded":
        raise NotFound("share links are Cloud Storage signed URLs in this deployment")
    uri = _signer(str(settings.data_dir), settings.share_key).verify(token)
    data = services().blobs.read_bytes(uri, max_bytes=MAX_SHARED_BYTES)
    response = Response(data, mimetype=mimetypes.guess_type(uri)[0] or "application/octet-stream")
    response.headers["Cache-Control"] = "private, no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = REPORT_POLICY
    return response
