"""Local buckets that notify: files appearing under ``DATA_DIR/buckets`` become
Cloud Storage ``OBJECT_FINALIZE`` notifications on the ``bucket-notifications`` topic.

This is what ``mldiag up`` uses in place of Cloud Storage's Pub/Sub
notifications. A workload (JAX, the SDK's ``xprof()``, a profiler server)
writes straight into a bucket folder, so a file is only announced once it has
stopped changing: same size and modification time for ``settle_seconds``.
An object is announced once per generation (its modification time, as
:class:`~mldiag.adapters.blobs.local.LocalBlobs` defines it); files that exist
when the watcher starts are not announced, as Cloud Storage would not either.

Every folder under the root is a bucket of that name. A folder whose name is no
valid bucket name, or a file outside any folder, cannot be served: one warning
says so, once per folder, and its files are not announced.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import structlog
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from mldiag.config import BUCKET_NOTIFICATIONS
from mldiag.domain.envelopes import encode_json
from mldiag.domain.errors import InvalidArgument
from mldiag.domain.layout import BUCKET_NAME, parse_blob_uri
from mldiag.domain.clock import format_timestamp
from mldiag.ports import BlobInfo, BlobStore, LocalBuckets, MessageBus

log = structlog.get_logger(__name__)


def notification(info: BlobInfo) -> tuple[bytes, dict[str, str]]:
    """The Pub/Sub message Cloud Storage publishes for a finalized object (payload ``JSON_API_V1``)."""
    bucket, _, name = info.uri.removeprefix("gs://").partition("/")
    updated = format_timestamp(info.updated)
    resource = {
        "kind": "storage#object",
        "id": f"{bucket}/{name}/{info.generation}",
        "name": name,
        "bucket": bucket,
        "generation": info.generation,
        "metageneration": "1",
        "contentType": info.content_type,
        "size": str(info.size),
        "storageClass": "STANDARD",
        "timeCreated": updated,
        "updated": updated,
    }
    attributes = {
        "eventType": "OBJECT_FINALIZE",
        "payloadFormat": "JSON_API_V1",
        "bucketId": bucket,
        "objectId": name,
        "objectGeneration": info.generation,
        "eventTime": updated,
        "notificationConfig": f"projects/_/buckets/{bucket}/notificationConfigs/mldiag-up",
    }
    return encode_json(resource), attributes


class _Changes(FileSystemEventHandler):
    def __init__(self, watcher: BucketWatcher):
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = getattr(event, "dest_path", "") or event.src_path
        if event.event_type in ("created", "modified", "moved", "closed"):
            self.watcher.noticed(Path(os.fsdecode(path)), is_directory=event.is_directory)


class BucketWatcher:
    """Watches a :class:`LocalBuckets` blob store and publishes finalize notifications to ``bus``."""

    def __init__(self, blobs: BlobStore, bus: MessageBus, *, settle_seconds: float = 0.5,
                 poll_seconds: float = 0.25):
        if not isinstance(blobs, LocalBuckets):
            raise TypeError("only a blob store whose buckets are local folders can be watched")
        self.blobs = blobs
        self.root = blobs.buckets
        self.bus = bus
        self.settle_seconds = settle_seconds
        self.poll_seconds = poll_seconds
        self._pending: dict[Path, tuple[tuple[int, int], float]] = {}
        self._announced: dict[Path, int] = {}
        self._refused: set[Path] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._observer: BaseObserver = Observer()
        self._checker = threading.Thread(target=self._check_forever, name="mldiag-bucket-watcher", daemon=True)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._observe()
        self._checker.start()

    def stop(self) -> None:
        self._stopping.set()
        self._checker.join(timeout=5)
        self._observer.stop()
        if self._observer.is_alive():  # a restart that failed left one that never started
            self._observer.join(timeout=5)

    def _observe(self) -> None:
        self._observer = Observer()
        self._observer.schedule(_Changes(self), str(self.root), recursive=True)
        self._observer.start()

    def _keep_observing(self) -> None:
        """inotify can lose a race with a folder removed as it is being added, which ends the
        observer's thread; start a new one and look at every file, so nothing is missed."""
        if all(emitter.is_alive() for emitter in self._observer.emitters):
            return
        log.info("the bucket watcher's observer stopped; restarting it")  # nothing is missed: no warning
        self._observer.stop()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._observe()
        except OSError as error:  # the same race again: the next look tries again
            log.warning("the bucket watcher's observer could not restart", error=str(error))
            return
        self.noticed(self.root, is_directory=True)

    def noticed(self, path: Path, *, is_directory: bool) -> None:
        """A change under the root: files wait to settle; a new folder's files (which may
        have been written before the folder itself was watched) are looked at too."""
        try:
            paths = [p for p in path.rglob("*") if p.is_file()] if is_directory else [path]
        except OSError:  # the folder went away while it was being looked at: nothing in it to announce
            return
        with self._lock:
            for file in paths:
                self._pending.setdefault(file, ((-1, -1), time.monotonic()))

    def _check_forever(self) -> None:
        while not self._stopping.wait(self.poll_seconds):
            self._keep_observing()
            self.check()

    def check(self) -> int:
        """Announce every pending file that has settled; returns how many were announced."""
        now = time.monotonic()
        settled = []
        with self._lock:
            for path, (seen, since) in list(self._pending.items()):
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    del self._pending[path]  # a temporary file, renamed or removed
                    continue
                current = (stat.st_size, stat.st_mtime_ns)
                if current != seen:
                    self._pending[path] = (current, now)
                elif now - since >= self.settle_seconds:
                    del self._pending[path]
                    if self._announced.get(path) != stat.st_mtime_ns:
                        self._announced[path] = stat.st_mtime_ns
                        settled.append(path)
        return sum(self._announce(path) for path in settled)

    def _announce(self, path: Path) -> bool:
        try:
            uri = str(parse_blob_uri(self.blobs.uri_for(path)))
        except (ValueError, InvalidArgument) as error:
            self._refuse(path, error)
            return False
        info = self.blobs.stat(uri)
        if info is None:
            return False
        data, attributes = notification(info)
        self.bus.publish(BUCKET_NOTIFICATIONS, data, attributes)
        log.info("object finalized", uri=info.uri, size=info.size, generation=info.generation)
        return True

    def _refuse(self, path: Path, error: Exception) -> None:
        """Say why ``path`` is not announced: once per folder that cannot be a bucket, else once per file."""
        folder = self.root / path.relative_to(self.root).parts[0]
        if folder == path:
            about, why = path, f"it is in no bucket folder (files go in {self.root}/<bucket>/...)"
        elif not BUCKET_NAME.match(folder.name):
            about, why = folder, (f"{folder.name!r} is not a valid bucket name (3 to 222 lowercase letters, "
                                  "digits, '-', '_' or '.', starting and ending with a letter or digit)")
        else:
            about, why = path, str(error)
        if about not in self._refused:
            self._refused.add(about)
            log.warning(f"{about} is not served", reason=why)
