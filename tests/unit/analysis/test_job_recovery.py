"""What a killed analysis leaves behind: a stale RUNNING or PENDING analysis, a worker, a scratch folder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from analysis_support import xplane
from test_job import SESSION, _add_file, _analysis, _settle

from mldiag.adapters.analysis_runner.child_process import LEASE_FILE
from mldiag.analysis.stopping import PRIVATE_FOLDER_PREFIX
from mldiag.config import ANALYSIS_REQUESTS
from mldiag.domain import AnalysisState
from mldiag.services.analysis_jobs import STALE_MARGIN_SECONDS, clean_up_after_a_stop
from mldiag.services.operator.maintenance import run_maintenance
from mldiag.services import unit_of_work


@pytest.fixture
def requested(embedded, clock):
    _add_file(embedded, xplane("input_bound").read_bytes())
    return _settle(embedded, clock)


def _left_running(services, clock, attempts: int) -> None:
    """The analysis as a process killed mid-analysis leaves it: RUNNING, nobody working on it."""
    def started(session):
        session.analysis.state, session.analysis.attempts = AnalysisState.RUNNING, attempts
        session.analysis.start_time = clock()

    unit_of_work.change(services, lambda unit: unit.sessions.update(SESSION, started))


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


# A host whose runner analyses a profile (given on the command line) in a scratch folder (likewise).
_PREDECESSOR = """
import sys
from pathlib import Path

from mldiag.adapters.analysis_runner.child_process import ChildProcessAnalysisRunner
from mldiag.config import Settings
from mldiag.ports import AnalysisJob

profile, scratch = map(Path, sys.argv[1:])
ChildProcessAnalysisRunner(Settings()).analyse(AnalysisJob(inputs=(profile,), out=scratch / "report", scratch=scratch,
                                                           timeout_seconds=300))
"""


def _running(pid: int) -> bool:
    """Whether the process runs (a killed one nobody has reaped yet is a zombie: it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _ends_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _orphan_worker(scratch: Path) -> int:
    """The pid of a worker whose host was killed (SIGKILL) while it analysed in ``scratch``."""
    profile = scratch / "profile" / "host0.xplane.pb"
    profile.parent.mkdir(parents=True)
    shutil.copyfile(xplane("unfused_small_ops"), profile)
    host = subprocess.Popen([sys.executable, "-c", _PREDECESSOR, str(profile), str(scratch)])
    deadline = time.monotonic() + 30
    while not list(scratch.glob(f"{PRIVATE_FOLDER_PREFIX}*")):  # the worker has its job, and analyses
        assert host.poll() is None and time.monotonic() < deadline, "the predecessor's worker did not start"
        time.sleep(0.02)
    host.kill()
    host.wait()
    return int((scratch / LEASE_FILE).read_text())


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)


def test_the_runner_kills_the_worker_a_killed_host_left_and_trusts_no_stale_lease(embedded, tmp_path):
    orphan_scratch, stale_scratch = tmp_path / "orphan", tmp_path / "stale"
    orphan = _orphan_worker(orphan_scratch)
    unrelated = _sleeper()
    try:
        stale_scratch.mkdir()
        # A lease its worker no longer holds, naming a process that is no worker (its pid reused, say).
        (stale_scratch / LEASE_FILE).write_text(str(unrelated.pid))
        assert _running(orphan), "the killed host's worker lives on, for now"

        assert embedded.analysis_runner.kill_left_behind(orphan_scratch) is True
        assert _ends_within(orphan, 0.5), "killed, not left to finish its analysis, which takes seconds more"
        assert list(orphan_scratch.glob(f"{PRIVATE_FOLDER_PREFIX}*")), "killed at once: no time to clean up"
        assert embedded.analysis_runner.kill_left_behind(stale_scratch) is False
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()
        if _running(orphan):
            os.killpg(orphan, signal.SIGKILL)


def test_start_up_kills_only_the_workers_a_killed_predecessor_left_and_removes_scratch(embedded):
    root = embedded.settings.scratch_dir
    orphan_folder, stale_folder, idle_folder = (root / name for name in ("mldiag-session-a", "mldiag-session-b",
                                                                         "mldiag-session-c"))
    for folder in (stale_folder, idle_folder):
        (folder / "profile").mkdir(parents=True)
    orphan = _orphan_worker(orphan_folder)
    unrelated = _sleeper()
    try:
        (stale_folder / LEASE_FILE).write_text(str(unrelated.pid))

        assert clean_up_after_a_stop(embedded) == (1, 3)
        assert _ends_within(orphan, 0.5) and unrelated.poll() is None
        assert list(root.iterdir()) == []
        assert clean_up_after_a_stop(embedded) == (0, 0)
    finally:
        unrelated.kill()
        unrelated.wait()
        if _running(orphan):
            os.killpg(orphan, signal.SIGKILL)


def test_analyses_keep_their_scratch_under_the_data_dir_only_on_the_embedded_backend(embedded):
    assert embedded.settings.scratch_dir == embedded.settings.data_dir / "scratch"
    assert embedded.settings.model_copy(update={"backend": "gcp"}).scratch_dir is None
