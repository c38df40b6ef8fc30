"""``mldiag up`` killed (SIGKILL) with files in flight and an analysis running, then started again.

Every file must become a session exactly once, whether its event was queued,
being delivered, or never sent (it landed while nothing ran); every analysis
must end DONE or FAILED with a reason; the worker the killed process left must
be stopped and its scratch folder removed.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mldiag.adapters.analysis_runner.child_process import LEASE_FILE
from mldiag.adapters.store.sqlite import SqliteStore
from mldiag.domain import AnalysisState, ProfilerSession

MLDIAG = str(Path(sys.executable).parent / "mldiag")
FIXTURES = Path(__file__).parents[2] / "fixtures" / "profiles"
PROFILE = next((FIXTURES / "huge_temporaries").rglob("*.xplane.pb"))  # the smallest: a few seconds to analyse
PROFILES, NOT_PROFILES, WHILE_DOWN = 4, 96, 5
pytestmark = pytest.mark.slow


def _start(data: Path, log: Path) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MLDIAG_LOG_FORMAT": "json", "MLDIAG_SETTLE_SECONDS": "0",
           "MLDIAG_ANALYSIS_TIMEOUT_SECONDS": "120"}
    env.pop("MLDIAG_BACKEND", None)
    with log.open("ab") as errors:
        process = subprocess.Popen([MLDIAG, "up", "--data", str(data), "--port", "0", "--otlp-port", "0"], env=env,
                                   stdout=subprocess.PIPE, stderr=errors, text=True)
    banner, deadline = "", time.monotonic() + 60
    while "Ctrl-C" not in banner:
        line = process.stdout.readline()
        assert line or process.poll() is None, log.read_text()[-3000:]
        banner += line
        assert time.monotonic() < deadline, banner
    return process, Path(re.search(r"gcs_path=(\S+) ", banner)[1])


def _sessions(store: SqliteStore) -> list[ProfilerSession]:
    return [ProfilerSession.model_validate({k: v for k, v in document.items() if not k.startswith("_")})
            for document in store.query(ProfilerSession.collection)]


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _running(pid: int) -> bool:
    """Whether the process runs (a killed one nobody has reaped yet is a zombie: it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _drop(bucket: Path, number: int, content: bytes) -> None:
    session = bucket / "crash" / "plugins" / "profile" / f"s{number:03}"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(content)


def test_a_killed_mldiag_up_loses_nothing_and_leaves_nothing_behind(tmp_path):
    data, log = tmp_path / "data", tmp_path / "up.log"
    store = SqliteStore(data / "mldiag.sqlite3")
    first, bucket = _start(data, log)
    try:
        for number in range(PROFILES + NOT_PROFILES):
            _drop(bucket, number, PROFILE.read_bytes() if number % 25 == 0 else b"\x0a\x05not a profile")

        def in_flight() -> bool:
            sessions = _sessions(store)
            running = any(s.analysis.state is AnalysisState.RUNNING for s in sessions)
            return running and len(sessions) >= 50 and any((data / "scratch").glob(f"*/{LEASE_FILE}"))

        _wait(in_flight, 90, "half the files registered while an analysis runs")
    finally:
        first.kill()  # SIGKILL: no clean-up of any kind
        first.wait()
    [lease] = (data / "scratch").glob(f"*/{LEASE_FILE}")
    orphan = int(lease.read_text())
    assert _running(orphan), "the killed process's worker lives on, for now"
    registered_at_kill = len(_sessions(store))
    unfinished_at_kill = sum(s.analysis.state not in (AnalysisState.DONE, AnalysisState.FAILED)
                             for s in _sessions(store))
    with sqlite3.connect(data / "mldiag.sqlite3") as queue:
        queued_at_kill = queue.execute("SELECT COUNT(*) FROM bus_queue").fetchone()[0]
    for number in range(PROFILES + NOT_PROFILES, PROFILES + NOT_PROFILES + WHILE_DOWN):
        _drop(bucket, number, b"\x0a\x05not a profile")  # no process watches the bucket now

    started = time.monotonic()
    second, _ = _start(data, log)
    try:
        assert not _running(orphan)
        total = PROFILES + NOT_PROFILES + WHILE_DOWN

        def finished() -> bool:
            sessions = _sessions(store)
            return len(sessions) == total and all(
                s.analysis.state in (AnalysisState.DONE, AnalysisState.FAILED) for s in sessions)

        _wait(finished, 150, "every session's analysis to end")
        recovered_in = time.monotonic() - started
        sessions = _sessions(store)
        assert sorted(s.id for s in sessions) == [f"s{n:03}" for n in range(total)]
        assert all(len(s.host_files) == 1 for s in sessions)
        done = [s for s in sessions if s.analysis.state is AnalysisState.DONE]
        assert sorted(s.id for s in done) == [f"s{n:03}" for n in range(0, PROFILES + NOT_PROFILES, 25)]
        failed = [s for s in sessions if s.analysis.state is AnalysisState.FAILED]
        assert all(s.analysis.error.startswith("unreadable profile: ") for s in failed)
        _wait(lambda: not any((data / "scratch").iterdir()), 10, "the last scratch folder to go")
    finally:
        second.terminate()
        assert second.wait(timeout=30) == 0, log.read_text()[-3000:]
    print(f"at the kill: {registered_at_kill} of {PROFILES + NOT_PROFILES} files registered, "
          f"{unfinished_at_kill} analyses unfinished, {queued_at_kill} deliveries queued; after the restart all {total} ended in {recovered_in:.1f} s")


def test_a_stopped_mldiag_up_stops_its_analysis_and_runs_it_again_on_the_next_start(tmp_path):
    data, log = tmp_path / "data", tmp_path / "up.log"
    store = SqliteStore(data / "mldiag.sqlite3")
    first, bucket = _start(data, log)
    try:
        _drop(bucket, 0, PROFILE.read_bytes())
        _wait(lambda: any((data / "scratch").glob(f"*/{LEASE_FILE}")), 60, "the analysis worker")
        [lease] = (data / "scratch").glob(f"*/{LEASE_FILE}")
        worker = int(lease.read_text())
    finally:
        first.terminate()  # SIGTERM: the clean way
        assert first.wait(timeout=30) == 0, log.read_text()[-3000:]
    assert not _running(worker)
    [session] = _sessions(store)
    assert session.analysis.state is AnalysisState.PENDING, session.analysis
    assert session.analysis.error.startswith("will retry: the analysis worker ")
    assert session.analysis.error.endswith("SIGTERM"), "stopped with its reason, to run again"

    second, _ = _start(data, log)
    try:
        _wait(lambda: _sessions(store)[0].analysis.state is AnalysisState.DONE, 90, "the analysis to run again")
        assert _sessions(store)[0].analysis.attempts == 2
    finally:
        second.terminate()
        assert second.wait(timeout=30) == 0, log.read_text()[-3000:]
    assert not any((data / "scratch").iterdir())
