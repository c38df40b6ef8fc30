"""Hostile and malformed requests: a clear 4xx in Google's error shape, and nothing stored."""

from __future__ import annotations

import pytest

from api_suite import RUNS
from mldiag.entrypoints.http.app import create_app
from mldiag.entrypoints.http.rest import MAX_BODY_BYTES, MAX_JSON_DEPTH


def _nothing_stored(api) -> bool:
    return api.request("GET", RUNS).json["machineLearningRuns"] == []


def _refused(response, code: int, mentions: str) -> None:
    assert response.status_code == code, response.json
    error = response.json["error"]
    assert set(error) == {"code", "message", "status"} and error["code"] == code
    assert mentions in error["message"]


def test_an_oversized_body_is_refused_before_it_is_read(api):
    body = b'{"displayName": "' + b"x" * MAX_BODY_BYTES + b'"}'
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=r1", data=body,
                           content_type="application/json")
    _refused(response, 413, "byte limit")
    assert _nothing_stored(api)


@pytest.mark.parametrize(("body", "mentions"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[" * 100_000, "not valid JSON"),
])
def test_bodies_that_are_not_json_objects_are_refused(api, body, mentions):
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=r1", data=body, content_type="application/json")
    _refused(response, 400, mentions)
    assert _nothing_stored(api)


@pytest.mark.parametrize(("body", "field"), [
    ({"displayName": "x", "owner": "me"}, "owner"),
    ({"labels": {"a": 1}}, "labels.a"),
    ({"artifacts": {"gcsPath": "gs://b", "extra": True}}, "artifacts.extra"),
    ({"runPhase": "SOMETIMES"}, "runPhase"),
])
def test_unknown_or_mistyped_fields_are_named(api, body, field):
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=r1", json=body)
    _refused(response, 400, field)
    assert _nothing_stored(api)


@pytest.mark.parametrize("path", [
    f"{RUNS}/..",
    f"{RUNS}/../../../etc/passwd",
    f"{RUNS}/./x",
    "/v1/machineLearningRuns/..?allow_missing=true",
])
def test_path_traversal_is_refused(api, path):
    _refused(api.request("PATCH", path, json={"displayName": "x"}), 400, "path")
    assert _nothing_stored(api)


@pytest.mark.parametrize("run_id", ["..", "a/b", "-leading-dash", "x" * 129, "sp ace", "semi;colon", ""])
def test_ids_that_could_escape_a_path_or_key_are_refused(api, run_id):
    response = api.request("POST", RUNS, query_string={"machine_learning_run_id": run_id}, json={})
    _refused(response, 400, "machineLearningRunId")
    assert _nothing_stored(api)


def test_unknown_routes_and_methods_answer_in_the_same_shape(api):
    _refused(api.request("GET", "/v1alpha/nowhere"), 404, "not found")
    assert api.request("PUT", RUNS, json={}).json["error"]["status"] == "UNIMPLEMENTED"


def test_a_bug_is_a_500_that_says_nothing_about_internals(services, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("secret detail /home/user/.key")

    monkeypatch.setattr(services.runs, "get", explode)
    response = create_app(services).test_client().get(f"{RUNS}/r1")
    assert response.status_code == 500 and response.json["error"]["status"] == "INTERNAL"
    assert "secret" not in response.json["error"]["message"]


@pytest.mark.parametrize("value", ["99999999999999999s", 1e308, 10**400, "1e308", -1, "NaN"])
@pytest.mark.parametrize(("path", "field"), [
    ("r1/profilerSessions?profiler_session_id=s1", "duration"),
    ("r1/profilerSessions:capture?profilerSessionId=s1", "duration"),
    ("r1:setAutoCapture", "cooldown"),
    ("r1:setAutoCapture", "duration"),
    ("r1/profilerSessions/s1:share", "ttl"),
])
def test_a_duration_out_of_any_range_is_invalid_argument(api, path, field, value):
    api.create_run("r1", artifacts={"gcsPath": "gs://profiles"})
    response = api.request("POST", f"{RUNS}/{path}", json={field: value})
    _refused(response, 400, f"{field}: ")
    assert "duration" in response.json["error"]["message"] and "\n" not in response.json["error"]["message"]


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(("path", "body"), [
    (f"{RUNS}?machine_learning_run_id=r1", {"configs": {"userConfigs": _nested(300)}}),
    (f"{RUNS}?machine_learning_run_id=r1", {"workloadDetails": {"custom": _nested(40)}}),
    (f"{RUNS}?machine_learning_run_id=r1", {"tools": [{"xprof": _nested(40)}]}),
    ("/v1/machineLearningRuns?update_mask=display_name&allow_missing=true", {"displayName": "x", "workload": _nested(300)}),
])
def test_json_nested_too_deep_is_invalid_argument(api, path, body):
    response = api.request("POST" if path.startswith(RUNS) else "PATCH", path, json=body)
    _refused(response, 400, "nested")
    assert "\n" not in response.json["error"]["message"]
    assert _nothing_stored(api)


def test_json_nested_as_deep_as_storage_allows_is_kept(api):
    """The body, configs and userConfigs are three levels; userConfigs' own dicts make up the rest."""
    run = api.create_run("r1", configs={"userConfigs": _nested(MAX_JSON_DEPTH - 3)})
    assert run["configs"]["userConfigs"] == _nested(MAX_JSON_DEPTH - 3)
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=r2",
                           json={"configs": {"userConfigs": _nested(MAX_JSON_DEPTH - 2)}})
    _refused(response, 400, f"configs: objects and arrays are nested more than {MAX_JSON_DEPTH} deep under "
                            "configs.userConfigs.a...")


@pytest.mark.slow
@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_a_non_finite_number_is_not_json(api, value):
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=r1", data=f'{{"displayName": {value}}}',
                           content_type="application/json")
    _refused(response, 400, "not valid JSON")
    assert _nothing_stored(api)


@pytest.mark.parametrize("step_time", ["Infinity", "NaN", '"inf"', '"nan"', "1e999"])
def test_a_metric_point_that_is_not_a_finite_number_is_refused(api, step_time):
    api.create_run("r1")
    response = api.request("POST", f"{RUNS}/r1:reportMetrics", content_type="application/json",
                           data=f'{{"points": [{{"step": 1, "stepTimeSeconds": {step_time}}}]}}')
    _refused(response, 400, "")
    assert "\n" not in response.json["error"]["message"]


@pytest.mark.parametrize("time", ["1e20", "-1e20", "253402300800", '"1e20"'])
def test_a_time_out_of_any_calendar_is_invalid_argument(api, time):
    api.create_run("r1")
    response = api.request("POST", f"{RUNS}/r1:reportMetrics", content_type="application/json",
                           data=f'{{"points": [{{"step": 1, "stepTimeSeconds": 0.1, "time": {time}}}]}}')
    _refused(response, 400, "")
    assert "\n" not in response.json["error"]["message"]
    created = api.request("POST", f"{RUNS}?machine_learning_run_id=r2", json={"createTime": 1e20})
    _refused(created, 400, "createTime")


@pytest.mark.parametrize("params", [{"stepTimeSlowdown": "inf"}, {"dutyCycleDrop": "nan"},
                                    {"madMultiplier": "Infinity"}])
def test_detector_params_that_are_not_finite_are_refused(api, params):
    api.create_run("r1")
    response = api.request("POST", f"{RUNS}/r1:setDetectorParams", json=params)
    _refused(response, 400, next(iter(params)))
