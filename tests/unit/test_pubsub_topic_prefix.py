"""A deployment that shares its project publishes to its own, prefixed topics; the code keeps mldiag.config's names."""

from __future__ import annotations

import pytest

from mldiag.adapters.bus.pubsub import PubSubBus
from mldiag.config import ANALYSIS_REQUESTS, Settings
from mldiag.domain.errors import InvalidArgument


class Published:
    def __init__(self):
        self.topics: list[str] = []

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def publish(self, topic_path: str, data: bytes, ordering_key: str = "", **attributes: str):
        self.topics.append(topic_path)
        return self

    def result(self, timeout: float) -> str:
        return "1"


@pytest.mark.parametrize(("environment", "expected"), [
    ({}, f"projects/p/topics/{ANALYSIS_REQUESTS}"),
    ({"MLDIAG_TOPIC_PREFIX": "team-a-"}, f"projects/p/topics/team-a-{ANALYSIS_REQUESTS}"),
])
def test_publishing_goes_to_the_deployments_own_topic(environment, expected):
    settings = Settings.from_env({"MLDIAG_PROJECT": "p", **environment})
    bus, published = PubSubBus(settings.project, settings.topic_prefix), Published()
    bus._publisher = published  # the client is otherwise made on the first publish
    assert bus.publish(ANALYSIS_REQUESTS, b"{}") == "1"
    assert published.topics == [expected]


def test_a_prefix_that_would_not_make_a_topic_name_is_refused():
    with pytest.raises(InvalidArgument, match="MLDIAG_TOPIC_PREFIX|topic_prefix"):
        Settings.from_env({"MLDIAG_TOPIC_PREFIX": "Team A"})
