"""Fixtures of the e2e tests: a real ``mldiag up`` per test module, and JAX workloads serving the profiler."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from capture_support import MLDIAG, ControlPlane, Workload

START_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """``mldiag up`` on a free port over a fresh data dir, stopped (SIGTERM, the clean path) after the module.

    A test module adds options with ``MLDIAG_UP_ARGS`` (e.g. ``("--viewer", "--viewer-port", "0")``)
    and settings with ``MLDIAG_UP_ENV`` (e.g. ``{"MLDIAG_API_TOKEN": ...}``).
    """
    state = tmp_path_factory.mktemp("mldiag-up")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MLDIAG_LOG_FORMAT": "json",
           **getattr(request.module, "MLDIAG_UP_ENV", {})}
    env.pop("MLDIAG_BACKEND", None)
    # An analysis run earlier in this process quiets XProf's C++ logging for itself (analysis/xprof/xprof_tools.py);
    # mldiag up starts as a user's shell would, at the default level.
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    log = state / "up.log"
    with log.open("wb") as errors:
        process = subprocess.Popen([MLDIAG, "up", "--data", str(state / "data"), "--port", "0", "--otlp-port", "0",
                                    *getattr(request.module, "MLDIAG_UP_ARGS", ())],
                                   env=env, stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        banner = ""
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Ctrl-C" not in banner:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                pytest.fail(f"mldiag up exited with {process.returncode}:\n{log.read_text()}", pytrace=False)
            banner += line
            assert time.monotonic() < deadline, f"mldiag up did not start:\n{banner}"
        url = re.search(r"control plane at (\S+) ", banner)[1]
        folder = Path(re.search(r"gcs_path=(\S+) ", banner)[1])
        yield ControlPlane(url, folder, log, banner)
    finally:
        process.terminate()  # SIGTERM: the clean shutdown path
        assert process.wait(timeout=30) == 0, log.read_text()[-2000:]
    assert '"stopping"' in log.read_text()


@pytest.fixture(scope="module")
def workloads() -> Iterator[Callable[[int], list[Workload]]]:
    """Start ``n`` workloads (in parallel; JAX takes seconds to import); all are killed at the end."""
    started: list[Workload] = []

    def start(n: int) -> list[Workload]:
        batch = [Workload() for _ in range(n)]
        started.extend(batch)
        for workload in batch:
            workload.wait_ready()
        return batch

    yield start
    for workload in started:
        workload.kill()
