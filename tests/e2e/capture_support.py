"""What the e2e tests share besides their fixtures (``conftest.py``): the handle on ``mldiag up``,
JAX workloads serving the profiler, targets, and the CLI (against ``mldiag up`` or the devstack)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import requests

MLDIAG = str(Path(sys.executable).parent / "mldiag")
WORKLOAD = Path(__file__).parent / "workloads" / "profiler_server_workload.py"
LOCATION = "v1alpha/projects/local-project/locations/local"


class Api(Protocol):
    """A control plane the CLI talks to: ``mldiag up`` (:class:`ControlPlane`) or the devstack's function."""

    url: str


@dataclass
class ControlPlane:
    """A running ``mldiag up`` (the ``control_plane`` fixture) and the banner it printed."""

    url: str
    bucket_folder: Path
    log: Path
    banner: str

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request the server has logged so far."""
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]
        return [(line["method"], line["path"]) for line in lines if line.get("message") == "request"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Workload:
    """A training process serving the XProf profiler on a free port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process = subprocess.Popen([sys.executable, str(WORKLOAD), "--port", str(self.port)],
                                        env={**os.environ, "JAX_PLATFORMS": "cpu"},
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def wait_ready(self) -> None:
        line = self.process.stdout.readline()
        assert line.startswith("serving"), f"the workload did not start (exit {self.process.poll()})"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def mldiag(control_plane: Api, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI, with messages on one line each (rich wraps at the terminal width otherwise)."""
    return subprocess.run([MLDIAG, *args, "--api-url", control_plane.url], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "1000"})


def mldiag_json(control_plane: Api, *args: str) -> Any:
    result = mldiag(control_plane, *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def create_run(control_plane: ControlPlane, run: str) -> None:
    mldiag_json(control_plane, "machine-learning-run", "create", run, "--gcs-path", str(control_plane.bucket_folder))


def register_target(control_plane: ControlPlane, run: str, target: str, port: int, node_index: int = 0) -> None:
    response = requests.post(f"{control_plane.url}/{LOCATION}/machineLearningRuns/{run}/profilerTargets",
                             params={"profilerTargetId": target}, timeout=10,
                             json={"hostname": "127.0.0.1", "nodeIndex": node_index,
                                   "profilerAddress": f"127.0.0.1:{port}"})
    assert response.status_code == 200, response.text


def session(control_plane: Api, run: str, session_id: str) -> dict[str, Any]:
    return mldiag_json(control_plane, "profiler-session", "describe", session_id, "--machine-learning-run", run)


def analysed(control_plane: Api, run: str, session_id: str) -> dict[str, Any] | None:
    """The session once its analysis is DONE (None before); a FAILED analysis fails the test."""
    described = session(control_plane, run, session_id)
    assert described["analysis"]["state"] != "FAILED", described["analysis"]["error"]
    return described if described["analysis"]["state"] == "DONE" else None


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return result


def profile_file(control_plane: ControlPlane, run: str, session_id: str, target: str) -> Path:
    return control_plane.bucket_folder / run / "plugins" / "profile" / session_id / f"{target}.xplane.pb"


@contextlib.contextmanager
def running_agent(control_plane: ControlPlane, run: str, port: int, home: Path) -> Iterator[subprocess.Popen]:
    """``mldiag agent`` for ``run`` on this machine, registering the profiler server on ``port`` as node-a;
    stopped with SIGTERM after the block, which it must answer with exit status 0.

    Its environment names no data folder and its home is ``home``, as a user's shell next to
    ``mldiag up --data X`` would be: where it uploads, it learns from the control plane."""
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("MLDIAG_DATA_DIR", "MLDIAG_BACKEND")}
    process = subprocess.Popen(
        [MLDIAG, "agent", "--machine-learning-run", run, "--port", str(port), "--hostname", "node-a",
         "--heartbeat-interval", "1", "--poll-interval", "0.2", "--api-url", control_plane.url],
        env={**environment, "HOME": str(home), "MLDIAG_LOG_FORMAT": "json"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    yield process
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0, process.stderr.read()[-3000:]
