"""The AnalysisRunner port's test double: each analysis job on a thread of this process, for tests, which a process
per job would cost seconds each (the product runs jobs in child processes: mldiag.adapters.analysis_runner).

The job's time limit is kept by waiting no longer for it: past it the call
raises :class:`~mldiag.domain.errors.AnalysisTimedOut`, but nothing can stop a
thread, so the work runs on to its end, unread. Nothing enforces the memory
ceiling but the analysis's own budget. What the work raises says why there is
no result, in the words the child process's runner uses: an unreadable profile,
a permanent :class:`~mldiag.domain.errors.AnalysisFailed`; anything else, an
:class:`~mldiag.domain.errors.AnalysisWorkerCrashed` to retry. Nothing outlives
this process, so nothing is ever left behind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from mldiag.domain.errors import AnalysisFailed, AnalysisTimedOut, AnalysisWorkerCrashed
from mldiag.ports import AnalysisJob

if TYPE_CHECKING:
    from mldiag.analysis.evidence import Analysis
    from mldiag.analysis.fanout import HostAnalysis
    from mldiag.config import Settings

T = TypeVar("T")


class InProcessAnalysisRunner:
    """Runs each job on a thread of this process; the reasoner is the one ``settings`` name."""

    def __init__(self, settings: Settings):
        self._settings = settings

    def analyse(self, job: AnalysisJob) -> Analysis:
        from mldiag.adapters.analysis_runner import work
        from mldiag.adapters.reasoning import investigator

        investigate = investigator(self._settings)
        return _within(job.timeout_seconds, lambda: work.analyse(job, investigate))

    def analyse_host(self, job: AnalysisJob) -> HostAnalysis:
        from mldiag.adapters.analysis_runner import work

        return _within(job.timeout_seconds, lambda: work.analyse_host(job))

    def stop_running(self) -> int:
        return 0  # a thread cannot be stopped; the host's own stop ends them

    def kill_left_behind(self, scratch: Path) -> bool:
        return False


def _within(timeout_seconds: float, work: Callable[[], T]) -> T:
    from mldiag.analysis.profile.profiles import UnreadableProfile

    done: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as error:  # noqa: BLE001 - handed to the caller below
            failed.append(error)

    thread = threading.Thread(target=run, name="mldiag-analysis", daemon=True)
    thread.start()
    thread.join(timeout_seconds)
    if thread.is_alive():
        raise AnalysisTimedOut(timeout_seconds)
    if failed:
        error = failed[0]
        if isinstance(error, UnreadableProfile):
            raise AnalysisFailed(f"unreadable profile: {error}", permanent=True) from error
        raise AnalysisWorkerCrashed(f"{type(error).__name__}: {error}", permanent=False) from error
    return done[0]
