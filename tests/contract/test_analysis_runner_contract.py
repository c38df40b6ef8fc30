"""Every analysis runner keeps the AnalysisRunner contract (``mldiag.ports``): the child process that ``mldiag up``
and the functions use, and the thread in this process that tests may use.

Real analyses of a committed profile; the failures are real too: a job past its
time limit, a profile that cannot be read, and a job the work cannot do.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from mldiag.adapters.analysis_runner.child_process import ChildProcessAnalysisRunner
from in_process_analysis_runner import InProcessAnalysisRunner
from mldiag.analysis.evidence import Analysis
from mldiag.analysis.fanout import HOST_EVIDENCE_FILE, HostAnalysis
from mldiag.analysis.report import ANALYSIS_FILE, SUMMARY_FILE
from mldiag.config import Settings
from mldiag.domain import HealthStatus
from mldiag.domain.errors import AnalysisFailed, AnalysisTimedOut, AnalysisWorkerCrashed
from mldiag.ports import AnalysisJob, AnalysisRunner

PROFILES = Path(__file__).resolve().parents[1] / "fixtures" / "profiles"
SOURCE = "gs://profiles/run1/plugins/profile/s1"


@pytest.fixture(params=["child_process", "in_process"])
def runner(request: pytest.FixtureRequest, tmp_path: Path) -> AnalysisRunner:
    settings = Settings(data_dir=tmp_path / "data")
    if request.param == "child_process":
        return ChildProcessAnalysisRunner(settings)
    return InProcessAnalysisRunner(settings)


def _host_file(tmp_path: Path, workload: str = "input_bound") -> Path:
    """A copy of the workload's committed profile, as a job's download is: the job's own."""
    (committed,) = (PROFILES / workload).rglob("*.xplane.pb")
    copy = tmp_path / "download" / committed.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(committed, copy))


def _job(tmp_path: Path, *inputs: Path, timeout_seconds: float = 300.0) -> AnalysisJob:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    return AnalysisJob(inputs=inputs, out=tmp_path / "out", scratch=scratch, timeout_seconds=timeout_seconds,
                       source=SOURCE, dashboard_uri="http://viewer/s1")


@pytest.mark.slow
def test_a_session_is_analysed_and_its_reports_written(runner, tmp_path):
    job = _job(tmp_path, _host_file(tmp_path))

    analysis = runner.analyse(job)

    assert analysis.status is HealthStatus.NEEDS_ATTENTION and analysis.profile.source == SOURCE
    assert analysis.findings[0].title.startswith("Host-bound: compute idle")
    assert analysis.metrics.step_time_ms > 0 and analysis.investigation.reasoner == "offline"
    assert Analysis.model_validate_json((job.out / ANALYSIS_FILE).read_text("utf-8")) == analysis
    assert "http://viewer/s1" in (job.out / SUMMARY_FILE).read_text("utf-8")


@pytest.mark.slow
def test_one_host_is_analysed_into_its_evidence(runner, tmp_path):
    job = _job(tmp_path, _host_file(tmp_path))

    evidence = runner.analyse_host(job)

    assert evidence.status is HealthStatus.NEEDS_ATTENTION and evidence.step_time_ms > 0
    assert HostAnalysis.model_validate_json((job.out / HOST_EVIDENCE_FILE).read_text("utf-8")) == evidence


@pytest.mark.slow
def test_a_session_analysed_after_an_earlier_one_is_compared_with_it(runner, tmp_path):
    earlier = runner.analyse(_job(tmp_path / "earlier", _host_file(tmp_path / "earlier")))
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(earlier.to_json_dict()), "utf-8")
    job = _job(tmp_path, _host_file(tmp_path, "compute_bound"))

    analysis = runner.analyse(dataclasses.replace(job, baseline=baseline, baseline_session="s0"))

    assert analysis.comparison is not None and analysis.comparison.baseline_session == "s0"


def test_a_job_past_its_time_limit_fails_for_good_saying_so(runner, tmp_path):
    with pytest.raises(AnalysisTimedOut) as stopped:
        runner.analyse(_job(tmp_path, _host_file(tmp_path), timeout_seconds=0.05))

    assert str(stopped.value) == "the analysis did not finish within 0.05 s" and stopped.value.permanent


def test_a_file_that_is_no_profile_fails_for_good_with_the_reason(runner, tmp_path):
    garbage = tmp_path / "host0.xplane.pb"
    garbage.write_bytes(b"\x0a\x05hello this is not an XSpace")

    with pytest.raises(AnalysisFailed) as failed:
        runner.analyse(_job(tmp_path, garbage))

    assert failed.value.permanent and not isinstance(failed.value, AnalysisWorkerCrashed)
    assert str(failed.value).startswith(f"unreadable profile: {garbage.name} is not an XSpace profile")


def test_a_job_the_work_cannot_do_crashes_with_its_error_to_retry(runner, tmp_path):
    host_file = _host_file(tmp_path)

    with pytest.raises(AnalysisWorkerCrashed) as crashed:
        runner.analyse_host(_job(tmp_path, host_file, host_file))

    assert not crashed.value.permanent
    assert str(crashed.value).endswith("ValueError: a host's analysis reads one host file, not 2")


def test_nothing_is_left_behind_in_a_scratch_folder_no_job_used(runner, tmp_path):
    assert runner.kill_left_behind(tmp_path) is False
    assert runner.stop_running() == 0
