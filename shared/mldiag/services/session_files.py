"""A session's profile files in the bucket: refused before a download when they are no profile, and
downloaded for an analysis.

An object that plainly is no profile (zeros, text) is refused by its first
bytes, or, where the bucket is a local folder, by its whole framing read in
place, so that nothing copies gigabytes of nothing.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from mldiag.analysis.profile.profiles import Session, UnreadableProfile, choose_session
from mldiag.analysis.profile.wire import MalformedXSpace, check_xspace, check_xspace_head
from mldiag.domain.errors import NotFound
from mldiag.domain.layout import XPLANE_SUFFIX
from mldiag.ports import BlobStore, LocalBuckets

XSPACE_HEAD_BYTES = 16  # what is read of an object to refuse it before a download: its first tag, and then some


def require_xspace_object(blobs: BlobStore, uri: str) -> None:
    """Refuse, before any download, an object that is no profile: by its whole framing where the bucket is a
    local folder (read in place), by its first bytes elsewhere (zeros, text)."""
    try:
        if isinstance(blobs, LocalBuckets):
            check_xspace(blobs.path_for(uri))
        else:
            check_xspace_head(blobs.read_head(uri, XSPACE_HEAD_BYTES))
    except FileNotFoundError:
        raise NotFound(f"{uri} does not exist") from None
    except MalformedXSpace as error:
        raise UnreadableProfile(f"{uri} is not an XSpace profile ({XPLANE_SUFFIX}): {error}") from None


def download_session(uri: str, blobs: BlobStore, destination: Path) -> Session:
    """Download the session a ``gs://`` URI names into ``destination/<session>/``.

    An object that plainly is no profile (by its first bytes) is refused before it is downloaded.
    """
    if uri.endswith(XPLANE_SUFFIX):
        objects = [uri]
    else:
        prefix = uri.rstrip("/") + "/"
        objects = [info.uri for info in blobs.list(prefix) if info.uri.endswith(XPLANE_SUFFIX)]
    if not objects:
        raise UnreadableProfile(f"no {XPLANE_SUFFIX} objects at {uri}")
    folder, chosen, note = choose_session([PurePosixPath(o.removeprefix("gs://")) for o in objects], uri)
    local = destination / folder.name
    files = []
    for object_path in chosen:
        uri, target = f"gs://{object_path}", local / object_path.name
        require_xspace_object(blobs, uri)
        blobs.download(uri, target)
        files.append(target)
    return Session(folder.name, tuple(files), note)
