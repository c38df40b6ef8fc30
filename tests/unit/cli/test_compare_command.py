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


def _edited(analysis: bytes, **host_fields) -> bytes:
    document = json.loads(analysis)
    for host in document["hosts"]:
        host.update(host_fields)
        if "steps" in host_fields:
            host["series"]["step_ms"] = []
            document["metrics"]["steps"] = 0
    return json.dumps(document).encode()


def test_a_side_without_steps_is_refused_in_one_line(server, mldiag, demo_analyses):
    assert mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles").exit_code == 0
    analyses = {**demo_analyses, "stepless": _edited(demo_analyses["demo_healthy"], steps=0)}
    _store(server, analyses, good="demo_healthy", idle="stepless")
    for baseline, candidate, side in (("good", "idle", "candidate"), ("idle", "good", "baseline")):
        result = mldiag("compare", baseline, candidate, "--machine-learning-run", "r1")
        assert result.exit_code == 3, result.output
        assert result.stderr.splitlines() == [
            f"mldiag compare: the {side} {RUN}/profilerSessions/idle has no steps to compare; profile it over "
            "some training steps"]
        assert result.stdout == ""


def test_sides_on_different_hardware_are_compared_with_a_warning(server, mldiag, demo_analyses):
    assert mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles").exit_code == 0
    analyses = {**demo_analyses, "v100": _edited(demo_analyses["demo_healthy"], device_type="Tesla V100-SXM2-16GB",
                                                 devices=8)}
    _store(server, analyses, cpu="demo_healthy", gpu="v100", again="demo_healthy")
    result = mldiag("compare", "cpu", "gpu", "--machine-learning-run", "r1", "--format", "json")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == ["mldiag compare: warning: the baseline ran on CPU, the candidate on "
                                          "8 x Tesla V100-SXM2-16GB; their step times are not comparable"]
    assert json.loads(result.stdout)["hardware"] == {"baseline": "CPU", "candidate": "8 x Tesla V100-SXM2-16GB",
                                                     "same": False}
    same = mldiag("compare", "cpu", "again", "--machine-learning-run", "r1")
    assert same.exit_code == 0 and same.stderr == ""
