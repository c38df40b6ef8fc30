"""``mldiag agent`` says when a profiler port it serves starts or stops answering, so that an agent started
before its workload (or after it ended) is never silent about why it registers nothing."""

from __future__ import annotations

from dataclasses import dataclass, field

from mldiag.agent.daemon import Agent, AgentConfig, LocalTarget
from mldiag.domain.names import parse_run

RUN = parse_run("projects/p/locations/l/machineLearningRuns/r1")


@dataclass
class Port:
    up: bool = False

    def reachable(self) -> bool:
        return self.up


@dataclass
class Api:
    calls: list[tuple[str, str]] = field(default_factory=list)

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        self.calls.append((method, path))
        return {}


def test_each_change_of_a_ports_answer_is_said_once():
    port, api, said = Port(), Api(), []
    agent = Agent(AgentConfig(name="node-a", hostname="node-a", run=RUN, targets=[LocalTarget(9999, 0)]),
                  api, blobs=None, dial=lambda address: port, say=said.append)
    agent.beat()
    agent.beat()
    port.up = True
    agent.beat()
    agent.beat()
    port.up = False
    agent.beat()
    assert said == [
        "no profiler server on 127.0.0.1:9999 yet: it becomes target node-a-0 once the workload serves it",
        "the profiler server on 127.0.0.1:9999 is target node-a-0 of run r1",
        "the profiler server on 127.0.0.1:9999 stopped answering: target node-a-0 turns GONE within a minute",
    ]
    assert len(api.calls) == 2  # heartbeats only while it answers
