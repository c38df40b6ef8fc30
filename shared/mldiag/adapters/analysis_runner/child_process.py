"""Each analysis job in a child process: the runner of ``mldiag up`` and of the deployed functions.

The child (:mod:`.worker`) is started as ``python -m`` of that module, its name
taken from the imported module, in a session of its own, so that a time limit
kills it and whatever it started (``killpg``); it reads its job, serialised, on
stdin and writes its result on stdout. How it ended says why there is no
result: past the time limit, :class:`~mldiag.domain.errors.AnalysisTimedOut`;
killed by SIGKILL (the kernel's out-of-memory killer, or the function's) or
over its memory ceiling, a permanent
:class:`~mldiag.domain.errors.AnalysisWorkerCrashed`; stopped by another
signal or by an error, one to retry; an unreadable profile, a permanent
:class:`~mldiag.domain.errors.AnalysisFailed`.

A child outlives a parent that is killed (SIGKILL gives no chance to stop it),
and a host that restarts on the same scratch folders (``mldiag up`` on its data
dir) must stop it before it starts analyses again. So each child holds a lease
in its job's scratch folder: the file :data:`LEASE_FILE`, naming its pid, and
an exclusive ``flock`` on it, taken by the parent before the child starts and
held through a descriptor only the child inherits. The kernel releases a
``flock`` when the last descriptor holding it closes, so the lock is held
exactly as long as that child lives: a held lock proves the pid in the file is
still the child's (not a number since reused by another process), and a free
one that nothing of ours runs there, so nothing is killed on the say-so of a
stale file, and no process table is searched.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from mldiag.adapters.analysis_runner import worker
from mldiag.domain.errors import AnalysisFailed, AnalysisTimedOut, AnalysisWorkerCrashed
from mldiag.ports import AnalysisJob

if TYPE_CHECKING:
    from mldiag.analysis.evidence import Analysis
    from mldiag.analysis.fanout import HostAnalysis
    from mldiag.config import Settings

LEASE_FILE = "worker.lease"  # in the job's scratch folder while its worker runs
MAX_REASON_CHARS = 500


class ChildProcessAnalysisRunner:
    """Runs each job in a child process; the reasoner is the one ``settings`` name."""

    def __init__(self, settings: Settings):
        self._settings = settings
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def analyse(self, job: AnalysisJob) -> Analysis:
        from mldiag.analysis.evidence import Analysis

        return Analysis.model_validate_json(self._run(job, host=False))

    def analyse_host(self, job: AnalysisJob) -> HostAnalysis:
        from mldiag.analysis.fanout import HostAnalysis

        return HostAnalysis.model_validate_json(self._run(job, host=True))

    def stop_running(self) -> int:
        with self._lock:
            running = list(self._running)
        stopped = 0
        for child in running:
            try:
                child.send_signal(signal.SIGTERM)  # the worker stops what it started itself
            except ProcessLookupError:
                continue
            stopped += 1
        return stopped

    def kill_left_behind(self, scratch: Path) -> bool:
        pid = _lease_holder(scratch)
        if pid is None:
            return False
        try:
            os.killpg(pid, signal.SIGKILL)  # the worker leads a process group of its own
        except ProcessLookupError:
            return False
        return True

    def _run(self, job: AnalysisJob, *, host: bool) -> bytes:
        request = worker.encode_request(job, host=host, settings=self._settings)
        child = self._start(job.scratch)
        with self._lock:
            self._running.add(child)
        try:
            result, errors = child.communicate(request, timeout=job.timeout_seconds)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it ended at the deadline
                os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            raise AnalysisTimedOut(job.timeout_seconds) from None
        finally:
            with self._lock:
                self._running.discard(child)
        if child.returncode != 0:
            raise _why(child.returncode, errors.decode(errors="replace"))
        return result

    def _start(self, scratch: Path) -> subprocess.Popen[bytes]:
        """Start a worker holding its lease in ``scratch``; the lease appears under its name once it names the
        worker's pid."""
        taking = scratch / f"{LEASE_FILE}.new"
        lease = os.open(taking, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            fcntl.flock(lease, fcntl.LOCK_EX)
            child = subprocess.Popen([sys.executable, "-m", worker.__name__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                     pass_fds=(lease,))
            os.write(lease, str(child.pid).encode())
            os.replace(taking, scratch / LEASE_FILE)
        finally:
            os.close(lease)  # the child's copy holds the lock now
        return child


def _lease_holder(scratch: Path) -> int | None:
    """The pid of the worker that holds the lease in ``scratch``; None where none does (no lease, or its worker
    has ended)."""
    try:
        lease = os.open(scratch / LEASE_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # held: the worker lives, so the pid it names is still its own
        return int(os.read(lease, 32))
    else:
        return None
    finally:
        os.close(lease)


def _why(status: int, errors: str) -> AnalysisFailed:
    """Why a worker that ended with ``status`` left no result, from the last line it wrote on stderr."""
    from mldiag.analysis.profile.profiles import UNREADABLE_EXIT
    from mldiag.analysis.stopping import OVER_CEILING_EXIT

    last = (errors.strip().splitlines() or [""])[-1][:MAX_REASON_CHARS]
    if status == UNREADABLE_EXIT:
        return AnalysisFailed(f"unreadable profile: {last}", permanent=True)
    if status == OVER_CEILING_EXIT:
        return AnalysisWorkerCrashed(last, permanent=True)
    if status == -signal.SIGKILL:
        return AnalysisWorkerCrashed("the analysis was killed (SIGKILL): the profile needs more memory than this "
                                     "function has", permanent=True)
    if status < 0:
        return AnalysisWorkerCrashed(f"the analysis worker was stopped by {signal.Signals(-status).name}",
                                     permanent=False)
    return AnalysisWorkerCrashed(f"the analysis worker exited with {status}: {last}", permanent=False)
