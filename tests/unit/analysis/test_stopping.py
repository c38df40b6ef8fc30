"""An analysis stopped by its time limit or a signal: a one-line reason, its exit status, nothing left behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from analysis_support import xplane
from typer.testing import CliRunner

from mldiag.adapters.analysis_runner.child_process import LEASE_FILE, ChildProcessAnalysisRunner
from mldiag.cli.main import app
from mldiag.config import Settings
from mldiag.domain.errors import AnalysisFailed, AnalysisWorkerCrashed
from mldiag.ports import AnalysisJob

MLDIAG = str(Path(sys.executable).parent / "mldiag")


def _environment(tmp_path: Path) -> dict[str, str]:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    return {**os.environ, "TMPDIR": str(temporary), "PYTHONUNBUFFERED": "1"}


def _ours_left(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "tmp").glob("mldiag-*"))


def _processes_using(folder: Path) -> list[int]:
    """Processes whose command line names something in ``folder`` (the reader of the private copy, say)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if os.fsencode(folder) in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def _wait_for(pattern: str, folder: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not list(folder.glob(pattern)):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)


@pytest.mark.slow
def test_analyze_stops_at_its_timeout_with_one_line_and_no_scratch_left(tmp_path):
    started = time.monotonic()
    stopped = subprocess.run([MLDIAG, "analyze", str(xplane("compute_bound")), "--out", str(tmp_path / "out"),
                              "--timeout", "300ms"], env=_environment(tmp_path), capture_output=True, text=True,
                             timeout=120)
    assert stopped.returncode == 124, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == "mldiag analyze: the analysis did not finish within 300ms"
    assert "Traceback" not in stopped.stderr and time.monotonic() - started < 30
    assert _ours_left(tmp_path) == [] and not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_analyze_stopped_by_a_signal_removes_its_scratch_and_stops_its_processes(tmp_path, signum, status):
    environment = _environment(tmp_path)
    process = subprocess.Popen([MLDIAG, "analyze", str(xplane("compute_bound")), "--out", str(tmp_path / "out")],
                               env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for("mldiag-analyze-*/mldiag-analysis-*", tmp_path / "tmp", process)  # the private copy is there
    process.send_signal(signum)
    _, errors = process.communicate(timeout=60)
    assert process.returncode == status, errors
    assert errors.strip().splitlines()[-1] == f"mldiag analyze: stopped by {signal.Signals(signum).name}"
    assert _ours_left(tmp_path) == [] and _processes_using(tmp_path / "tmp") == []


def _analysing(tmp_path: Path) -> tuple[ChildProcessAnalysisRunner, Path, list[BaseException]]:
    """A child process's runner analysing in the background once its worker has made its private copy: the
    runner, the job's scratch folder, and (once it has returned) how the analysis failed."""
    scratch = tmp_path / "scratch"
    (scratch / "profile").mkdir(parents=True)
    profile = Path(shutil.copyfile(xplane("compute_bound"), scratch / "profile" / "host0.xplane.pb"))
    runner = ChildProcessAnalysisRunner(Settings(data_dir=tmp_path / "data"))
    failed: list[BaseException] = []

    def analyse() -> None:
        try:
            runner.analyse(AnalysisJob(inputs=(profile,), out=tmp_path / "out", scratch=scratch, timeout_seconds=60))
        except AnalysisFailed as error:
            failed.append(error)

    analysing = threading.Thread(target=analyse, daemon=True)
    analysing.start()
    deadline = time.monotonic() + 60
    while not list(scratch.glob("mldiag-analysis-*")):
        assert analysing.is_alive() and time.monotonic() < deadline, failed
        time.sleep(0.02)
    return runner, scratch, failed


def _failure(failed: list[BaseException]) -> BaseException:
    deadline = time.monotonic() + 60
    while not failed:
        assert time.monotonic() < deadline, "the analysis did not fail"
        time.sleep(0.02)
    return failed[0]


@pytest.mark.slow
def test_a_worker_its_runner_stops_removes_its_private_copy_and_fails_to_be_retried(tmp_path):
    runner, scratch, failed = _analysing(tmp_path)

    assert runner.stop_running() == 1

    stopped = _failure(failed)
    assert isinstance(stopped, AnalysisWorkerCrashed) and not stopped.permanent
    assert str(stopped) == "the analysis worker exited with 143: stopped by SIGTERM"
    assert not list(scratch.glob("mldiag-analysis-*")) and _processes_using(scratch) == []


@pytest.mark.slow
def test_a_worker_killed_by_sigkill_fails_for_good_as_out_of_memory(tmp_path):
    _, scratch, failed = _analysing(tmp_path)

    os.killpg(int((scratch / LEASE_FILE).read_text()), signal.SIGKILL)  # as the out-of-memory killer would

    killed = _failure(failed)
    assert isinstance(killed, AnalysisWorkerCrashed) and killed.permanent
    assert str(killed) == ("the analysis was killed (SIGKILL): the profile needs more memory than this function "
                           "has")


@pytest.mark.parametrize(("value", "says"), [("soon", "not a duration: 'soon'"), ("0s", "must be longer than 0s")])
def test_a_timeout_that_is_no_positive_duration_is_a_usage_error(value, says):
    result = CliRunner().invoke(app, ["analyze", "anything", "--timeout", value])
    assert result.exit_code == 2 and says in result.output
