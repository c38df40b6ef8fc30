"""``mldiag agent``: the node daemon that captures the profiler servers of its own node.

It runs next to workloads the capture function cannot reach (a private
cluster network, a Slurm partition, a VM without an open port) — deployed as a
Kubernetes DaemonSet, a Slurm prolog or a Compute Engine startup script
(``scripts/deploy/``). For every local profiler port it serves, it

* registers the target with the control plane and keeps it alive by heartbeat,
  as long as the port accepts connections — when the workload exits the
  heartbeats stop and maintenance marks the target GONE; each time a port
  starts or stops answering, the agent says so (``say``);
* pulls the capture tasks meant for it (:mod:`mldiag.services.capture.agents`),
  captures from ``127.0.0.1:<port>`` — the port of its own configuration,
  never an address taken from a task — and uploads what the profiler wrote;
* reports each task's outcome, which lands in the session like any other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog

from mldiag import bootstrap
from mldiag.client.api import ApiClient, ApiError
from mldiag.domain.capture import CaptureFailed, Failure
from mldiag.domain.names import RunName
from mldiag.domain.resources import ProfilerTarget
from mldiag.ports import BlobStore, ProfilerDialer
from mldiag.services.capture.execute import Executor
from mldiag.services.capture.tasks import CaptureTask, TaskResult

LOCALHOST = "127.0.0.1"
MAX_PARALLEL_CAPTURES = 16

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class LocalTarget:
    """A profiler server on this node: its port and the node index it stands for."""

    port: int
    node_index: int

    def target_id(self, hostname: str) -> str:
        return ProfilerTarget.default_id(hostname, self.node_index)


@dataclass
class AgentConfig:
    name: str
    hostname: str
    run: RunName
    targets: list[LocalTarget]
    heartbeat_interval_s: float = 15.0
    poll_interval_s: float = 2.0
    scratch_dir: str | None = None  # where profiler servers write before the upload; shared with containers


@dataclass
class Agent:
    config: AgentConfig
    api: ApiClient
    blobs: BlobStore
    stopping: threading.Event = field(default_factory=threading.Event)
    dial: ProfilerDialer = bootstrap.dial_profiler
    say: Callable[[str], None] = log.info
    _answering: dict[int, bool] = field(default_factory=dict, init=False)

    @property
    def _location_path(self) -> str:
        return f"v1alpha/{self.config.run.parent}"

    @property
    def _run_path(self) -> str:
        return f"v1alpha/{self.config.run}"

    def _ports(self) -> dict[str, int]:
        return {t.target_id(self.config.hostname): t.port for t in self.config.targets}

    def beat(self) -> list[str]:
        """Heartbeat every target whose profiler port accepts connections; returns their ids."""
        alive = []
        for local in self.config.targets:
            target_id = local.target_id(self.config.hostname)
            answering = self.dial(f"{LOCALHOST}:{local.port}").reachable()
            self._say_when_changed(local.port, target_id, answering)
            if not answering:
                continue
            self.api.call("POST", f"{self._run_path}/profilerTargets/{target_id}:heartbeat", body={
                "agent": self.config.name, "hostname": self.config.hostname, "nodeIndex": local.node_index,
                "isMaster": local.node_index == 0, "profilerAddress": f"{self.config.hostname}:{local.port}",
            })
            alive.append(target_id)
        return alive

    def _say_when_changed(self, port: int, target_id: str, answering: bool) -> None:
        before = self._answering.get(port)
        self._answering[port] = answering
        server = f"profiler server on {LOCALHOST}:{port}"
        if answering and not before:
            self.say(f"the {server} is target {target_id} of run {self.config.run.run}")
        elif not answering and before is None:
            self.say(f"no {server} yet: it becomes target {target_id} once the workload serves it")
        elif not answering and before:
            self.say(f"the {server} stopped answering: target {target_id} turns GONE within a minute")

    def work(self) -> int:
        """Claim this agent's pending tasks, run them at once, report each; returns how many ran."""
        claimed = self.api.call("POST", f"{self._location_path}/captureTasks:claim",
                                body={"agent": self.config.name}).get("tasks", [])
        if not claimed:
            return 0
        with ThreadPoolExecutor(max_workers=min(len(claimed), MAX_PARALLEL_CAPTURES),
                                thread_name_prefix="agent-capture") as pool:
            results = list(pool.map(self._run, claimed))
        for key, result in results:
            self.api.call("POST", f"{self._location_path}/captureTasks:complete",
                          body={"agent": self.config.name, "task": key, "result": result.to_json()})
        return len(results)

    def _run(self, claimed: dict[str, Any]) -> tuple[str, TaskResult]:
        task = CaptureTask.model_validate(claimed["task"])
        port = self._ports().get(task.target)
        if port is None:
            failed = CaptureFailed(Failure.ERROR, f"node agent {self.config.name} serves no target {task.target}")
            return task.key, TaskResult.failed(failed)
        log.info("capturing", task=task.key, action=task.action.value, port=port)
        try:
            executor = Executor(self.blobs, write_direct=False, scratch_dir=self.config.scratch_dir)
            return task.key, executor.run(task, self.dial(f"{LOCALHOST}:{port}"), claimed["sessionFolder"])
        except Exception as error:  # noqa: BLE001 - e.g. an upload that failed: reported, not lost
            log.exception("capture task crashed", task=task.key)
            return task.key, TaskResult.failed(CaptureFailed(Failure.ERROR, f"{type(error).__name__}: {error}"))

    def run_forever(self) -> None:
        """Beat and poll until :attr:`stopping` is set; a control plane that is down is retried."""
        next_beat = 0.0
        while not self.stopping.is_set():
            try:
                if time.monotonic() >= next_beat:
                    self.beat()
                    next_beat = time.monotonic() + self.config.heartbeat_interval_s
                self.work()
            except ApiError as error:
                log.warning("control plane call failed; retrying", error=str(error))
            self.stopping.wait(self.config.poll_interval_s)
