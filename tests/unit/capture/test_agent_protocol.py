"""The node agent's protocol over the real API: heartbeats, GONE targets, claiming and completing tasks."""

from __future__ import annotations

import pytest

from mldiag.entrypoints.http.app import create_app
from mldiag.services.capture import tasks
from mldiag.domain.resources import TargetState
from mldiag.services.operator.maintenance import run_maintenance
from mldiag.services.capture import agents

LOCATION = "/v1alpha/projects/p/locations/l"
RUN = f"{LOCATION}/machineLearningRuns/r1"


@pytest.fixture
def api(embedded):
    return create_app(embedded).test_client()


def beat(api, target: str = "node-a-0", agent: str = "node-a", port: int = 9999):
    return api.post(f"{RUN}/profilerTargets/{target}:heartbeat", json={
        "agent": agent, "hostname": "node-a", "nodeIndex": 0, "profilerAddress": f"node-a:{port}"})


def test_a_heartbeat_registers_the_target_and_silence_makes_it_gone(embedded, clock, run, api):
    response = beat(api)
    assert response.status_code == 200, response.json
    assert response.json["agent"] == "node-a" and response.json["state"] == "ACTIVE"
    assert response.json["profilerAddress"] == "node-a:9999"

    clock.advance(agents.GONE_AFTER.total_seconds() - 1)
    assert agents.mark_gone(embedded) == 0
    beat(api)  # heard from again: the clock starts over
    clock.advance(agents.GONE_AFTER.total_seconds() + 1)
    assert "marked 1 target(s) gone" in run_maintenance(embedded)
    assert embedded.targets.get(f"{run}/profilerTargets/node-a-0").state is TargetState.GONE

    assert beat(api).json["state"] == "ACTIVE"  # the agent came back


def test_targets_registered_without_an_agent_never_go_gone(embedded, clock, run, add_target):
    add_target("h-0", last_heartbeat_time=clock())
    clock.advance(3600)
    assert agents.mark_gone(embedded) == 0


def test_heartbeats_are_validated(run, api):
    assert beat(api, agent="../evil").status_code == 400
    assert api.post(f"{RUN}/profilerTargets/t:heartbeat", json={"agent": "a", "hostname": "h",
                                                                 "profilerAddress": "no-port"}).status_code == 400
    assert api.post(f"{LOCATION}/machineLearningRuns/nope/profilerTargets/t:heartbeat",
                    json={"agent": "a", "hostname": "h", "profilerAddress": "h:1"}).status_code == 404


def test_an_agent_claims_only_its_own_tasks_once_and_completes_them(embedded, run, api, add_target):
    beat(api, "node-a-0", "node-a")
    beat(api, "node-b-0", "node-b")
    add_target("direct-0")
    operation = api.post(f"{RUN}/profilerSessions:capture?profilerSessionId=s1", json={"duration": "1s"}).json
    assert operation["done"] is False

    claimed = api.post(f"{LOCATION}/captureTasks:claim", json={"agent": "node-a"}).json["tasks"]
    assert [c["task"]["target"] for c in claimed] == ["node-a-0"]
    assert claimed[0]["sessionFolder"] == "gs://profiles/runs/r1/plugins/profile/s1"
    assert api.post(f"{LOCATION}/captureTasks:claim", json={"agent": "node-a"}).json["tasks"] == []
    assert api.post("/v1alpha/projects/p/locations/other/captureTasks:claim",
                    json={"agent": "node-b"}).json["tasks"] == []

    task_key = claimed[0]["task"]["key"]
    stolen = api.post(f"{LOCATION}/captureTasks:complete", json={"agent": "node-b", "task": task_key, "result": {}})
    assert stolen.status_code == 403
    embedded.blobs.write_bytes("gs://profiles/runs/r1/plugins/profile/s1/node-a-0.xplane.pb", b"x")
    done = api.post(f"{LOCATION}/captureTasks:complete", json={"agent": "node-a", "task": task_key, "result": {}})
    assert done.status_code == 200 and done.json["state"] == "SUCCEEDED"
    session = api.get(f"{RUN}/profilerSessions/s1").json
    assert session["targetSessions"]["node-a-0"]["sessionPhase"] == "SUCCEEDED"
    assert session["targetSessions"]["node-b-0"]["sessionPhase"] == "ACTIVE"
    assert tasks.load(embedded, task_key).state is tasks.TaskState.SUCCEEDED


def test_continuous_profiling_routes_answer_409_when_started_twice(run, api, add_target):
    add_target("h-0")
    first = api.post(f"{RUN}:startContinuousProfiling", json={"deviceTracerLevel": "enabled"})
    again = api.post(f"{RUN}:startContinuousProfiling", json={})
    on_demand = api.post(f"{RUN}/profilerSessions:capture", json={})
    assert first.status_code == 200 and first.json["metadata"]["verb"] == "startContinuousProfiling"
    assert again.status_code == 409 and again.json["error"]["status"] == "ALREADY_EXISTS"
    assert "continuous profiling is active for run r1" in again.json["error"]["message"]
    assert on_demand.status_code == 409 and "take a snapshot" in on_demand.json["error"]["message"]
    assert api.get(RUN).json["continuousProfiling"]["profilerTargets"] == ["h-0"]
    assert api.post(f"{RUN}:stopContinuousProfiling").status_code == 200
    assert "continuousProfiling" not in api.get(RUN).json


def test_the_agent_config_names_the_control_planes_own_bucket_store(embedded, api):
    answer = api.get("/v1alpha/agentConfig")
    assert answer.status_code == 200, answer.json
    assert answer.json == {"storage": {"backend": "embedded", "dataDir": str(embedded.settings.data_dir)}}


def test_the_agent_config_in_the_cloud_names_the_project_whose_buckets_take_uploads(embedded):
    cloud = embedded.settings.model_copy(update={"backend": "gcp", "project": "training-prod"})
    assert agents.agent_config(cloud) == {"storage": {"backend": "gcp", "project": "training-prod"}}


def test_targets_registered_without_an_agent_follow_their_run(embedded, run, api, add_target):
    add_target("direct-0")
    beat(api)  # node-a-0, served by an agent
    ended = api.patch(f"{RUN}?update_mask=runPhase", json={"runPhase": "COMPLETED"})
    assert ended.status_code == 200, ended.json
    assert embedded.targets.get(f"{run}/profilerTargets/direct-0").state is TargetState.GONE
    assert embedded.targets.get(f"{run}/profilerTargets/node-a-0").state is TargetState.ACTIVE  # its heartbeats
    refused = api.post(f"{RUN}/profilerSessions:capture?profilerSessionId=s1",
                       json={"duration": "1s", "profilerTargets": ["direct-0"]})
    assert refused.status_code == 412 and "the run ended" in refused.json["error"]["message"]

    api.patch(f"{RUN}?update_mask=runPhase", json={"runPhase": "ACTIVE"})  # the workload started again
    assert embedded.targets.get(f"{run}/profilerTargets/direct-0").state is TargetState.ACTIVE
