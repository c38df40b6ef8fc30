"""A run with a gcsPath and helpers to register its targets, on the embedded backend."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from mldiag.services.dependencies import Services
from mldiag.domain import MachineLearningRun, ProfilerTarget
from mldiag.domain.names import LocationName, RunName

RUN = LocationName("p", "l").run("r1")


@pytest.fixture
def run(embedded: Services) -> RunName:
    embedded.runs.create(MachineLearningRun(name=str(RUN), artifacts={"gcsPath": "gs://profiles/runs"}))
    return RUN


@pytest.fixture
def add_target(embedded: Services, run: RunName) -> Callable[..., ProfilerTarget]:
    def add(target_id: str, address: str = "127.0.0.1:9999", **fields: object) -> ProfilerTarget:
        return embedded.targets.create(ProfilerTarget(name=f"{run}/profilerTargets/{target_id}", hostname="h",
                                                      profiler_address=address, **fields))
    return add


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class SilentListener:
    """A port that accepts TCP connections and never says a word, counting who connected."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.socket.settimeout(0.05)
        self.port = self.socket.getsockname()[1]
        self.accepted: list[socket.socket] = []

    def connections(self) -> int:
        """How many connections have arrived so far (the kernel completes them without us)."""
        while True:
            try:
                self.accepted.append(self.socket.accept()[0])
            except TimeoutError:
                return len(self.accepted)

    def close(self) -> None:
        for connection in self.accepted:
            connection.close()
        self.socket.close()


@pytest.fixture
def silent_listener() -> Iterator[SilentListener]:
    listener = SilentListener()
    yield listener
    listener.close()
