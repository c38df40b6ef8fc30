"""Automatic capture end to end on ``mldiag up``: a real JAX job slows down, is captured, recovers.

The job is the demo's (:mod:`mldiag.local.demo.workload`): the official SDK registers
its run, its profiler server is a target, and once told it reports every step
time to ``:reportMetrics`` and then sleeps 30 % longer per step. The degradation
analyzer opens a monitored event, ``on_alert`` captures the target on demand
(the run has no continuous profiling), the session is analysed, and the event
closes when the job is back to its healthy pace. The report of the automatic
session says what changed against the run's earlier, healthy on-demand session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from capture_support import (
    ControlPlane, analysed, mldiag, mldiag_json, profile_file, register_target, session, wait_for,
)
from mldiag.local.demo.processes import Workload

pytestmark = pytest.mark.slow

HEALTHY_STEPS = 80  # well past the analyzer's warm-up (5 skipped, 30 for the baseline, a 7-point window)


class Job:
    def __init__(self, workload: Workload, run: str):
        self.workload, self.run = workload, run

    def events(self, control_plane: ControlPlane) -> list[dict]:
        return mldiag_json(control_plane, "monitored-events", "list", "--machine-learning-run", self.run)

    def event(self, control_plane: ControlPlane, event_id: str) -> dict:
        return mldiag_json(control_plane, "monitored-events", "describe", event_id, "--machine-learning-run", self.run)


@pytest.fixture(scope="module")
def job(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    """The job, registered, its target known, a healthy session captured and analysed, auto-capture at 1 s."""
    runs_url = f"{control_plane.url}/v1alpha/projects/local-project/locations/local/machineLearningRuns"
    log = tmp_path_factory.mktemp("job") / "workload.log"
    with Workload("auto-capture-e2e", control_plane.url, runs_url, control_plane.bucket_folder, "", log) as workload:
        run = workload.wait_for("ready", 120)["run"]
        register_target(control_plane, run, "worker-0", workload.profiler_port)
        healthy = mldiag(control_plane, "profiler-session", "capture", "healthy", "--machine-learning-run", run,
                         "--duration", "1s")
        assert healthy.returncode == 0, healthy.stderr
        wait_for(lambda: analysed(control_plane, run, "healthy"), "the healthy session's analysis")
        mldiag_json(control_plane, "machine-learning-run", "set-auto-capture", run, "--duration", "1s")
        yield Job(workload, run)


def test_a_slowdown_opens_an_event_and_one_automatic_capture_linked_to_it(control_plane, job):
    assert job.events(control_plane) == []  # the healthy capture and its traced steps are not a degradation
    job.workload.send(f"degrade {HEALTHY_STEPS}")
    job.workload.wait_for("slowed", 60)

    (event,) = wait_for(lambda: job.events(control_plane), "the analyzer's event")
    assert event["name"].endswith("/monitoredEvents/degradation-1")
    assert event["type"] == "PERFORMANCE_DEGRADATION" and event["startTime"] and "endTime" not in event
    (report,) = event["analyzerReports"]
    assert report["analyzer"] == "mldiag-degradation" and report["detectionState"] == "DETECTED"
    assert "above the baseline" in report["details"]

    event = wait_for(lambda: (e := job.event(control_plane, "degradation-1"))["profilerSessions"] and e,
                     "on_alert's capture")
    (session_name,) = event["profilerSessions"]
    session_id = session_name.rsplit("/", 1)[1]
    captured = wait_for(lambda: (s := session(control_plane, job.run, session_id))["targetSessions"]
                        .get("worker-0", {}).get("sessionPhase") not in (None, "ACTIVE") and s,
                        "the automatic capture")
    assert captured["autoCaptured"] is True and captured["monitoredEvents"] == [event["name"]]
    assert captured["kind"] == "KIND_ON_DEMAND" and captured["duration"] == "1.000s"
    assert captured["targetSessions"]["worker-0"]["sessionPhase"] == "SUCCEEDED"
    assert profile_file(control_plane, job.run, session_id, "worker-0").stat().st_size > 10_000


def test_the_automatic_session_is_analysed_against_the_earlier_healthy_one(control_plane, job):
    (session_name,) = job.event(control_plane, "degradation-1")["profilerSessions"]
    session_id = session_name.rsplit("/", 1)[1]
    described = wait_for(lambda: analysed(control_plane, job.run, session_id), "the automatic session's analysis")
    folder = f"gs://mldiag-profiles/{job.run}/plugins/profile/{session_id}/"
    report, analysis_uri = described["analysis"]["reportUri"], described["analysis"]["analysisUri"]
    assert report.startswith(folder) and report.endswith("/summary.html")
    analysis = json.loads(stored(control_plane, analysis_uri))
    assert analysis["findings"], "the slowed job's profile has nothing to say"

    comparison = analysis["comparison"]
    assert comparison is not None, "no comparison with the healthy session"
    assert comparison["baseline_session"].endswith("/profilerSessions/healthy")
    step = comparison["step_time_ms"]
    # The steps sleep 30 % longer; how much of it XProf counts as step time on a CPU varies with the window.
    assert step["after"] > step["before"] and comparison["headline"][0].startswith("Step time rose from"), (
        comparison["headline"])
    page = stored(control_plane, report)
    assert "What changed" in page and "Step time rose from" in page


def stored(control_plane: ControlPlane, uri: str) -> str:
    return (control_plane.bucket_folder / uri.removeprefix("gs://mldiag-profiles/")).read_text()


def test_the_event_closes_when_the_job_recovers_and_nothing_more_is_captured(control_plane, job):
    job.workload.send("recover")
    job.workload.wait_for("recovered", 60)
    event = wait_for(lambda: (e := job.event(control_plane, "degradation-1")).get("endTime") and e,
                     "the event to close")
    assert event["analyzerReports"][0]["detectionState"] == "NOT_DETECTED"
    assert len(event["profilerSessions"]) == 1
    # A blip after the recovery may open a new event; the cooldown keeps it from capturing.
    sessions = mldiag_json(control_plane, "profiler-session", "list", "--machine-learning-run", job.run)
    assert sorted(s["name"].rsplit("/", 1)[1] for s in sessions) == ["auto-degradation-1", "healthy"]
