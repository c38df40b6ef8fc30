"""Naming a run on the command line: its id, full name, or a display name that one run has."""

from __future__ import annotations

import json
import threading

import pytest
import yaml

from mldiag.agent.node import wait_for_run
from mldiag.client.api import ApiClient, ApiError
from mldiag.domain import ProfilerSession

RUN_PREFIX = "projects/local-project/locations/local/machineLearningRuns"
RUN_ID = "ec671974-0059-4b1e-8d3a-2c9f8e1a7b60"  # how the official SDK's runs are named


@pytest.fixture
def sdk_run(server, mldiag):
    """A run named like the SDK's, with the display name its user gave, and one session."""
    assert mldiag("machine-learning-run", "create", RUN_ID, "--display-name", "my-experiment").exit_code == 0
    server.services.sessions.create(ProfilerSession(name=f"{RUN_PREFIX}/{RUN_ID}/profilerSessions/first-steps"))
    return f"{RUN_PREFIX}/{RUN_ID}"


@pytest.mark.slow
@pytest.mark.parametrize("given", [RUN_ID, f"{RUN_PREFIX}/{RUN_ID}", "my-experiment"])
def test_every_command_that_names_a_run_takes_its_id_full_name_or_display_name(mldiag, sdk_run, given):
    described = mldiag("machine-learning-run", "describe", given, "--format", "json")
    assert described.exit_code == 0, described.output
    assert json.loads(described.stdout)["name"] == sdk_run

    on_run = ("--machine-learning-run", given)
    sessions = mldiag("profiler-session", "list", *on_run, "--format", "json")
    assert [s["name"] for s in json.loads(sessions.stdout)] == [f"{sdk_run}/profilerSessions/first-steps"]
    session = mldiag("profiler-session", "describe", "first-steps", *on_run)
    assert yaml.safe_load(session.stdout)["name"] == f"{sdk_run}/profilerSessions/first-steps"
    assert mldiag("profiler-target", "list", *on_run).exit_code == 0
    assert mldiag("monitored-events", "list", *on_run).exit_code == 0

    updated = mldiag("machine-learning-run", "update", given, "--update-labels", "seen=yes", "--format", "json")
    assert json.loads(updated.stdout)["labels"] == {"seen": "yes"}
    auto = mldiag("machine-learning-run", "set-auto-capture", given, "--disable", "--format", "json")
    assert auto.exit_code == 0, auto.output
    assert mldiag("machine-learning-run", "delete", given).exit_code == 0
    assert mldiag("machine-learning-run", "describe", RUN_ID).exit_code == 1


@pytest.mark.slow
def test_an_unknown_run_is_not_found_instead_of_an_empty_list(mldiag, sdk_run):
    for args in (("profiler-session", "list", "--machine-learning-run", "my-experment"),
                 ("profiler-target", "list", "--machine-learning-run", "my-experment"),
                 ("profiler-session", "describe", "first-steps", "--machine-learning-run", "nope nope"),
                 ("machine-learning-run", "describe", "my-experment")):
        result = mldiag(*args)
        assert result.exit_code == 1, args
        assert "NOT_FOUND: no run with id or display name" in result.stderr and "Traceback" not in result.output


@pytest.mark.slow
def test_a_display_name_that_several_runs_have_asks_for_the_id(mldiag, sdk_run):
    assert mldiag("machine-learning-run", "create", "second", "--display-name", "my-experiment").exit_code == 0
    result = mldiag("profiler-session", "list", "--machine-learning-run", "my-experiment")
    assert result.exit_code == 1
    assert "'my-experiment' names 2 runs" in result.stderr and RUN_ID in result.stderr and "second" in result.stderr
    assert "give the id" in result.stderr
    assert mldiag("profiler-session", "list", "--machine-learning-run", "second").exit_code == 0


def test_an_id_wins_over_another_runs_display_name(mldiag):
    mldiag("machine-learning-run", "create", "alpha", "--display-name", "beta")
    mldiag("machine-learning-run", "create", "beta", "--display-name", "gamma")
    described = mldiag("machine-learning-run", "describe", "beta", "--format", "json")
    assert json.loads(described.stdout)["displayName"] == "gamma"


@pytest.mark.parametrize("args", [
    ("profiler-session", "describe", "s1"),
    ("profiler-session", "share", "s1"),
    ("profiler-session", "analyze", "s1"),
    ("profiler-session", "capture", "s1"),
    ("monitored-events", "describe", "e1"),
])
def test_a_child_by_id_without_its_run_is_a_missing_option(mldiag, args):
    result = mldiag(*args)
    assert result.exit_code == 2
    assert "Missing option '--machine-learning-run'" in result.output


def test_the_agent_registers_under_the_run_its_display_name_names(server, mldiag):
    stopping = threading.Event()
    client = ApiClient(server.url)
    found: list = []
    waited: list[str] = []
    waiting = threading.Thread(target=lambda: found.append(
        wait_for_run(client, "local-project", "local", "my-experiment", stopping, 0.05, waited.append)))
    waiting.start()  # before the workload registers its run, as a node's agent often starts
    assert mldiag("machine-learning-run", "create", RUN_ID, "--display-name", "my-experiment").exit_code == 0
    waiting.join(timeout=10)
    assert [str(name) for name in found] == [f"{RUN_PREFIX}/{RUN_ID}"]

    mldiag("machine-learning-run", "create", "twin", "--display-name", "my-experiment")
    with pytest.raises(ApiError, match="names 2 runs"):
        wait_for_run(client, "local-project", "local", "my-experiment", stopping, 0.05, waited.append)
    stopping.set()
    assert wait_for_run(client, "local-project", "local", "never-registered", stopping, 0.05, waited.append) is None
