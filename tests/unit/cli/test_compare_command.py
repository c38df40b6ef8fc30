"""``mldiag compare`` on two stored sessions: the control plane judges, the command prints and sets the exit status."""

from __future__ import annotations

import json

import pytest

from mldiag.domain import AnalysisState, AnalysisStatus, ProfilerSession

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

RUN = "projects/local-project/locations/local/machineLearningRuns/r1"


def _store(server, demo_analyses, **sessions: str) -> None:
    for session_id, fixture in sessions.items():
        folder = f"gs://profiles/r1/plugins/profile/{session_id}"
        server.services.blobs.write_bytes(f"{folder}/mldiag/analysis.json", demo_analyses[fixture])
        server.services.sessions.create(ProfilerSession(
            name=f"{RUN}/profilerSessions/{session_id}", storage_folder_uri=folder,
            analysis=AnalysisStatus(state=AnalysisState.DONE, analysis_uri=f"{folder}/mldiag/analysis.json")))


def test_stored_sessions_are_compared_by_id_or_full_name(server, mldiag, demo_analyses):
    assert mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles").exit_code == 0
    _store(server, demo_analyses, good="demo_healthy", bad="demo_degraded")

    regressed = mldiag("compare", "good", "bad", "--machine-learning-run", "r1")
    assert regressed.exit_code == 1, regressed.output
    assert "REGRESSED" in regressed.stdout and "Mann-Whitney U p=" in regressed.stdout

    passed = mldiag("compare", f"{RUN}/profilerSessions/good", f"{RUN}/profilerSessions/bad",
                    "--max-step-time-regression", "50%", "--format", "json")
    assert passed.exit_code == 0, passed.output
    verdict = json.loads(passed.stdout)
    assert verdict["regressed"] is False and verdict["thresholds"]["max_step_time_regression"] == 0.5


def test_a_session_without_an_analysis_fails_with_the_servers_message(server, mldiag, demo_analyses):
    assert mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles").exit_code == 0
    _store(server, demo_analyses, good="demo_healthy")
    result = mldiag("compare", "good", "nope", "--machine-learning-run", "r1")
    assert result.exit_code == 1 and "not found" in result.stderr
