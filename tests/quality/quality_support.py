"""Where the quality harness's files are, and the analyses it checks: offline as the CLI runs it, and with Gemini.

The analyses can be computed ahead in worker processes (``Prefetch``), while the
tests before them run; a test then takes the finished result, or computes it
itself where the worker failed, so that an analysis that raises fails its tests
with its own error.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
EXPECTATIONS = Path(__file__).resolve().parent / "expectations"
GEMINI_RECORDINGS = REPO / "tests" / "fixtures" / "gemini"

# The Vertex AI stand-in the unit tests replay recorded conversations with.
sys.path.append(str(REPO / "tests" / "unit" / "analysis"))


PREFETCH_WORKERS_VARIABLE = "QUALITY_PREFETCH_WORKERS"

Call = tuple[str, tuple[Any, ...]]  # ("offline_analysis", (source, baseline)), ("gemini_analysis", (source, recording))


def load_expectations() -> dict[str, dict[str, Any]]:
    """Every expectation file, by fixture name."""
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(EXPECTATIONS.glob("*.yaml"))}


def baseline_source(fixture: str, expectations: dict[str, dict[str, Any]]) -> str | None:
    """The source of the fixture ``fixture``'s expectations compare it with (``baseline:``), if any."""
    document = expectations[fixture]
    return expectations[document["baseline"]]["source"] if "baseline" in document else None


def _session_files(source: str) -> list[Path]:
    from mldiag.analysis import find_session

    return list(find_session(REPO / source).files)


@functools.cache
def _offline(source: str):
    from mldiag.analysis import analyze_profile
    from mldiag.bootstrap import build_investigator
    from mldiag.config import Settings

    return analyze_profile(_session_files(source), source=source, investigate=build_investigator(Settings(), "offline"))


@functools.cache
def offline_analysis(source: str, baseline: str | None = None) -> dict[str, Any]:
    """``analysis.json`` as ``mldiag analyze --format json`` writes it: the offline reasoner's investigation.

    With ``baseline`` (another fixture's source), "What changed" against it, as the analysis
    worker adds it for an automatic capture that follows a degradation.
    """
    prefetched = Prefetch.taken(("offline_analysis", (source, baseline)))
    if prefetched is not None:
        return prefetched
    analysis = _offline(source)
    if baseline:
        from mldiag.analysis.comparison import compare

        analysis = analysis.model_copy(deep=True)
        analysis.comparison = compare(analysis, _offline(baseline), Path(baseline).parent.name)
    return analysis.to_json_dict()


@functools.cache
def gemini_analysis(source: str, recording: str) -> dict[str, Any]:
    """``analysis.json`` with Gemini as the reasoner, replaying a recorded conversation; only Vertex AI is faked."""
    from fake_gemini import FakeGemini, script
    from google.oauth2.credentials import Credentials

    from mldiag.adapters.reasoning.vertex import VertexReasoner
    from mldiag.analysis import analyze_profile
    from mldiag.analysis.reasoning.investigation import Investigator
    from mldiag.analysis.reasoning.offline import OfflineReasoner

    prefetched = Prefetch.taken(("gemini_analysis", (source, recording)))
    if prefetched is not None:
        return prefetched
    with FakeGemini(script(recording)) as fake:
        reasoner = VertexReasoner(project="quality-harness", location="us-central1", model="gemini-2.5-flash",
                                  endpoint=fake.url, credentials=Credentials(token="quality-harness"),
                                  retry_initial_delay_s=0.01)
        analysis = analyze_profile(_session_files(source), source=source,
                                   investigate=Investigator(reasoner, OfflineReasoner()))
    return analysis.to_json_dict()


def prefetch_workers() -> int:
    """How many processes compute the analyses ahead: ``QUALITY_PREFETCH_WORKERS``, by default up to 2 (0: none)."""
    value = os.environ.get(PREFETCH_WORKERS_VARIABLE)
    if value is None:
        return min(2, os.cpu_count() or 1)
    if not value.strip().isdigit():
        raise ValueError(f"{PREFETCH_WORKERS_VARIABLE} is a number of processes (0: none), not {value!r}")
    return int(value)


class Prefetch:
    """Analyses computed ahead, in their order, in worker processes; ``Prefetch.running`` is the test run's."""

    running: Prefetch | None = None

    def __init__(self, calls: Iterable[Call], workers: int):
        self._executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_worker, initargs=(os.getpid(),))
        self._futures: dict[Call, Future] = {call: self._executor.submit(_computed, *call) for call in calls}

    def result(self, call: Call) -> Any | None:
        """What a worker computed for ``call``; None where it was not asked or the worker failed."""
        future = self._futures.get(call)
        if future is None:
            return None
        try:
            return future.result()
        except Exception:  # computed here again, the error (if any) is raised with its own traceback
            return None

    def stop(self) -> None:
        """Stop the workers, finished or not."""
        processes = list((self._executor._processes or {}).values())  # terminate_workers() from Python 3.14
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join()

    @classmethod
    def taken(cls, call: Call) -> Any | None:
        """The test run's result for ``call``, if it computed it ahead."""
        return cls.running.result(call) if cls.running else None


def _computed(name: str, arguments: tuple[Any, ...]) -> Any:
    """``name(*arguments)`` in a worker process, keeping nothing of it: each analysis is held once, by the tests."""
    try:
        return globals()[name].__wrapped__(*arguments)
    finally:
        _offline.cache_clear()


def _start_worker(parent: int) -> None:
    """A worker takes the CPU the tests leave idle, not theirs; Ctrl-C is for the test run (which stops the
    workers at its end); a worker whose test run died exits."""
    os.nice(10)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def exit_with_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=exit_with_parent, daemon=True).start()
