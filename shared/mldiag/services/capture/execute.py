"""Running one capture task against one profiler server: the part the function and the agent share.

Where the profile goes differs between them. The capture function tells the
workload's server to write straight into the session folder (a local bucket
folder in the embedded setup, ``gs://`` in the cloud — the workload then needs
write access to the bucket). The node agent lets the server write into a
scratch folder on the node and uploads from there; the workload may run as
another user, or in a container that mounts the scratch folder at the same
path. Snapshots are always written by the client, so they are always uploaded.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mldiag.domain.capture import CaptureFailed, Failure, TracerLevels
from mldiag.domain.layout import PROFILE_MARKER, SIBLING_SUFFIXES, XPLANE_SUFFIX
from mldiag.ports import BlobStore, LocalBuckets, ProfilerClient
from mldiag.services.capture.tasks import Action, CaptureTask, TaskResult, profile_uri

# Continuous profiling records the device only (the managed product's rule, and what XProf's client does).
CONTINUOUS_HOST_LEVEL = 0
CONTINUOUS_PYTHON_LEVEL = 0


def split_session_folder(folder: str) -> tuple[str, str]:
    """``<root>/plugins/profile/<session>`` → ``(<root>, <session>)``: what XProf's writer takes."""
    root, marker, session_id = folder.rstrip("/").rpartition(PROFILE_MARKER)
    if not marker or not session_id or "/" in session_id:
        raise ValueError(f"{folder!r} is not a <run>/plugins/profile/<session> folder")
    return root, session_id


@dataclass(frozen=True)
class Executor:
    """Executes tasks; ``write_direct`` when the profiler server can write into the bucket itself.

    Otherwise the server writes into a fresh folder under ``scratch_dir`` (the
    system's temporary folder when unset), which is then uploaded.
    """

    blobs: BlobStore
    write_direct: bool
    scratch_dir: str | None = None

    def run(self, task: CaptureTask, server: ProfilerClient, session_folder: str) -> TaskResult:
        try:
            if task.action is Action.TRACE:
                self._trace(task, server, session_folder, task.levels)
            elif task.action is Action.SNAPSHOT:
                return self._snapshot(task, server, session_folder)
            elif task.action is Action.START:
                server.start_continuous(self._continuous_levels(task))
            elif not server.stop_continuous():
                return TaskResult(note=f"continuous profiling was not running on {server.address}")
        except CaptureFailed as failed:
            return TaskResult.failed(failed)
        return TaskResult()

    @staticmethod
    def _continuous_levels(task: CaptureTask) -> TracerLevels:
        return TracerLevels(CONTINUOUS_HOST_LEVEL, task.levels.device, CONTINUOUS_PYTHON_LEVEL)

    def _trace(self, task: CaptureTask, server: ProfilerClient, session_folder: str, levels: TracerLevels) -> None:
        root, session_id = split_session_folder(session_folder)
        if self.write_direct:
            if isinstance(self.blobs, LocalBuckets):
                root = str(self.blobs.path_for(root))
            _trace_into(server, root, session_id, task, levels,
                        written=lambda: self.blobs.stat(profile_uri(session_folder, task.target)) is not None)
            return
        with tempfile.TemporaryDirectory(prefix="mldiag-capture-", dir=self.scratch_dir) as scratch:
            os.chmod(scratch, 0o777)  # noqa: S103 - the workload's server, maybe another user, writes here
            written = Path(scratch, "plugins", "profile", session_id)
            _trace_into(server, scratch, session_id, task, levels,
                        written=lambda: (written / f"{task.target}{XPLANE_SUFFIX}").is_file())
            for suffix in (XPLANE_SUFFIX, *SIBLING_SUFFIXES):
                path = written / f"{task.target}{suffix}"
                if path.is_file():
                    self.blobs.upload(path, f"{session_folder.rstrip('/')}/{path.name}", if_absent=True)

    def _snapshot(self, task: CaptureTask, server: ProfilerClient, session_folder: str) -> TaskResult:
        with tempfile.TemporaryDirectory(prefix="mldiag-snapshot-", dir=self.scratch_dir) as scratch:
            try:
                files = server.snapshot(Path(scratch))
            except CaptureFailed as failed:
                if failed.failure is Failure.EMPTY_TRACE and task.fallback_on_demand:
                    return self._fall_back(task, server, session_folder, failed)
                raise
            if len(files) > 1:
                raise CaptureFailed(Failure.ERROR, f"the snapshot from {server.address} holds {len(files)} "
                                    "xplane files; one per target was expected")
            self.blobs.upload(files[0], profile_uri(session_folder, task.target), if_absent=True)
        return TaskResult()

    def _fall_back(self, task: CaptureTask, server: ProfilerClient, session_folder: str,
                   empty: CaptureFailed) -> TaskResult:
        """An on-demand trace in place of an empty snapshot: pause continuous profiling around it."""
        reason = f"the snapshot came back empty ({empty}); took a {task.duration_ms} ms on-demand trace instead"
        server.stop_continuous()
        try:
            self._trace(task, server, session_folder, TracerLevels())
        except CaptureFailed as failed:
            return TaskResult.failed(failed, note=reason + self._resume(task, server))
        return TaskResult(note=reason + self._resume(task, server), fell_back=True)

    def _resume(self, task: CaptureTask, server: ProfilerClient) -> str:
        try:
            server.start_continuous(self._continuous_levels(task))
        except CaptureFailed as failed:
            return f"; continuous profiling could not be resumed: {failed}"
        return "; continuous profiling resumed"


def _trace_into(server: ProfilerClient, root: str, session_id: str, task: CaptureTask, levels: TracerLevels,
                written: Callable[[], bool]) -> None:
    """Trace into ``root``, telling an empty trace from a profile the server could not write.

    Both end after the duration with the same client error, but a server with
    nothing to record still writes a small xplane; one that cannot write leaves
    nothing (measured: a ``gs://`` root without credentials).
    """
    try:
        server.trace(root, session_id, task.target, task.duration_ms, levels)
    except CaptureFailed as failed:
        if failed.failure is Failure.EMPTY_TRACE and not written():
            raise CaptureFailed(Failure.ERROR, (
                f"{server.address} traced for {task.duration_ms} ms but wrote no profile under {root}: "
                "can the workload write there (bucket permissions, credentials, disk)?")) from None
        raise
