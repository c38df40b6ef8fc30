"""``mldiag profiler-session analyze``: asks the control plane to analyse a session again."""

from __future__ import annotations

import json

from mldiag.config import ANALYSIS_REQUESTS
from mldiag.domain import AnalysisState, AnalysisStatus, HostFile, ProfilerSession


def test_analyze_requeues_the_session(server, mldiag):
    assert mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles").exit_code == 0
    session = ProfilerSession(
        name="projects/local-project/locations/local/machineLearningRuns/r1/profilerSessions/s1",
        host_files={"host0": HostFile(uri="gs://profiles/r1/plugins/profile/s1/host0.xplane.pb", generation="3")})
    session.analysis = AnalysisStatus(state=AnalysisState.DONE, generation_set=session.generation_set())
    server.services.sessions.create(session)

    result = mldiag("profiler-session", "analyze", "s1", "--machine-learning-run", "r1")
    assert result.exit_code == 0, result.output
    assert "is PENDING" in result.stdout
    as_json = mldiag("profiler-session", "analyze", "s1", "--machine-learning-run", "r1", "--format", "json")
    assert json.loads(as_json.stdout)["analysis"]["state"] == "PENDING"
    assert len(server.services.bus.published[ANALYSIS_REQUESTS]) == 2


def test_analyze_of_an_unknown_session_fails_with_the_servers_message(server, mldiag):
    assert mldiag("machine-learning-run", "create", "r1").exit_code == 0
    result = mldiag("profiler-session", "analyze", "nope", "--machine-learning-run", "r1")
    assert result.exit_code == 1 and "not found" in result.stderr
