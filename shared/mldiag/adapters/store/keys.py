"""Document keys as Cloud Firestore takes them, checked alike by every document store.

A key is one segment of a document path: not empty, no ``/``, not ``.`` or
``..``, not ``__…__`` (reserved), at most 1,500 bytes of UTF-8. The embedded
store refuses what Firestore would, so that a key that works on one machine
works in the cloud.
"""

from __future__ import annotations

from mldiag.domain.errors import InvalidArgument

MAX_KEY_BYTES = 1500


def check_key(collection: str, key: str) -> str:
    """``key`` if Firestore takes it as a document id; :class:`InvalidArgument` naming why not."""
    problem = ""
    if not key:
        problem = "is empty"
    elif "/" in key:
        problem = "has a '/'"
    elif key in (".", ".."):
        problem = "is '.' or '..'"
    elif key.startswith("__") and key.endswith("__"):
        problem = "is reserved (__…__)"
    elif len(key.encode()) > MAX_KEY_BYTES:
        problem = f"is over {MAX_KEY_BYTES} bytes"
    if problem:
        raise InvalidArgument(f"document key {key[:80]!r} in {collection} {problem}")
    return key
