"""``mldiag profiler-session analyze``: asks the control plane to analyse a session again."""

from __future__ import annotations

import json
import urllib.request

import yaml

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


def test_describe_lists_earlier_analyses_and_share_links_the_latest_report(server, mldiag):
    assert mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles").exit_code == 0
    reports = "gs://profiles/r1/plugins/profile/s1/mldiag"
    for generation_set in ("aaaa1111", "bbbb2222"):
        server.services.blobs.write_bytes(f"{reports}/{generation_set}/summary.html", generation_set.encode())
    server.services.sessions.create(ProfilerSession(
        name="projects/local-project/locations/local/machineLearningRuns/r1/profilerSessions/s1",
        analysis=AnalysisStatus(state=AnalysisState.DONE, generation_set="bbbb2222",
                                report_uri=f"{reports}/bbbb2222/summary.html"),
        earlier_analyses=[AnalysisStatus(state=AnalysisState.DONE, generation_set="aaaa1111", health="OPTIMAL",
                                         report_uri=f"{reports}/aaaa1111/summary.html")]))
    on_run = ("--machine-learning-run", "r1")

    described = yaml.safe_load(mldiag("profiler-session", "describe", "s1", *on_run).stdout)
    assert described["analysis"]["reportUri"] == f"{reports}/bbbb2222/summary.html"
    assert [(kept["generationSet"], kept["health"], kept["reportUri"]) for kept in described["earlierAnalyses"]] == [
        ("aaaa1111", "OPTIMAL", f"{reports}/aaaa1111/summary.html")]
    shared = json.loads(mldiag("profiler-session", "share", "s1", *on_run, "--format", "json").stdout)
    assert shared["reportUri"] == f"{reports}/bbbb2222/summary.html"
    with urllib.request.urlopen(shared["url"], timeout=10) as opened:
        assert opened.read() == b"bbbb2222"
