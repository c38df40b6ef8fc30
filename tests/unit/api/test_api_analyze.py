"""``POST .../profilerSessions/S:analyze``: a new analysis of the session's current files, through the outbox."""

from __future__ import annotations

from api_suite import RUNS
from mldiag.config import ANALYSIS_REQUESTS
from mldiag.domain import AnalysisState, AnalysisStatus, HostFile, ProfilerSession
from mldiag.domain.messages import AnalysisRequest

SESSION = f"{RUNS}/r1/profilerSessions/s1"


def _session(api, services, **host_files: HostFile) -> ProfilerSession:
    run = api.create_run("r1", artifacts={"gcsPath": "gs://profiles"})
    session = ProfilerSession(name=f"{run['name']}/profilerSessions/s1", host_files=host_files)
    session.analysis = AnalysisStatus(state=AnalysisState.FAILED, generation_set=session.generation_set(),
                                      error="the analysis did not finish within 480 s")
    return services.sessions.create(session)


def test_analyze_requests_the_current_files_again(api, services):
    files = {"host0": HostFile(uri="gs://profiles/r1/plugins/profile/s1/host0.xplane.pb", generation="7")}
    session = _session(api, services, **files)

    response = api.request("POST", f"{SESSION}:analyze", json={})

    assert response.status_code == 200, response.json
    assert response.json["analysis"]["state"] == "PENDING" and response.json["analysis"]["error"] == ""
    (message,) = services.bus.published[ANALYSIS_REQUESTS]
    assert AnalysisRequest.read(message) == AnalysisRequest(
        session=session.name, generation_set=session.generation_set(), host_files={"host0": files["host0"].uri})
    assert services.store.query("outbox") == []  # published, not left behind


def test_a_session_without_files_cannot_be_analysed(api, services):
    _session(api, services)
    response = api.request("POST", f"{SESSION}:analyze", json={})
    assert response.status_code == 412 and response.json["error"]["status"] == "FAILED_PRECONDITION"
    assert api.request("POST", f"{RUNS}/r1/profilerSessions/nope:analyze", json={}).status_code == 404
