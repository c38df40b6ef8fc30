"""``LocalBlobs``: buckets as folders, ``gs://bucket/path`` ↔ ``DATA_DIR/buckets/bucket/path``.

Stock ``xprof --logdir DATA_DIR/buckets/<bucket>/<run>`` opens what is stored
here. Writes go through a temporary file and an atomic rename, so a reader (or
the folder watcher of ``mldiag up``) never sees half an object. The generation
of an object is its modification time in nanoseconds. Signed URLs point at the
control plane's ``/share/<token>`` route (see :mod:`mldiag.domain.share_links`).
"""

from __future__ import annotations

import functools
import mimetypes
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

from mldiag.domain.errors import InvalidArgument, NotFound
from mldiag.domain.layout import parse_blob_uri
from mldiag.domain.share_links import LinkSigner, load_key
from mldiag.ports import BlobInfo


class LocalBlobs:
    """A :class:`mldiag.ports.BlobStore` over a directory tree."""

    def __init__(self, root: Path | str, *, share_base_url: str = "", share_key: str = ""):
        self.root = Path(root).resolve()
        self.share_base_url = share_base_url.rstrip("/")
        self._share_key = share_key
        self.buckets = self.root / "buckets"
        self._staging = self.root / "staging"
        self.buckets.mkdir(parents=True, exist_ok=True)
        self._staging.mkdir(parents=True, exist_ok=True)

    def path_for(self, uri: str) -> Path:
        """The local file behind ``uri`` (it may not exist)."""
        parsed = parse_blob_uri(uri, allow_empty_path=True)
        path = (self.buckets / parsed.bucket / parsed.path).resolve()
        if not path.is_relative_to(self.buckets / parsed.bucket):
            raise InvalidArgument(f"{uri!r} escapes its bucket", field="uri")
        return path

    def uri_for(self, path: Path) -> str:
        """The ``gs://`` URI of a file under ``buckets/`` (the inverse of :meth:`path_for`)."""
        relative = Path(path).resolve().relative_to(self.buckets)
        bucket, *rest = relative.parts
        return f"gs://{bucket}/{'/'.join(rest)}"

    def _info(self, uri: str, path: Path) -> BlobInfo:
        stat = path.stat()
        return BlobInfo(
            uri=uri,
            size=stat.st_size,
            generation=str(stat.st_mtime_ns),
            updated=datetime.fromtimestamp(stat.st_mtime, timezone.utc),
            content_type=mimetypes.guess_type(path.name)[0] or "application/octet-stream",
        )

    def stat(self, uri: str) -> BlobInfo | None:
        path = self.path_for(uri)
        return self._info(uri, path) if path.is_file() else None

    def read_bytes(self, uri: str, max_bytes: int | None = None) -> bytes:
        info = self.stat(uri)
        if info is None:
            raise NotFound(f"{uri} does not exist")
        if max_bytes is not None and info.size > max_bytes:
            raise InvalidArgument(f"{uri} is {info.size} bytes, over the {max_bytes}-byte limit", field="uri")
        return self.path_for(uri).read_bytes()

    def read_head(self, uri: str, size: int) -> bytes:
        try:
            with self.path_for(uri).open("rb") as file:
                return file.read(size)
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound(f"{uri} does not exist") from None

    def _publish(self, staged: Path, uri: str, if_absent: bool) -> BlobInfo | None:
        path = self.path_for(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not if_absent:
            os.replace(staged, path)
            return self._info(uri, path)
        try:
            os.link(staged, path)  # atomic, and refused when the object exists
        except FileExistsError:
            return None
        finally:
            staged.unlink()
        return self._info(uri, path)

    def _object_path(self, uri: str) -> Path:
        """:meth:`path_for`, refusing a bare ``gs://bucket``: only objects are written."""
        parse_blob_uri(uri)
        return self.path_for(uri)

    def write_bytes(self, uri: str, data: bytes, content_type: str = "", *,
                    if_absent: bool = False) -> BlobInfo | None:
        self._object_path(uri)  # validate before staging anything
        with tempfile.NamedTemporaryFile(dir=self._staging, delete=False) as staged:
            staged.write(data)
        return self._publish(Path(staged.name), uri, if_absent)

    def upload(self, source: Path, uri: str, content_type: str = "", *,
               if_absent: bool = False) -> BlobInfo | None:
        self._object_path(uri)
        with tempfile.NamedTemporaryFile(dir=self._staging, delete=False) as staged:
            pass
        shutil.copyfile(source, staged.name)
        return self._publish(Path(staged.name), uri, if_absent)

    def download(self, uri: str, destination: Path) -> BlobInfo:
        info = self.stat(uri)
        if info is None:
            raise NotFound(f"{uri} does not exist")
        Path(destination).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.path_for(uri), destination)
        return info

    def list(self, prefix: str) -> Iterator[BlobInfo]:
        parsed = parse_blob_uri(prefix, allow_empty_path=True)
        bucket_root = self.buckets / parsed.bucket
        # Walk only the deepest folder the prefix names in full.
        folder = self.path_for(f"gs://{parsed.bucket}/{parsed.path.rpartition('/')[0]}")
        if not folder.is_dir():
            return
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                uri = f"gs://{parsed.bucket}/{path.relative_to(bucket_root).as_posix()}"
                if uri.startswith(prefix):
                    yield self._info(uri, path)

    def list_after(self, prefix: str, start_after: str = "") -> Iterator[BlobInfo]:
        bucket = parse_blob_uri(prefix, allow_empty_path=True).bucket
        named = sorted(((info.uri.removeprefix(f"gs://{bucket}/"), info) for info in self.list(prefix)),
                       key=lambda pair: pair[0])
        return (info for name, info in named if name > start_after)

    def delete(self, uri: str) -> bool:
        path = self.path_for(uri)
        if not path.is_file():
            return False
        path.unlink()
        return True

    @functools.cached_property
    def _signer(self) -> LinkSigner:
        return LinkSigner(load_key(self.root, self._share_key))

    def signed_url(self, uri: str, ttl: timedelta) -> str:
        self.path_for(uri)
        expires = datetime.now(timezone.utc) + ttl
        return f"{self.share_base_url}/share/{self._signer.token(uri, expires)}"
