"""Profiler sessions, targets, monitored events and operations over the v1alpha API."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from api_suite import API_URL, RUNS
from mldiag.domain import MonitoredEvent


def _operation(response) -> dict:
    assert response.status_code == 200, response.json
    assert response.json["done"] is True
    return response.json["response"]


def test_session_folder_and_dashboard_are_computed_by_the_server(api):
    api.create_run("r1", artifacts={"gcsPath": "gs://profiles/team"})
    session = _operation(api.request(
        "POST", f"{RUNS}/r1/profilerSessions?profiler_session_id=s1",
        json={"kind": "KIND_PROGRAMMATIC", "storageFolderUri": "gs://elsewhere/x", "dashboardUri": "http://evil"},
    ))
    folder = "gs://profiles/team/r1/plugins/profile/s1"
    assert session["storageFolderUri"] == folder
    assert session["dashboardUri"] == f"{API_URL}/viewer/?session_path={quote(folder, safe='')}"
    assert session["kind"] == "KIND_PROGRAMMATIC"


def test_dashboard_uses_the_configured_xprof_viewer(make_api):
    api = make_api(xprof_viewer_url="https://xprof.example/")
    api.create_run("r1", artifacts={"gcsPath": "gs://profiles"})
    session = _operation(api.request("POST", f"{RUNS}/r1/profilerSessions?profiler_session_id=s1", json={}))
    assert session["dashboardUri"].startswith("https://xprof.example/?session_path=gs%3A%2F%2Fprofiles%2Fr1")


def test_target_sessions_merge_host_by_host(api):
    api.create_run("r1", artifacts={"gcsPath": "gs://profiles"})
    path = f"{RUNS}/r1/profilerSessions"
    # What the SDK sends from each host of a two-host run (update_mask=target_sessions).
    _operation(api.request("POST", f"{path}?profiler_session_id=s1", json={
        "profilerTargets": ["host-0"], "kind": "KIND_PROGRAMMATIC",
        "targetSessions": {"host-0": {"startTime": "2026-01-01T00:00:00Z", "sessionPhase": "ACTIVE"}},
    }))
    _operation(api.request("PATCH", f"{path}/s1?update_mask=target_sessions", json={
        "profilerTargets": ["host-1"],
        "targetSessions": {"host-1": {"startTime": "2026-01-01T00:00:01Z", "sessionPhase": "ACTIVE"}},
    }))
    merged = _operation(api.request("PATCH", f"{path}/s1?update_mask=target_sessions", json={
        "targetSessions": {"host-0": {"startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:05Z",
                                      "sessionPhase": "SUCCEEDED"}},
    }))
    assert set(merged["targetSessions"]) == {"host-0", "host-1"}
    assert merged["targetSessions"]["host-0"]["sessionPhase"] == "SUCCEEDED"
    assert merged["targetSessions"]["host-1"]["sessionPhase"] == "ACTIVE"
    assert merged["profilerTargets"] == ["host-0", "host-1"]
    assert api.request("GET", f"{path}/s1").json == merged


def test_a_finished_host_cannot_become_active_again(api):
    api.create_run("r1")
    path = f"{RUNS}/r1/profilerSessions"
    api.request("POST", f"{path}?profiler_session_id=s1",
                json={"targetSessions": {"h": {"sessionPhase": "SUCCEEDED"}}})
    back = api.request("PATCH", f"{path}/s1?update_mask=target_sessions",
                       json={"targetSessions": {"h": {"sessionPhase": "ACTIVE"}}})
    assert back.status_code == 400 and "targetSessions.h.sessionPhase" in back.json["error"]["message"]


def test_duplicate_session_reports_the_existing_resource(api):
    api.create_run("r1")
    api.request("POST", f"{RUNS}/r1/profilerSessions?profiler_session_id=s1", json={})
    again = api.request("POST", f"{RUNS}/r1/profilerSessions?profiler_session_id=s1", json={})
    assert again.status_code == 409
    (detail,) = again.json["error"]["details"]
    assert detail["@type"] == "type.googleapis.com/google.rpc.ResourceInfo"
    assert detail["resourceName"].endswith("/machineLearningRuns/r1/profilerSessions/s1")


def test_sessions_need_an_existing_run_and_list_with_filters(api):
    assert api.request("POST", f"{RUNS}/ghost/profilerSessions?profiler_session_id=s", json={}).status_code == 404
    api.create_run("r1")
    path = f"{RUNS}/r1/profilerSessions"
    api.request("POST", f"{path}?profiler_session_id=a", json={"kind": "on-demand"})
    api.request("POST", f"{path}?profiler_session_id=b", json={"kind": "programmatic"})
    listed = api.request("GET", path, query_string={"filter": "kind = ON_DEMAND"}).json
    assert [s["name"].rsplit("/", 1)[1] for s in listed["profilerSessions"]] == ["a"]
    generated = _operation(api.request("POST", path, json={}))
    assert generated["name"].rsplit("/", 1)[1][:8].isdigit()  # named by time, like the SDK's sessions


def test_targets_default_their_id_and_can_be_deleted(api):
    api.create_run("r1")
    path = f"{RUNS}/r1/profilerTargets"
    target = _operation(api.request("POST", path, json={"hostname": "tpu-vm-3", "nodeIndex": 3,
                                                        "profilerAddress": "tpu-vm-3:9999"}))
    assert target["name"].endswith("/profilerTargets/tpu-vm-3-3")
    assert api.request("POST", path, json={"hostname": "tpu-vm-3", "nodeIndex": 3}).status_code == 409
    assert api.request("POST", path, json={}).status_code == 400
    listed = api.request("GET", path, query_string={"filter": "nodeIndex >= 3"}).json["profilerTargets"]
    assert [t["hostname"] for t in listed] == ["tpu-vm-3"]
    assert api.request("DELETE", f"{path}/tpu-vm-3-3").json["done"] is True
    assert api.request("GET", f"{path}/tpu-vm-3-3").status_code == 404


def test_monitored_events_list_and_get(api, services):
    run = api.create_run("r1")
    services.monitored_events.create(MonitoredEvent(name=f"{run['name']}/monitoredEvents/e1", display_name="slow"))
    listed = api.request("GET", f"{RUNS}/r1/monitoredEvents").json["monitoredEvents"]
    assert [e["displayName"] for e in listed] == ["slow"]
    event = api.request("GET", f"{RUNS}/r1/monitoredEvents/e1").json
    assert event["type"] == "PERFORMANCE_DEGRADATION"
    assert api.request("POST", f"{RUNS}/r1/monitoredEvents", json={}).status_code == 405


def test_unknown_operation_is_not_found(api):
    response = api.request("GET", f"{RUNS.rsplit('/', 1)[0]}/operations/operation-nope")
    assert response.status_code == 404 and response.json["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize("collection", ["profilerSessions", "profilerTargets", "monitoredEvents"])
def test_children_of_a_missing_run_are_not_found(api, collection):
    api.create_run("r1")
    assert api.request("GET", f"{RUNS}/r1/{collection}").json == {collection: []}
    for path in (f"{RUNS}/ghost/{collection}", f"{RUNS}/ghost/{collection}/c1"):
        response = api.request("GET", path)
        assert response.status_code == 404, path
        assert response.json["error"]["status"] == "NOT_FOUND"
        assert "machineLearningRuns/ghost not found" in response.json["error"]["message"]


def test_session_phase_is_output_only_and_filters(api):
    api.create_run("r1")
    path = f"{RUNS}/r1/profilerSessions"
    for session_id, phase in (("ok", "SUCCEEDED"), ("broken", "FAILED")):
        _operation(api.request("POST", f"{path}?profiler_session_id={session_id}",
                               json={"targetSessions": {"h0": {"sessionPhase": phase}}}))
    broken = api.request("GET", f"{path}/broken").json
    assert broken["sessionPhase"] == "FAILED"
    listed = api.request("GET", path, query_string={"filter": "sessionPhase = FAILED"}).json["profilerSessions"]
    assert [s["name"] for s in listed] == [broken["name"]]
    # A session read back and sent whole (no mask) keeps its derived phase; naming it in a mask is refused.
    sent_back = _operation(api.request("PATCH", f"{path}/broken", json={**broken, "sessionPhase": "ACTIVE"}))
    assert sent_back["sessionPhase"] == "FAILED" and sent_back["targetSessions"] == broken["targetSessions"]
    refused = api.request("PATCH", f"{path}/broken?update_mask=sessionPhase", json={"sessionPhase": "ACTIVE"})
    assert refused.status_code == 400 and "sessionPhase cannot be updated" in refused.json["error"]["message"]
