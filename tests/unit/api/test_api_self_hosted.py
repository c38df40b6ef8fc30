"""The official SDK's self-hosted contract, driven by the SDK's own client class.

``SelfHostedDiagonServiceClient`` is what ``machinelearning_run(base_url=...)``
uses; here its HTTP session is served by the app in-process, so these tests
exercise the exact requests the SDK sends.
"""

from __future__ import annotations

import pytest
import requests
from google_cloud_mldiagnostics.clients.self_hosted_diagon_service_client import SelfHostedDiagonServiceClient
from google_cloud_mldiagnostics.custom_types.mlrun_types import RunPhase as SdkRunPhase

from api_suite import RUNS, WsgiAdapter
from mldiag.entrypoints.http.app import create_app

SDK_URL = "http://sdk.test"
LOGICAL_ID = "7a1c5e0f-3b2d-4c8e-9f10-123456789abc"  # the SDK derives a UUID from namespace/workload/cluster


@pytest.fixture
def sdk(services) -> SelfHostedDiagonServiceClient:
    client = SelfHostedDiagonServiceClient(control_plane_url=SDK_URL)
    client.session.mount(SDK_URL, WsgiAdapter(create_app(services)))
    return client


def _register(sdk: SelfHostedDiagonServiceClient, **overrides) -> dict:
    arguments = dict(name=LOGICAL_ID, display_name="train", run_phase="ACTIVE",
                     artifacts={"gcsPath": "gs://profiles/team"}, workload_details={"id": "train"})
    return sdk.create_ml_run(**{**arguments, **overrides})


def test_registration_answers_with_the_run_id_and_a_cluster_id(sdk, api):
    response = _register(sdk)
    assert response["name"] == f"machineLearningRuns/{LOGICAL_ID}"
    assert response["clusterId"] == "default"
    assert response["workload"] == {"workloadId": "train", "displayName": "train", "state": "STATE_RUNNING"}

    run = api.run(LOGICAL_ID).json
    assert run["displayName"] == "train" and run["runPhase"] == "ACTIVE"
    assert run["logicalId"] == LOGICAL_ID and run["creator"] == "CREATOR_MANUAL"
    assert run["artifacts"]["gcsPath"] == "gs://profiles/team"
    assert run["workloadDetails"]["custom"] == {"workloadId": "train", "displayName": "train"}


def test_registering_again_finds_the_same_run(sdk, api):
    first = _register(sdk)
    again = _register(sdk, display_name="train (restarted)")
    assert again["name"] == first["name"]
    runs = api.request("GET", RUNS).json["machineLearningRuns"]
    assert [r["displayName"] for r in runs] == ["train (restarted)"]


@pytest.mark.parametrize("ended", [SdkRunPhase.PHASE_COMPLETED, SdkRunPhase.PHASE_FAILED])
def test_the_same_job_started_again_makes_its_ended_run_active_again(sdk, api, ended):
    run_id = _register(sdk)["name"]
    sdk.update_ml_run(name=run_id, run_phase=ended)
    assert api.run(LOGICAL_ID).json["endTime"]

    again = _register(sdk)  # the rerun: the SDK derives the same logical id from the same name
    assert again["name"] == run_id and again["workload"]["state"] == "STATE_RUNNING"
    run = api.run(LOGICAL_ID).json
    assert run["runPhase"] == "ACTIVE" and "endTime" not in run
    assert run["restartCount"] == 1 and run["lastRestartTime"]

    sdk.update_ml_run(name=run_id, run_phase=SdkRunPhase.PHASE_COMPLETED)
    assert api.run(LOGICAL_ID).json["runPhase"] == "COMPLETED"


def test_registering_a_run_that_is_still_active_is_no_restart(sdk, api):
    _register(sdk)
    _register(sdk)  # another process of the same job, or a job that died without reporting its end
    run = api.run(LOGICAL_ID).json
    assert run["runPhase"] == "ACTIVE" and run["restartCount"] == 0


def test_logical_ids_that_are_not_ids_get_a_stable_valid_id(sdk):
    first = _register(sdk, name="My Experiment #1")
    assert first["name"] == _register(sdk, name="My Experiment #1")["name"]
    assert first["name"].startswith("machineLearningRuns/my-experiment-1-")


@pytest.mark.parametrize(("phase", "state", "run_phase"), [
    (SdkRunPhase.PHASE_COMPLETED, "STATE_SUCCEEDED", "COMPLETED"),
    (SdkRunPhase.PHASE_FAILED, "STATE_FAILED", "FAILED"),
])
def test_phase_updates_end_the_run(sdk, api, phase, state, run_phase):
    run_id = _register(sdk)["name"]
    assert sdk.update_ml_run(name=run_id, run_phase=phase)["workload"]["state"] == state
    run = api.run(LOGICAL_ID).json
    assert run["runPhase"] == run_phase and run["endTime"]


def test_a_run_the_sdk_ends_ends_its_targets_registered_without_an_agent_and_a_restart_brings_them_back(
        sdk, services):
    from mldiag.domain.resources import ProfilerTarget, TargetState

    run_id = _register(sdk)["name"].rsplit("/", 1)[-1]
    run_name = f"{RUNS}/{run_id}".removeprefix("/v1alpha/")
    target = services.targets.create(ProfilerTarget(name=f"{run_name}/profilerTargets/t0", hostname="h",
                                                    profiler_address="127.0.0.1:9999"))
    sdk.update_ml_run(name=f"machineLearningRuns/{run_id}", run_phase=SdkRunPhase.PHASE_COMPLETED)
    assert services.targets.get(target.name).state is TargetState.GONE
    _register(sdk)  # the same job started again
    assert services.targets.get(target.name).state is TargetState.ACTIVE


def test_phase_update_of_an_unknown_run_is_not_found(sdk):
    with pytest.raises(requests.HTTPError) as raised:
        sdk.update_ml_run(name="machineLearningRuns/ghost", run_phase=SdkRunPhase.PHASE_COMPLETED)
    assert raised.value.response.status_code == 404


def test_a_lost_creation_race_is_a_409_the_sdk_recovers_from(sdk, services, monkeypatch):
    _register(sdk)
    # The other registration's read saw no run; its commit then meets the one just created.
    monkeypatch.setattr(services.runs, "find_in", lambda transaction, name: None)
    with pytest.raises(requests.HTTPError) as raised:
        _register(sdk)
    assert raised.value.response.status_code == 409
    assert raised.value.response.json()["error"]["status"] == "ALREADY_EXISTS"
    monkeypatch.undo()
    # What the SDK does on 409: a phase update to STATE_RUNNING on the same id.
    assert sdk.update_ml_run(name=LOGICAL_ID, run_phase=SdkRunPhase.PHASE_ACTIVE)["workload"]["state"] == \
        "STATE_RUNNING"


def test_a_local_bucket_folder_is_stored_as_its_gs_uri(sdk, api, services):
    folder = services.blobs.buckets / "mldiag-profiles" / "team"
    _register(sdk, artifacts={"gcsPath": str(folder)})
    assert api.run(LOGICAL_ID).json["artifacts"]["gcsPath"] == "gs://mldiag-profiles/team"


def test_agent_info_reports_the_configured_cluster(make_api):
    assert make_api(cluster_id="gke-east").request("GET", "/v1/agent-info").json == {"cluster_id": "gke-east"}


@pytest.mark.parametrize(("path", "body", "mentions"), [
    ("/v1/machineLearningRuns?allow_missing=true", {"displayName": "x"}, "logicalId"),
    ("/v1/machineLearningRuns?allow_missing=false", {"logicalId": "x"}, "allow_missing"),
    ("/v1/machineLearningRuns/abc?update_mask=workload.state",
     {"name": "machineLearningRuns/other", "workload": {"state": "STATE_RUNNING"}}, "name"),
    ("/v1/machineLearningRuns/abc?update_mask=workload.state&allow_missing=true",
     {"workload": {"state": "STATE_DONE"}}, "workload.state"),
    ("/v1/machineLearningRuns/abc?update_mask=owner&allow_missing=true", {}, "owner"),
    ("/v1/machineLearningRuns?allow_missing=true", {"logicalId": "x", "surprise": 1}, "surprise"),
])
def test_malformed_sdk_requests_are_refused_and_store_nothing(api, path, body, mentions):
    response = api.request("PATCH", path, json=body)
    assert response.status_code == 400, response.json
    assert mentions in response.json["error"]["message"]
    assert api.request("GET", RUNS).json["machineLearningRuns"] == []
