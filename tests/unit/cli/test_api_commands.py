"""The API-backed command groups against a real control plane: output, errors, exit codes."""

from __future__ import annotations

import json

import pytest
import yaml

from mldiag.services import unit_of_work
from mldiag.domain import (
    AnalysisState, AnalysisStatus, HealthStatus, MonitoredEvent, ProfilerSession, ProfilerTarget, SessionPhase,
    TargetSession,
)

RUN_PREFIX = "projects/local-project/locations/local/machineLearningRuns"


def _json(result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_create_describe_list_in_every_format(mldiag):
    created = _json(mldiag("machine-learning-run", "create", "train-1", "--display-name", "Train one",
                           "--labels", "team=infra", "--gcs-path", "gs://profiles", "--format", "json"))
    assert created["name"] == f"{RUN_PREFIX}/train-1" and created["labels"] == {"team": "infra"}

    described = mldiag("machine-learning-run", "describe", "train-1")
    assert described.exit_code == 0 and yaml.safe_load(described.stdout)["displayName"] == "Train one"
    assert _json(mldiag("machine-learning-run", "describe", f"{RUN_PREFIX}/train-1", "--format", "json")) == created

    table = mldiag("machine-learning-run", "list")
    assert table.exit_code == 0 and "train-1" in table.stdout and "Train one" in table.stdout
    assert [run["name"] for run in _json(mldiag("machine-learning-run", "list", "--format", "json"))] == \
        [created["name"]]


@pytest.mark.slow
def test_list_filters_and_limits(mldiag):
    for index in range(5):
        mldiag("machine-learning-run", "create", f"run-{index}", "--labels", f"parity={'odd' if index % 2 else 'even'}")
    limited = _json(mldiag("machine-learning-run", "list", "--limit", "3", "--format", "json"))
    assert [run["name"].rsplit("/", 1)[1] for run in limited] == ["run-4", "run-3", "run-2"]
    odd = _json(mldiag("machine-learning-run", "list", "--filter", "labels.parity = odd", "--sort-by", "createTime",
                       "--format", "json"))
    assert [run["name"].rsplit("/", 1)[1] for run in odd] == ["run-1", "run-3"]


def test_update_changes_only_what_is_given(mldiag):
    mldiag("machine-learning-run", "create", "r1", "--labels", "team=infra", "--run-set", "sweep")
    updated = _json(mldiag("machine-learning-run", "update", "r1", "--update-labels", "tier=1",
                           "--run-phase", "COMPLETED", "--format", "json"))
    assert updated["labels"] == {"team": "infra", "tier": "1"} and updated["runSet"] == "sweep"
    assert updated["runPhase"] == "COMPLETED" and updated["endTime"]


@pytest.mark.slow
def test_api_errors_exit_1_with_the_servers_message(mldiag):
    mldiag("machine-learning-run", "create", "r1")
    stale = mldiag("machine-learning-run", "update", "r1", "--display-name", "x", "--etag", "stale")
    assert stale.exit_code == 1 and "ABORTED" in stale.stderr and "etag" in stale.stderr

    assert mldiag("machine-learning-run", "delete", "r1").exit_code == 0
    missing = mldiag("machine-learning-run", "describe", "r1")
    assert missing.exit_code == 1 and "NOT_FOUND" in missing.stderr

    bad_filter = mldiag("machine-learning-run", "list", "--filter", "owner = me")
    assert bad_filter.exit_code == 1 and "owner" in bad_filter.stderr


@pytest.mark.parametrize("args", [
    ("machine-learning-run", "create", "r1", "--labels", "no-equals-sign"),
    ("machine-learning-run", "list", "--format", "xml"),
    ("machine-learning-run", "list", "--limit", "0"),
    ("machine-learning-run", "update", "r1"),
    ("profiler-session", "list"),
    ("profiler-session", "describe", "s1"),
    ("profiler-session", "share", "s1", "--machine-learning-run", "r1", "--ttl", "soon"),
])
@pytest.mark.slow
def test_usage_mistakes_exit_2(mldiag, args):
    assert mldiag(*args).exit_code == 2


def test_an_unreachable_control_plane_is_exit_1_with_a_hint(mldiag):
    result = mldiag("machine-learning-run", "list", "--api-url", "http://127.0.0.1:9")
    assert result.exit_code == 1 and "mldiag up" in result.stderr


@pytest.mark.slow
def test_the_token_comes_from_the_option_or_the_environment(start_server, mldiag):
    guarded = start_server(api_token="cli-token-123")
    url = ("--api-url", guarded.url)
    refused = mldiag("machine-learning-run", "create", "r1", *url)
    assert refused.exit_code == 1 and "UNAUTHENTICATED" in refused.stderr
    assert mldiag("machine-learning-run", "create", "r1", *url, "--token", "cli-token-123").exit_code == 0
    assert mldiag("machine-learning-run", "delete", "r1", *url, env={"MLDIAG_API_TOKEN": "cli-token-123"}).exit_code == 0


@pytest.mark.slow
def test_sessions_targets_and_events(server, mldiag):
    run = _json(mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles", "--format", "json"))
    report = "gs://profiles/r1/plugins/profile/s1/summary.html"
    server.services.blobs.write_bytes(report, b"<html>report</html>")
    server.services.sessions.create(ProfilerSession(
        name=f"{run['name']}/profilerSessions/s1", kind="KIND_PROGRAMMATIC",
        analysis=AnalysisStatus(state=AnalysisState.DONE, report_uri=report)))
    server.services.targets.create(ProfilerTarget(name=f"{run['name']}/profilerTargets/vm-0", hostname="vm",
                                                  profiler_address="vm:9999"))
    server.services.monitored_events.create(MonitoredEvent(name=f"{run['name']}/monitoredEvents/e1",
                                                           display_name="duty cycle dropped 20%"))
    on_run = ("--machine-learning-run", "r1")

    sessions = mldiag("profiler-session", "list", *on_run)
    assert sessions.exit_code == 0 and "s1" in sessions.stdout and "DONE" in sessions.stdout
    assert yaml.safe_load(mldiag("profiler-session", "describe", "s1", *on_run).stdout)["analysis"]["state"] == "DONE"
    shared = mldiag("profiler-session", "share", "s1", *on_run, "--ttl", "10m")
    assert shared.exit_code == 0 and shared.stdout.startswith(f"{server.url}/share/")
    assert "expires" in shared.stderr

    assert "vm:9999" in mldiag("profiler-target", "list", *on_run).stdout
    assert "duty cycle dropped 20%" in mldiag("monitored-events", "list", *on_run).stdout
    event = _json(mldiag("monitored-events", "describe", "e1", *on_run, "--format", "json"))
    assert event["type"] == "PERFORMANCE_DEGRADATION"


def _table(result) -> dict[str, dict[str, str]]:
    """A piped table as {id: {header: cell}}: one line per row, cells between the borders."""
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith(("┃", "│"))]
    header, *rows = [[cell.strip() for cell in line.strip("┃│").split("┃" if line[0] == "┃" else "│")]
                     for line in lines]
    return {row[0]: dict(zip(header, row)) for row in rows}


def test_session_and_run_lists_show_phase_analysis_step_time_and_finding(server, mldiag):
    run = _json(mldiag("machine-learning-run", "create", "r1", "--display-name", "my-experiment", "--format", "json"))
    sessions = server.services.sessions
    sessions.create(ProfilerSession(name=f"{run['name']}/profilerSessions/unreachable", target_sessions={
        "vm-0": TargetSession(session_phase=SessionPhase.FAILED, error="connection refused")}))
    analysed = sessions.create(ProfilerSession(
        name=f"{run['name']}/profilerSessions/analysed",
        target_sessions={"vm-0": TargetSession(session_phase=SessionPhase.SUCCEEDED)},
        analysis=AnalysisStatus(state=AnalysisState.DONE, health=HealthStatus.NEEDS_ATTENTION, step_time_ms=123.456,
                                top_finding="P0 Host-bound input pipeline")))
    unit_of_work.change(server.services,
                        lambda unit: unit.runs.update(run["name"], lambda stored: stored.record_analysis(analysed)))

    listed = _table(mldiag("profiler-session", "list", "--machine-learning-run", "my-experiment"))
    assert listed["unreachable"] == {"ID": "unreachable", "PHASE": "FAILED", "ANALYSIS": "NOT_STARTED", "HEALTH": "",
                                     "STEP TIME": "", "TOP FINDING": ""}
    assert listed["analysed"] == {"ID": "analysed", "PHASE": "SUCCEEDED", "ANALYSIS": "DONE",
                                  "HEALTH": "NEEDS_ATTENTION", "STEP TIME": "123.46 ms",
                                  "TOP FINDING": "P0 Host-bound input pipeline"}
    runs = _table(mldiag("machine-learning-run", "list"))
    assert runs["r1"] == {"ID": "r1", "DISPLAY NAME": "my-experiment", "PHASE": "ACTIVE", "CREATED": run["createTime"],
                          "LATEST STEP TIME": "123.46 ms", "HEALTH": "NEEDS_ATTENTION"}
