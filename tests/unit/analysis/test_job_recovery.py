"""What a killed analysis leaves behind: a stale RUNNING or PENDING analysis, a worker, a scratch folder."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from analysis_support import xplane
from test_job import SESSION, _add_file, _analysis, _settle

from mldiag.config import ANALYSIS_REQUESTS
from mldiag.domain import AnalysisState
from mldiag.services.analysis_jobs import STALE_MARGIN_SECONDS, WORKER_PID_FILE, clean_up_after_a_stop
from mldiag.services.operator.maintenance import run_maintenance


@pytest.fixture
def requested(embedded, clock):
    _add_file(embedded, xplane("input_bound").read_bytes())
    return _settle(embedded, clock)


def _left_running(services, clock, attempts: int) -> None:
    """The analysis as a process killed mid-analysis leaves it: RUNNING, nobody working on it."""
    def started(session):
        session.analysis.state, session.analysis.attempts = AnalysisState.RUNNING, attempts
        session.analysis.start_time = clock()

    services.sessions.update(SESSION, started)


def _past_the_time_limit(services, clock) -> None:
    clock.advance(services.settings.analysis_timeout_seconds + STALE_MARGIN_SECONDS + 1)


def test_an_analysis_left_running_is_asked_for_again_after_the_time_limit(embedded, clock, requested):
    _left_running(embedded, clock, attempts=1)
    clock.advance(embedded.settings.analysis_timeout_seconds)
    run_maintenance(embedded)
    assert _analysis(embedded).state is AnalysisState.RUNNING, "within the time limit it may still be running"

    clock.advance(STALE_MARGIN_SECONDS + 1)
    assert "asked again for 1 stale analysis(es) and failed 0" in run_maintenance(embedded)
    retried = _analysis(embedded)
    assert retried.state is AnalysisState.PENDING and retried.attempts == 1
    assert retried.error.startswith("will retry: the analysis stopped without a result")
    again = embedded.bus.published[ANALYSIS_REQUESTS]
    assert len(again) == 2 and json.loads(again[-1].data) == json.loads(requested.data)


def test_an_analysis_left_running_after_its_last_attempt_fails_with_the_reason(embedded, clock, requested):
    _left_running(embedded, clock, attempts=embedded.settings.max_delivery_attempts)
    _past_the_time_limit(embedded, clock)
    assert "and failed 1" in run_maintenance(embedded)
    failed = _analysis(embedded)
    assert failed.state is AnalysisState.FAILED and failed.end_time == clock()
    assert failed.error == (f"the analysis stopped without a result (RUNNING for over "
                            f"{embedded.settings.analysis_timeout_seconds + STALE_MARGIN_SECONDS:g} s: its process "
                            f"was stopped); gave up after {embedded.settings.max_delivery_attempts} attempt(s)")
    assert len(embedded.bus.published[ANALYSIS_REQUESTS]) == 1


def test_a_request_never_served_is_asked_for_again_once_per_time_limit(embedded, clock, requested):
    _past_the_time_limit(embedded, clock)
    run_maintenance(embedded)
    pending = _analysis(embedded)
    assert pending.state is AnalysisState.PENDING and "was not served within" in pending.error
    assert len(embedded.bus.published[ANALYSIS_REQUESTS]) == 2
    run_maintenance(embedded)
    assert len(embedded.bus.published[ANALYSIS_REQUESTS]) == 2


_SLEEPER = "import time; time.sleep(120)"


def _process(*arguments: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _SLEEPER, *arguments], start_new_session=True)


def test_start_up_kills_only_the_workers_a_killed_predecessor_left_and_removes_scratch(embedded):
    root = embedded.settings.scratch_dir
    orphan_folder, unrelated_folder, elsewhere = (root / name for name in ("mldiag-session-a", "mldiag-session-b",
                                                                             "mldiag-session-c"))
    for folder in (orphan_folder, unrelated_folder, elsewhere):
        (folder / "profile").mkdir(parents=True)
        (folder / "profile" / "host.xplane.pb").write_bytes(b"\0" * 1024)
    orphan = _process("mldiag.entrypoints.analysis_worker", "--scratch", str(orphan_folder))
    unrelated = _process("something else", "--scratch", str(unrelated_folder))
    other_scratch = _process("mldiag.entrypoints.analysis_worker", "--scratch", str(root.parent / "not-ours"))
    try:
        (orphan_folder / WORKER_PID_FILE).write_text(str(orphan.pid))
        (unrelated_folder / WORKER_PID_FILE).write_text(str(unrelated.pid))
        (elsewhere / WORKER_PID_FILE).write_text(str(other_scratch.pid))
        time.sleep(0.2)  # each process has exec'd, so its command line is its own

        assert clean_up_after_a_stop(embedded.settings) == (1, 3)
        assert orphan.wait(timeout=5) < 0
        assert unrelated.poll() is None and other_scratch.poll() is None
        assert list(root.iterdir()) == []
        assert clean_up_after_a_stop(embedded.settings) == (0, 0)
    finally:
        for process in (orphan, unrelated, other_scratch):
            process.kill()
            process.wait()


def test_analyses_keep_their_scratch_under_the_data_dir_only_on_the_embedded_backend(embedded):
    assert embedded.settings.scratch_dir == embedded.settings.data_dir / "scratch"
    assert embedded.settings.model_copy(update={"backend": "gcp"}).scratch_dir is None
