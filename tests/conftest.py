"""Fixtures shared by every test layer: the embedded services, and the devstack for the emulator tests.

The devstack is a running one if ``FIRESTORE_EMULATOR_HOST``,
``PUBSUB_EMULATOR_HOST`` and ``STORAGE_EMULATOR_HOST`` are set (``.ci/run``, or
a developer's ``scripts/devstack``); otherwise the first test that needs it
starts one for the session (so ``pytest tests/integration`` works on its own)
and it stops at the end. Without java or the emulator jars those tests are
skipped, unless ``MLDIAG_REQUIRE_EMULATORS=1`` makes that a failure.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from mldiag.adapters.analysis_runner.child_process import ChildProcessAnalysisRunner
from mldiag.adapters.bus.inprocess import InProcessBus
from mldiag.adapters.blobs.local import LocalBlobs
from mldiag.adapters.fleet.sqlite import SqliteFleet
from mldiag.adapters.store.sqlite import SqliteStore
from mldiag.bootstrap import dial_profiler
from mldiag.services.dependencies import Services
from mldiag.config import Settings


DEPLOYMENT_SETTINGS = pytest.StashKey[dict[str, str]]()
EMULATOR_VARIABLES = ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "STORAGE_EMULATOR_HOST")
ISOLATED_VARIABLES = (*EMULATOR_VARIABLES, "DIAGON_BASE_URL", "GOOGLE_CLOUD_PROJECT")
DEVSTACK_START_TIMEOUT_S = 120
REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Take a running devstack's ``MLDIAG_*`` settings (``MLDIAG_BACKEND=gcp``, its project and bucket)
    out of the environment: tests run on the embedded backend, and only the ``devstack`` fixtures
    put them back. ``MLDIAG_REQUIRE_*`` stay: they are
    demands on the test run itself."""
    config.stash[DEPLOYMENT_SETTINGS] = {
        name: os.environ.pop(name) for name in list(os.environ)
        if name.startswith("MLDIAG_") and not name.startswith("MLDIAG_REQUIRE_")
    }


@pytest.fixture
def isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No deployment settings or emulator variables: the embedded backend only. Autouse where every test
    of a folder needs it (``tests/unit``, and the unit-style tests moved to ``tests/integration``)."""
    for name in list(os.environ):
        if name.startswith("MLDIAG_REQUIRE_"):  # CI's demands on the test run itself
            continue
        if name.startswith("MLDIAG_") or name in ISOLATED_VARIABLES:
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def deployment_settings(request: pytest.FixtureRequest) -> dict[str, str]:
    """The ``MLDIAG_*`` settings the environment had when the run started (a devstack's, in CI)."""
    return dict(request.config.stash[DEPLOYMENT_SETTINGS])


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` for the block, the previous environment restored after it."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in values.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="session")
def devstack_environment(deployment_settings: dict[str, str],
                         tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The devstack's environment (``MLDIAG_*``, ``MLDIAG_API_URL`` included, and ``*_EMULATOR_HOST``).

    ``os.environ`` is left alone: a test gets it set through ``devstack``, a module through
    ``devstack_module``, so that the tests after them stay on the embedded backend.
    """
    if all(os.environ.get(name) for name in EMULATOR_VARIABLES):
        # The running devstack's MLDIAG_* settings, set aside by pytest_configure.
        yield {name: os.environ[name] for name in EMULATOR_VARIABLES} | deployment_settings
        return
    if os.environ.get("MLDIAG_REQUIRE_EMULATORS") == "1":
        pytest.fail("MLDIAG_REQUIRE_EMULATORS=1 but the emulators' variables are not set", pytrace=False)
    from mldiag.local.devstack import read_env_file

    state = tmp_path_factory.mktemp("devstack")
    env_file = state / "env"
    with (state / "devstack.log").open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "mldiag.local.devstack", "--project", "mldiag-integration",
             "--functions-dir", str(REPO / "functions"), "--data-dir", str(state / "data"),
             "--env-file", str(env_file)],
            stdout=subprocess.DEVNULL, stderr=log_file,
        )
    try:
        deadline = time.monotonic() + DEVSTACK_START_TIMEOUT_S
        while not env_file.exists():
            if process.poll() is not None:
                log = (state / "devstack.log").read_text(errors="replace")
                if process.returncode == 2:  # a prerequisite is missing; the log says which
                    pytest.skip(f"no devstack: {log.strip().splitlines()[-1]}")
                pytest.fail(f"devstack exited with {process.returncode}:\n{log}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"devstack not ready after {DEVSTACK_START_TIMEOUT_S} s", pytrace=False)
            time.sleep(0.2)
        yield read_env_file(env_file)
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def devstack(devstack_environment: dict[str, str]) -> Iterator[dict[str, str]]:
    """The devstack's environment, also set in ``os.environ`` for the test."""
    with _environment(devstack_environment):
        yield devstack_environment


@pytest.fixture(scope="module")
def devstack_module(devstack_environment: dict[str, str]) -> Iterator[dict[str, str]]:
    """The devstack's environment, set in ``os.environ`` for the module (for module-scoped fixtures)."""
    with _environment(devstack_environment):
        yield devstack_environment


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)):
        self.current = start

    def __call__(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def embedded(tmp_path: Path, clock: Clock) -> Services:
    """Embedded services in a temp dir, with a hand-driven clock and a fast-retrying bus."""
    settings = Settings(data_dir=tmp_path / "data", project="p", location="l", bucket="profiles")
    return Services(
        settings=settings,
        store=SqliteStore(settings.sqlite_path),
        blobs=LocalBlobs(settings.data_dir),
        bus=InProcessBus("p", max_attempts=3, min_backoff=0.001, max_backoff=0.01),
        profiler=dial_profiler,
        analysis_runner=ChildProcessAnalysisRunner(settings),
        now=clock,
        fleet=SqliteFleet(settings.fleet_path),
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something is listening on."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield listening.getsockname()[1]
