"""``GcsBlobs``: the blob store on Cloud Storage (or fake-gcs-server via ``STORAGE_EMULATOR_HOST``).

Reads look the object up first and then download exactly the generation they
looked at, so a size limit is checked before any byte moves and a concurrent
overwrite surfaces as :class:`Aborted` instead of a mix of two versions.
"""

from __future__ import annotations

import contextlib
import mimetypes
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from google.api_core import exceptions as google_errors
from google.auth.credentials import Signing
from google.auth.transport.requests import Request
from google.cloud import storage

from mldiag.domain.errors import Aborted, InvalidArgument, NotFound
from mldiag.domain.layout import parse_blob_uri
from mldiag.ports import BlobInfo

_LISTED_FIELDS = "items(name,generation,size,updated,contentType),nextPageToken"


@contextlib.contextmanager
def _same_generation(uri: str) -> Iterator[None]:
    """Translate what a download pinned to a generation can meet when the object moves on."""
    try:
        yield
    except google_errors.NotFound:
        raise NotFound(f"{uri} was deleted while being read") from None
    except google_errors.PreconditionFailed:
        raise Aborted(f"{uri} was overwritten while being read") from None


@contextlib.contextmanager
def _kept_if_present(if_absent: bool) -> Iterator[list[BlobInfo]]:
    """An upload with ``ifGenerationMatch=0``: 412 means the object exists, which is the goal."""
    written: list[BlobInfo] = []
    try:
        yield written
    except google_errors.PreconditionFailed:
        if not if_absent:
            raise


def _info(uri: str, blob: storage.Blob) -> BlobInfo:
    return BlobInfo(
        uri=uri,
        size=int(blob.size or 0),
        generation=str(blob.generation),
        updated=blob.updated,
        content_type=blob.content_type or "",
    )


class GcsBlobs:
    """A :class:`mldiag.ports.BlobStore` over Cloud Storage buckets."""

    def __init__(self, project: str):
        self._client = storage.Client(project=project)

    def _blob(self, uri: str) -> storage.Blob:
        parsed = parse_blob_uri(uri)
        return self._client.bucket(parsed.bucket).blob(parsed.path)

    def _existing(self, uri: str) -> storage.Blob:
        """The object's current generation, with its metadata; :class:`NotFound` if absent."""
        parsed = parse_blob_uri(uri)
        blob = self._client.bucket(parsed.bucket).get_blob(parsed.path)
        if blob is None:
            raise NotFound(f"{uri} does not exist")
        return blob

    def stat(self, uri: str) -> BlobInfo | None:
        try:
            return _info(uri, self._existing(uri))
        except NotFound:
            return None

    def read_bytes(self, uri: str, max_bytes: int | None = None) -> bytes:
        blob = self._existing(uri)
        if max_bytes is not None and blob.size > max_bytes:
            raise InvalidArgument(f"{uri} is {blob.size} bytes, over the {max_bytes}-byte limit", field="uri")
        with _same_generation(uri):
            return blob.download_as_bytes(if_generation_match=blob.generation)

    def read_head(self, uri: str, size: int) -> bytes:
        blob = self._existing(uri)
        with _same_generation(uri):
            return blob.download_as_bytes(start=0, end=size - 1, if_generation_match=blob.generation)

    def download(self, uri: str, destination: Path) -> BlobInfo:
        blob = self._existing(uri)
        Path(destination).parent.mkdir(parents=True, exist_ok=True)
        with _same_generation(uri):
            blob.download_to_filename(str(destination), if_generation_match=blob.generation)
        return _info(uri, blob)

    def write_bytes(self, uri: str, data: bytes, content_type: str = "", *,
                    if_absent: bool = False) -> BlobInfo | None:
        blob = self._blob(uri)
        with _kept_if_present(if_absent) as written:
            blob.upload_from_string(data, content_type=content_type or _guess_content_type(blob.name),
                                    if_generation_match=0 if if_absent else None)
            written.append(_info(uri, blob))
        return written[0] if written else None

    def upload(self, source: Path, uri: str, content_type: str = "", *,
               if_absent: bool = False) -> BlobInfo | None:
        blob = self._blob(uri)
        with _kept_if_present(if_absent) as written:
            blob.upload_from_filename(str(source), content_type=content_type or _guess_content_type(blob.name),
                                      if_generation_match=0 if if_absent else None)
            written.append(_info(uri, blob))
        return written[0] if written else None

    def list(self, prefix: str) -> Iterator[BlobInfo]:
        parsed = parse_blob_uri(prefix, allow_empty_path=True)
        try:
            for blob in self._client.list_blobs(parsed.bucket, prefix=parsed.path or None):
                yield _info(f"gs://{parsed.bucket}/{blob.name}", blob)
        except google_errors.NotFound:
            return  # no such bucket: nothing under the prefix

    def list_after(self, prefix: str, start_after: str = "") -> Iterator[BlobInfo]:
        # Cloud Storage lists in name order from startOffset, which is inclusive; only the fields callers compare.
        parsed = parse_blob_uri(prefix, allow_empty_path=True)
        try:
            for blob in self._client.list_blobs(parsed.bucket, prefix=parsed.path or None, fields=_LISTED_FIELDS,
                                                start_offset=start_after or None):
                if blob.name > start_after:
                    yield _info(f"gs://{parsed.bucket}/{blob.name}", blob)
        except google_errors.NotFound:
            return

    def delete(self, uri: str) -> bool:
        try:
            self._blob(uri).delete()
        except google_errors.NotFound:
            return False
        return True

    def signed_url(self, uri: str, ttl: timedelta) -> str:
        """A V4 signed GET URL.

        A service-account key signs locally; keyless credentials (a function's
        identity on the metadata server) sign through the IAM Credentials API,
        which needs ``roles/iam.serviceAccountTokenCreator`` on that account.
        """
        blob = self._blob(uri)
        credentials = self._client._credentials  # the client offers no public accessor
        if isinstance(credentials, Signing):
            return blob.generate_signed_url(version="v4", expiration=ttl, method="GET")
        credentials.refresh(Request())
        return blob.generate_signed_url(
            version="v4", expiration=ttl, method="GET",
            service_account_email=credentials.service_account_email, access_token=credentials.token,
        )


def _guess_content_type(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"
