"""The official SDK's v1alpha client (its Google-mode ``ControlPlaneClient``) against our API.

The client is used unchanged; only its Google credentials (a fixed token) and
its base URL (ours) are set, and its HTTP calls are served by the app in-process.
This is the call sequence behind ``machinelearning_run(...)`` and ``xprof()``
start/stop in Google mode, including the multi-host session race it handles.
"""

from __future__ import annotations

import time

import google.auth
import pytest
import requests
from google.oauth2.credentials import Credentials
from google_cloud_mldiagnostics.clients.control_plane_client import ControlPlaneClient

from api_suite import WsgiAdapter
from mldiag.entrypoints.http.app import create_app

BASE = "http://sdk-v1alpha.test/v1alpha"
PROJECT, REGION = "sdk-project", "us-central1"


@pytest.fixture
def client(services, monkeypatch) -> ControlPlaneClient:
    monkeypatch.setattr(google.auth, "default", lambda scopes=None: (Credentials(token="test-token"), PROJECT))
    adapter, original = WsgiAdapter(create_app(services)), requests.Session.get_adapter
    monkeypatch.setattr(requests.Session, "get_adapter",
                        lambda session, url: adapter if url.startswith(BASE) else original(session, url))
    client = ControlPlaneClient(project_id=PROJECT, environment="prod", location=REGION)
    client.base_url = BASE
    client.ml_runs_path = f"{BASE}/projects/{PROJECT}/locations/{REGION}/machineLearningRuns"
    return client


def _create_run(client: ControlPlaneClient) -> dict:
    return client.create_ml_run(
        name="train-v1", display_name="train v1", run_phase="ACTIVE",
        configs={"softwareConfigs": {"framework": "JAX"}, "hardwareConfigs": {}, "userConfigs": {"lr": 0.1}},
        tools=[{"xprof": {}}], artifacts={"gcsPath": "gs://profiles/exp"}, run_group="sweep-1",
        labels={"created_by": "diagon_sdk", "framework": "jax"}, orchestrator="CUSTOM",
        workload_details={"id": "w-1", "display_name": "W", "create_time": "2026-01-01T00:00:00Z"},
        workload_targets=[{"hostname": "vm-0", "display_name": "vm-0"}],
    )


def test_run_lifecycle_through_operations_and_etags(client):
    created = _create_run(client)
    assert created["name"] == f"projects/{PROJECT}/locations/{REGION}/machineLearningRuns/train-v1"
    assert created["runSet"] == "sweep-1" and created["tools"] == [{"xprof": {}}]
    assert created["configs"]["userConfigs"] == {"lr": 0.1}
    assert created["workloadDetails"]["targets"] == [{"hostname": "vm-0", "display_name": "vm-0"}]

    with pytest.raises(requests.HTTPError) as raised:
        _create_run(client)
    assert raised.value.response.status_code == 409  # the SDK then updates the existing run

    assert client.get_ml_run("train-v1")["etag"] == created["etag"]
    completed = client.update_ml_run(name="train-v1", run_phase="COMPLETED")  # sends the cached run and its etag
    assert completed["runPhase"] == "COMPLETED" and completed["endTime"]
    assert completed["runSet"] == "sweep-1" and completed["labels"]["framework"] == "jax"


def test_a_rerun_makes_the_completed_run_active_again(client):
    _create_run(client)
    client.update_ml_run(name="train-v1", run_phase="COMPLETED")
    with pytest.raises(requests.HTTPError):
        _create_run(client)  # the same job started again: the SDK's create meets the run, then it updates
    again = client.update_ml_run(name="train-v1", run_phase="ACTIVE", display_name="train v1")
    assert again["runPhase"] == "ACTIVE" and "endTime" not in again
    assert again["restartCount"] == 1 and again["lastRestartTime"]


def test_programmatic_sessions_from_two_hosts(client):
    _create_run(client)
    folder = "gs://profiles/exp/train-v1/s1"
    start = time.time()
    session = dict(ml_run_id="train-v1", profiler_session_id="s1", gsc_file_path=folder, start_time=start)

    started = client.create_profiler_session(profiler_target="vm-0", end_time=None, session_phase="ACTIVE", **session)
    assert started["done"] is True
    assert started["response"]["kind"] == "KIND_PROGRAMMATIC"
    assert started["response"]["storageFolderUri"] == "gs://profiles/exp/train-v1/plugins/profile/s1"
    assert "endTime" not in started["response"]["targetSessions"]["vm-0"]  # the SDK's year 1 means unset

    # The second host creates the same session: 409 with the existing resource, then it updates instead.
    client.create_profiler_session(profiler_target="vm-1", end_time=None, session_phase="ACTIVE", **session)
    stopped = client.update_profiler_session(profiler_target="vm-0", end_time=start + 2,
                                             session_phase="SUCCEEDED", **session)
    targets = stopped["response"]["targetSessions"]
    assert set(targets) == {"vm-0", "vm-1"}
    assert targets["vm-0"]["sessionPhase"] == "SUCCEEDED" and targets["vm-0"]["endTime"]
    assert targets["vm-1"]["sessionPhase"] == "ACTIVE"
    assert client.get_operation(stopped["name"])["done"] is True
