"""Where things are in the bucket: ``gs://bucket/object`` URIs, and the layout of a profiling session.

A session is a folder ``<run>/plugins/profile/<session>/`` holding one
``<host>.xplane.pb`` per host (and, from some frameworks, a
``<host>.trace.json.gz`` beside it); mldiag writes each analysis's report
under ``<session folder>/mldiag/<generation set>/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mldiag.domain.errors import InvalidArgument

PROFILE_MARKER = "/plugins/profile/"
XPLANE_SUFFIX = ".xplane.pb"
SIBLING_SUFFIXES = (".trace.json.gz",)
REPORT_FOLDER = "mldiag"

BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


@dataclass(frozen=True)
class BlobUri:
    bucket: str
    path: str

    def __str__(self) -> str:
        return f"gs://{self.bucket}/{self.path}"


def parse_blob_uri(uri: str, *, allow_empty_path: bool = False) -> BlobUri:
    """Split and validate; refuses anything that could escape a bucket (``..``, ``\\``, NUL)."""
    if not isinstance(uri, str) or not uri.startswith("gs://"):
        raise InvalidArgument(f"{uri!r} is not a gs://bucket/path URI", field="uri")
    bucket, _, path = uri[len("gs://"):].partition("/")
    if not BUCKET_NAME.match(bucket):
        raise InvalidArgument(f"{bucket!r} is not a valid bucket name", field="uri")
    segments = path.split("/")
    if any(segment in (".", "..") for segment in segments) or "\\" in path or "\x00" in path:
        raise InvalidArgument(f"{uri!r} has a path segment that is not allowed", field="uri")
    if not path and not allow_empty_path:
        raise InvalidArgument(f"{uri!r} names a bucket, not an object", field="uri")
    if len(path.encode()) > 1024:
        raise InvalidArgument("object names are limited to 1024 bytes", field="uri")
    return BlobUri(bucket, path)


def host_of(file_name: str) -> str:
    """The host a session's file belongs to: its name without ``.xplane.pb`` (or a sibling's suffix)."""
    for suffix in (XPLANE_SUFFIX, *SIBLING_SUFFIXES):
        if file_name.endswith(suffix):
            return file_name[: -len(suffix)]
    return file_name.rpartition(".")[0] or file_name


def report_folder(session_folder: str, generation_set: str) -> str:
    """Where the analysis of one set of a session's files keeps its report."""
    return f"{session_folder.rstrip('/')}/{REPORT_FOLDER}/{generation_set}"
