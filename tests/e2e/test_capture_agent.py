"""The node agent against ``mldiag up``: it registers a real JAX workload's profiler and captures it on request.

The agent runs as ``mldiag agent`` (a subprocess, as on a node), heartbeats
the workload's port as a target, pulls the capture task, lets the profiler
write into its scratch folder on the node and uploads the file to the bucket
``mldiag up`` serves (the agent asks it where that is).
"""

from __future__ import annotations

import pytest

from capture_support import create_run, mldiag, mldiag_json, profile_file, running_agent, session, wait_for

pytestmark = pytest.mark.slow

RUN = "capture-agent"


@pytest.fixture(scope="module")
def agent_home(tmp_path_factory):
    return tmp_path_factory.mktemp("agent-home")


@pytest.fixture(scope="module")
def agent(control_plane, workloads, agent_home):
    create_run(control_plane, RUN)
    (workload,) = workloads(1)
    with running_agent(control_plane, RUN, workload.port, agent_home):
        yield workload


def registered_targets(control_plane) -> list[dict]:
    return mldiag_json(control_plane, "profiler-target", "list", "--machine-learning-run", RUN)


def test_the_agent_registers_the_workload_and_captures_it_on_request(control_plane, agent):
    (target,) = wait_for(lambda: registered_targets(control_plane), "the agent's heartbeat")
    assert target["name"].endswith("/profilerTargets/node-a-0")
    assert target["agent"] == "node-a" and target["state"] == "ACTIVE"
    assert target["profilerAddress"] == f"node-a:{agent.port}" and target["lastHeartbeatTime"]

    captured = mldiag(control_plane, "profiler-session", "capture", "s1", "--machine-learning-run", RUN,
                      "--duration", "1s", "--format", "json")
    assert captured.returncode == 0, captured.stderr
    assert session(control_plane, RUN, "s1")["targetSessions"]["node-a-0"]["sessionPhase"] == "SUCCEEDED"
    assert profile_file(control_plane, RUN, "s1", "node-a-0").stat().st_size > 10_000
    wait_for(lambda: session(control_plane, RUN, "s1")["hostFiles"], "the uploaded file's registration")


def test_the_agent_uploads_into_the_data_folder_mldiag_up_was_given_not_its_own_home(
        control_plane, agent, agent_home):
    wait_for(lambda: registered_targets(control_plane), "the agent's heartbeat")
    captured = mldiag(control_plane, "profiler-session", "capture", "s-home", "--machine-learning-run", RUN,
                      "--duration", "1s")
    assert captured.returncode == 0, captured.stdout + captured.stderr
    assert profile_file(control_plane, RUN, "s-home", "node-a-0").is_file()
    assert not (agent_home / ".mldiag").exists()


def test_a_workload_that_exited_fails_the_agents_capture_as_unreachable(control_plane, agent):
    agent.kill()
    captured = mldiag(control_plane, "profiler-session", "capture", "s2", "--machine-learning-run", RUN,
                      "--duration", "1s")
    assert captured.returncode == 1
    error = session(control_plane, RUN, "s2")["targetSessions"]["node-a-0"]["error"]
    assert error.startswith(f"unreachable: cannot connect to 127.0.0.1:{agent.port}")
