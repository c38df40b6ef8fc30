"""Runs over the v1alpha API: create, get, list (filter, order, pages), update with etags, delete."""

from __future__ import annotations

import pytest
from api_suite import BASE, RUNS

from mldiag.domain.host_analyses import HostAnalyses
from mldiag.services.fan_out import counter_key


def test_create_returns_a_done_operation_that_can_be_read_again(api):
    response = api.request("POST", f"{RUNS}?machineLearningRunId=train-1",
                           json={"displayName": "Train 1", "labels": {"team": "infra"},
                                 "artifacts": {"gcsPath": "gs://profiles/exp"}})
    operation = response.json
    assert response.status_code == 200 and operation["done"] is True
    run = operation["response"]
    assert run["name"] == f"{BASE[len('/v1alpha/'):]}/machineLearningRuns/train-1"
    assert run["runPhase"] == "ACTIVE" and run["etag"] and run["createTime"]
    assert operation["metadata"]["target"] == run["name"] and operation["metadata"]["verb"] == "create"

    polled = api.request("GET", f"/v1alpha/{operation['name']}")
    assert polled.status_code == 200 and polled.json["response"] == run
    assert api.run("train-1").json == run


def test_create_ignores_output_only_fields_and_refuses_a_taken_id(api):
    run = api.create_run("r1", name="something-else", etag="forged", createTime="2001-01-01T00:00:00Z")
    assert run["name"].endswith("/machineLearningRuns/r1")
    assert run["etag"] != "forged" and not run["createTime"].startswith("2001")

    again = api.request("POST", f"{RUNS}?machine_learning_run_id=r1", json={})
    assert again.status_code == 409 and again.json["error"]["status"] == "ALREADY_EXISTS"


def test_get_missing_run_is_not_found_in_googles_error_shape(api):
    response = api.run("nope")
    assert response.status_code == 404
    assert response.json == {"error": {"code": 404, "status": "NOT_FOUND",
                                       "message": response.json["error"]["message"]}}
    assert "machineLearningRuns/nope" in response.json["error"]["message"]


def test_list_pages_through_every_run_exactly_once(api):
    for index in range(7):
        api.create_run(f"run-{index}")
    seen, token, pages = [], "", 0
    while True:
        page = api.request("GET", f"{RUNS}?pageSize=3&pageToken={token}").json
        seen += [run["name"].rsplit("/", 1)[1] for run in page["machineLearningRuns"]]
        pages += 1
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert pages == 3
    assert seen == [f"run-{index}" for index in reversed(range(7))]  # newest first by default


def test_list_filters_on_phase_labels_and_display_name(api):
    api.create_run("a", displayName="alpha", labels={"team": "infra"})
    api.create_run("b", displayName="beta", labels={"team": "research"})
    api.create_run("c", displayName="gamma", labels={"team": "infra"}, runPhase="COMPLETED")

    def ids(expression: str) -> list[str]:
        response = api.request("GET", RUNS, query_string={"filter": expression, "orderBy": "displayName"})
        assert response.status_code == 200, response.json
        return [run["name"].rsplit("/", 1)[1] for run in response.json["machineLearningRuns"]]

    assert ids("labels.team = infra") == ["a", "c"]
    assert ids('labels.team = "infra" AND runPhase = ACTIVE') == ["a"]
    assert ids("run_phase = completed") == ["c"]
    assert ids('displayName = "beta"') == ["b"]
    assert ids("displayName != beta") == ["a", "c"]


@pytest.mark.parametrize(("expression", "mentions"), [
    ("owner = me", "owner"),
    ("runPhase = SOMETIMES", "SOMETIMES"),
    ("runPhase = ACTIVE OR runPhase = FAILED", "AND"),
    ("displayName", "field OP value"),
])
def test_unusable_filters_are_refused_with_a_reason(api, expression, mentions):
    response = api.request("GET", RUNS, query_string={"filter": expression})
    assert response.status_code == 400
    assert response.json["error"]["status"] == "INVALID_ARGUMENT"
    assert mentions in response.json["error"]["message"]


def test_a_quoted_value_may_hold_parentheses_quotes_and_and(api):
    tricky = 'resnet (bs=64) AND "warm" OR cold'
    api.create_run("a", displayName=tricky, labels={"team": "infra"})
    api.create_run("b", displayName="resnet")
    quoted = '"' + tricky.replace('"', '\\"') + '"'
    for expression in (f"displayName = {quoted}", f"labels.team = infra AND displayName = {quoted}"):
        response = api.request("GET", RUNS, query_string={"filter": expression})
        assert response.status_code == 200, response.json
        assert [run["displayName"] for run in response.json["machineLearningRuns"]] == [tricky]
    refused = api.request("GET", RUNS, query_string={"filter": 'displayName = "a" OR displayName = "b"'})
    assert refused.status_code == 400 and "AND" in refused.json["error"]["message"]


def test_order_by_and_bad_paging_arguments(api):
    api.create_run("x", displayName="b")
    api.create_run("y", displayName="a")
    ordered = api.request("GET", RUNS, query_string={"order_by": "displayName desc"}).json
    assert [r["displayName"] for r in ordered["machineLearningRuns"]] == ["b", "a"]
    for query in ({"pageToken": "garbage"}, {"pageSize": "-1"}, {"pageSize": "ten"}, {"orderBy": "displayName up"}):
        assert api.request("GET", RUNS, query_string=query).status_code == 400, query


def test_update_applies_only_the_mask_and_checks_the_etag(api):
    created = api.create_run("r1", displayName="before", labels={"team": "infra", "tier": "1"})
    response = api.request("PATCH", f"{RUNS}/r1?update_mask=display_name,labels.tier",
                           json={"displayName": "after", "labels": {"tier": "2"}, "runSet": "ignored",
                                 "etag": created["etag"]})
    assert response.status_code == 200, response.json
    updated = response.json["response"]
    assert updated["displayName"] == "after"
    assert updated["labels"] == {"team": "infra", "tier": "2"}
    assert updated["runSet"] == "" and updated["etag"] != created["etag"]

    stale = api.request("PATCH", f"{RUNS}/r1?update_mask=display_name",
                        json={"displayName": "stale", "etag": created["etag"]})
    assert stale.status_code == 409 and stale.json["error"]["status"] == "ABORTED"
    assert api.run("r1").json == updated


def test_update_without_a_mask_takes_the_fields_the_body_sets(api):
    api.create_run("r1", displayName="before", runSet="set-a")
    updated = api.request("PATCH", f"{RUNS}/r1", json={"displayName": "after"}).json["response"]
    assert (updated["displayName"], updated["runSet"]) == ("after", "set-a")


def test_final_phase_stamps_end_time_and_cannot_turn_into_the_other_outcome(api):
    api.create_run("r1")
    finished = api.request("PATCH", f"{RUNS}/r1?update_mask=runPhase", json={"runPhase": "FAILED"}).json["response"]
    assert finished["runPhase"] == "FAILED" and finished["endTime"]
    other = api.request("PATCH", f"{RUNS}/r1?update_mask=runPhase", json={"runPhase": "COMPLETED"})
    assert other.status_code == 400 and "runPhase" in other.json["error"]["message"]
    assert api.run("r1").json == finished


def test_an_ended_run_made_active_again_counts_the_restart(api):
    created = api.create_run("r1")
    assert created["restartCount"] == 0 and "lastRestartTime" not in created
    completed = api.request("PATCH", f"{RUNS}/r1?update_mask=runPhase", json={"runPhase": "COMPLETED"}).json
    again = api.request("PATCH", f"{RUNS}/r1?update_mask=runPhase", json={"runPhase": "ACTIVE"}).json["response"]
    assert again["runPhase"] == "ACTIVE" and "endTime" not in again
    assert again["restartCount"] == 1 and again["lastRestartTime"] >= completed["response"]["endTime"]
    ended = api.request("PATCH", f"{RUNS}/r1?update_mask=runPhase", json={"runPhase": "FAILED"}).json["response"]
    assert ended["endTime"] >= again["lastRestartTime"] and ended["restartCount"] == 1


@pytest.mark.parametrize("mask", ["name", "createTime", "etag", "state", "nonsense"])
def test_masks_naming_server_fields_are_refused(api, mask):
    created = api.create_run("r1")
    response = api.request("PATCH", f"{RUNS}/r1?update_mask={mask}", json={})
    assert response.status_code == 400 and "updateMask" in response.json["error"]["message"]
    assert api.run("r1").json == created


def test_update_of_a_missing_run_is_not_found_unless_allow_missing(api):
    missing = api.request("PATCH", f"{RUNS}/ghost?update_mask=display_name", json={"displayName": "g"})
    assert missing.status_code == 404
    upserted = api.request("PATCH", f"{RUNS}/ghost?update_mask=display_name&allow_missing=true",
                           json={"displayName": "g"})
    assert upserted.status_code == 200 and upserted.json["response"]["displayName"] == "g"


def test_delete_checks_the_etag_and_removes_the_run_with_its_children(api, services):
    created = api.create_run("r1", artifacts={"gcsPath": "gs://profiles"})
    api.request("POST", f"{RUNS}/r1/profilerTargets", json={"hostname": "host-a"})
    api.request("POST", f"{RUNS}/r1/profilerSessions?profiler_session_id=s1", json={})
    session = f"{created['name']}/profilerSessions/s1"
    other = session.replace("/r1/", "/r2/")
    for name in (session, other):  # the counters of fanned-out analyses
        services.store.set(HostAnalyses.collection, counter_key(name, "g1"),
                           HostAnalyses.of(name, "g1", {"h0": "gs://profiles/h0.xplane.pb"}).to_document())

    stale = api.request("DELETE", f"{RUNS}/r1", query_string={"etag": "stale"})
    assert stale.status_code == 409 and api.run("r1").status_code == 200

    deleted = api.request("DELETE", f"{RUNS}/r1", query_string={"etag": created["etag"]})
    assert deleted.status_code == 200 and deleted.json["done"] is True and deleted.json["response"] == {}
    assert api.run("r1").status_code == 404
    run_name = created["name"]
    assert services.sessions.list(run_name).items == [] and services.targets.list(run_name).items == []
    assert services.store.get(HostAnalyses.collection, counter_key(session, "g1")) is None
    assert services.store.get(HostAnalyses.collection, counter_key(other, "g1")) is not None
    assert api.request("DELETE", f"{RUNS}/r1").status_code == 404
