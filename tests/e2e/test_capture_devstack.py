"""Capture on the devstack: the node agent captures a real JAX job on request and on a slowdown alert.

The devstack is the cloud in small: the Firestore and Pub/Sub emulators,
fake-gcs-server as the profiles bucket, and the deployable functions behind
push subscriptions, ``control_plane`` among them (``MLDIAG_API_URL``). A
capture run by ``dispatch_capture`` has the workload's profiler server write
straight to ``gs://``, which a JAX process cannot do against fake-gcs-server;
what is proven here is the node agent's path, as on a private cluster:
``mldiag agent`` heartbeats the job's profiler port as a target through
``control_plane``, claims the capture task, lets the profiler write into its
scratch folder and uploads the file with the Cloud Storage client. The
finalize notification then reaches ``register_session``; the session names its
one target, so it settles as soon as that file is in, and ``analyze_session``
writes the report next to the profile.

One job serves the module, in order: the demo's workload (the official SDK
registers its run through ``control_plane``'s ``/v1`` routes, and it reports
step times once told to slow down). Its on-demand capture is the healthy
session that the automatic capture of its slowdown (the degradation analyzer's
alert on ``monitoring-alerts``, then ``on_alert``) is compared with; the job
is killed last, to see the agent report it unreachable.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from capture_support import MLDIAG, analysed, mldiag, mldiag_json, session, wait_for
from mldiag.bootstrap import build
from mldiag.services.dependencies import Services
from mldiag.local.demo.processes import Workload

pytestmark = [pytest.mark.slow, pytest.mark.emulator]

NODE = "node-a"
TARGET = f"{NODE}-0"  # the agent's target id: hostname and node index
HEALTHY_STEPS = 80  # well past the analyzer's warm-up (5 skipped, 30 for the baseline, a 7-point window)


@dataclass(frozen=True)
class Cloud:
    """The devstack's control plane (the ``control_plane`` function), and its Firestore and bucket."""

    url: str
    services: Services

    def profile_uri(self, run: str, session_id: str) -> str:
        return f"{self.services.settings.bucket_uri}/{run}/plugins/profile/{session_id}/{TARGET}.xplane.pb"

    def read(self, uri: str) -> str:
        return self.services.blobs.read_bytes(uri).decode()


@dataclass(frozen=True)
class Job:
    workload: Workload
    run: str


@pytest.fixture(scope="module")
def cloud(devstack_module: dict[str, str]) -> Cloud:
    """The devstack, its environment set for the module (the CLI and the agent take theirs from it)."""
    if "MLDIAG_API_URL" not in devstack_module:
        pytest.fail("the devstack exports no MLDIAG_API_URL: restart scripts/devstack", pytrace=False)
    return Cloud(devstack_module["MLDIAG_API_URL"], build())


@pytest.fixture(scope="module")
def job(cloud: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    """The job, its run registered by the SDK, and ``mldiag agent`` serving its profiler port on node-a."""
    settings = cloud.services.settings
    runs_url = f"{cloud.url}/v1alpha/projects/{settings.project}/locations/{settings.location}/machineLearningRuns"
    logs = tmp_path_factory.mktemp("capture-devstack")
    # The SDK derives the run's id from the job's name: a devstack kept running between test runs keeps the old one.
    name = f"capture-devstack-{uuid.uuid4().hex[:8]}"
    with Workload(name, cloud.url, runs_url, settings.bucket_uri, "", logs / "workload.log") as workload:
        run = workload.wait_for("ready", 120)["run"]
        with (logs / "agent.log").open("w") as agent_log:
            agent = subprocess.Popen(
                [MLDIAG, "agent", "--machine-learning-run", run, "--port", str(workload.profiler_port),
                 "--hostname", NODE, "--heartbeat-interval", "1", "--poll-interval", "0.2", "--api-url", cloud.url],
                env={**os.environ, "MLDIAG_LOG_FORMAT": "json"}, stdout=subprocess.DEVNULL, stderr=agent_log)
        try:
            # Its banner comes once SIGTERM is handled: from then on it must stop cleanly.
            wait_for(lambda: f"mldiag agent {NODE}:" in (logs / "agent.log").read_text(), "the agent to start")
            yield Job(workload, run)
        finally:
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=30) == 0, (logs / "agent.log").read_text()[-3000:]


def test_the_agent_registers_the_job_through_the_control_plane_function(cloud, job):
    (target,) = wait_for(lambda: mldiag_json(cloud, "profiler-target", "list", "--machine-learning-run", job.run),
                         "the agent's heartbeat")
    assert target["name"].endswith(f"/machineLearningRuns/{job.run}/profilerTargets/{TARGET}")
    assert target["agent"] == NODE and target["state"] == "ACTIVE"
    assert target["profilerAddress"] == f"{NODE}:{job.workload.profiler_port}"


def test_an_on_demand_capture_is_uploaded_by_the_agent_registered_and_analysed(cloud, job):
    captured = mldiag(cloud, "profiler-session", "capture", "healthy", "--machine-learning-run", job.run,
                      "--duration", "2s", "--format", "json")
    assert captured.returncode == 0, captured.stderr  # the operation finished without error
    assert json.loads(captured.stdout)["targetSessions"][TARGET]["sessionPhase"] == "SUCCEEDED"
    uri = cloud.profile_uri(job.run, "healthy")
    assert cloud.services.blobs.stat(uri).size > 10_000

    described = wait_for(lambda: analysed(cloud, job.run, "healthy"), "the healthy session's analysis")
    assert described["hostFiles"][TARGET]["uri"] == uri
    folder = uri.rsplit("/", 1)[0]
    analysis = described["analysis"]
    reports = f"{folder}/mldiag/{analysis['generationSet']}"
    assert (analysis["reportUri"], analysis["analysisUri"]) == (f"{reports}/summary.html",
                                                                f"{reports}/analysis.json")
    report = json.loads(cloud.read(analysis["analysisUri"]))
    assert report["status"] == analysis["health"] and report["findings"]
    assert [host["host"] for host in report["hosts"]] == [TARGET] and report["hosts"][0]["steps"] > 0
    assert "Profile analysis" in cloud.read(analysis["reportUri"])


def test_a_slowdown_is_captured_through_the_agent_and_compared_with_the_healthy_session(cloud, job):
    mldiag_json(cloud, "machine-learning-run", "set-auto-capture", job.run, "--duration", "1s")
    job.workload.send(f"degrade {HEALTHY_STEPS}")
    job.workload.wait_for("slowed", 60)

    (event,) = wait_for(lambda: [e for e in mldiag_json(cloud, "monitored-events", "list", "--machine-learning-run",
                                                        job.run) if e.get("profilerSessions")],
                        "the analyzer's event and on_alert's capture", timeout_s=90)
    assert event["name"].endswith(f"/machineLearningRuns/{job.run}/monitoredEvents/degradation-1")
    assert event["type"] == "PERFORMANCE_DEGRADATION" and event["analyzerReports"][0]["detectionState"] == "DETECTED"
    (session_name,) = event["profilerSessions"]
    session_id = session_name.rsplit("/", 1)[1]
    captured = wait_for(lambda: (s := session(cloud, job.run, session_id))["targetSessions"]
                        .get(TARGET, {}).get("sessionPhase") not in (None, "ACTIVE") and s,
                        "the agent's automatic capture")
    assert captured["autoCaptured"] is True and captured["monitoredEvents"] == [event["name"]]
    assert captured["targetSessions"][TARGET]["sessionPhase"] == "SUCCEEDED"

    described = wait_for(lambda: analysed(cloud, job.run, session_id), "the automatic session's analysis")
    assert described["hostFiles"][TARGET]["uri"] == cloud.profile_uri(job.run, session_id)
    comparison = json.loads(cloud.read(described["analysis"]["analysisUri"]))["comparison"]
    assert comparison is not None, "no comparison with the healthy session"
    assert comparison["baseline_session"].endswith(f"/machineLearningRuns/{job.run}/profilerSessions/healthy")
    # The steps sleep 30 % longer; how much of it XProf counts as step time on a CPU varies with the window.
    assert comparison["step_time_ms"]["after"] > comparison["step_time_ms"]["before"]
    assert comparison["headline"][0].startswith("Step time rose from"), comparison["headline"]
    page = cloud.read(described["analysis"]["reportUri"])
    assert "What changed" in page and "Step time rose from" in page


def test_the_event_closes_when_the_job_recovers(cloud, job):
    job.workload.send("recover")
    job.workload.wait_for("recovered", 60)
    event = wait_for(lambda: (e := mldiag_json(cloud, "monitored-events", "describe", "degradation-1",
                                               "--machine-learning-run", job.run)).get("endTime") and e,
                     "the event to close")
    assert event["analyzerReports"][0]["detectionState"] == "NOT_DETECTED"
    assert len(event["profilerSessions"]) == 1


def test_a_job_that_exited_fails_the_agents_capture_as_unreachable(cloud, job):
    job.workload.process.kill()  # not a clean stop: the run stays ACTIVE, its target registered
    job.workload.process.wait(timeout=30)
    captured = mldiag(cloud, "profiler-session", "capture", "after-exit", "--machine-learning-run", job.run,
                      "--duration", "1s")
    assert captured.returncode == 1, captured.stdout
    error = session(cloud, job.run, "after-exit")["targetSessions"][TARGET]["error"]
    assert error.startswith(f"unreachable: cannot connect to 127.0.0.1:{job.workload.profiler_port}"), error

