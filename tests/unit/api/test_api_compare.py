"""``GET .../profilerSessions/S:compare?baseline=B``: two stored analyses judged as ``mldiag compare`` judges them."""

from __future__ import annotations

import pytest
from api_suite import RUNS

from mldiag.domain import AnalysisState, AnalysisStatus, ProfilerSession

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs


def _store(api, services, demo_analyses, **sessions: str) -> None:
    run = api.create_run("r1", artifacts={"gcsPath": "gs://profiles"})
    for session_id, fixture in sessions.items():
        folder = f"gs://profiles/r1/plugins/profile/{session_id}"
        uri = f"{folder}/mldiag/analysis.json"
        services.blobs.write_bytes(uri, demo_analyses[fixture])
        services.sessions.create(ProfilerSession(
            name=f"{run['name']}/profilerSessions/{session_id}", storage_folder_uri=folder,
            analysis=AnalysisStatus(state=AnalysisState.DONE, analysis_uri=uri)))


def test_the_degraded_session_regresses_against_the_healthy_one(api, services, demo_analyses):
    _store(api, services, demo_analyses, good="demo_healthy", bad="demo_degraded")
    response = api.request("GET", f"{RUNS}/r1/profilerSessions/bad:compare?baseline=good")
    assert response.status_code == 200, response.json
    assert response.json["regressed"] is True and response.json["baseline"].endswith("/profilerSessions/good")
    assert response.json["step_time"]["p_value"] < 0.01 and response.json["step_time"]["ci_low"] > 0.05

    full_name = f"{RUNS.removeprefix('/v1alpha/')}/r1/profilerSessions/good"
    lenient = api.request("GET", f"{RUNS}/r1/profilerSessions/bad:compare?baseline={full_name}"
                                 "&maxStepTimeRegression=0.5")
    assert lenient.status_code == 200 and lenient.json["regressed"] is False, lenient.json


def test_bad_requests_are_refused_with_a_reason(api, services, demo_analyses):
    _store(api, services, demo_analyses, good="demo_healthy")
    services.sessions.create(ProfilerSession(name=f"{RUNS.removeprefix('/v1alpha/')}/r1/profilerSessions/pending"))
    base = f"{RUNS}/r1/profilerSessions"
    assert api.request("GET", f"{base}/good:compare").json["error"]["status"] == "INVALID_ARGUMENT"
    refused = api.request("GET", f"{base}/good:compare?baseline=good&maxStepTimeRegression=lots")
    assert refused.status_code == 400 and "not a number" in refused.json["error"]["message"]
    pending = api.request("GET", f"{base}/pending:compare?baseline=good")
    assert pending.status_code == 412 and "no finished analysis" in pending.json["error"]["message"]
    assert api.request("GET", f"{base}/good:compare?baseline=missing").status_code == 404


def test_an_unreadable_analysis_is_refused_with_a_reason(api, services, demo_analyses):
    _store(api, services, demo_analyses, good="demo_healthy", bad="demo_degraded")
    services.blobs.write_bytes("gs://profiles/r1/plugins/profile/bad/mldiag/analysis.json", b'{"health": "OK"')
    response = api.request("GET", f"{RUNS}/r1/profilerSessions/bad:compare?baseline=good")
    assert response.status_code == 412 and "analyse it again" in response.json["error"]["message"]
