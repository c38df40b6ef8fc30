"""Fixtures shared by every test layer, and the deployment settings set aside for the emulator tests."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from mldiag.adapters.inprocess_bus import InProcessBus
from mldiag.adapters.local_blobs import LocalBlobs
from mldiag.adapters.sqlite_store import SqliteStore
from mldiag.bootstrap import Services
from mldiag.config import Settings


DEPLOYMENT_SETTINGS = pytest.StashKey[dict[str, str]]()


def pytest_configure(config: pytest.Config) -> None:
    """Take a running devstack's ``MLDIAG_*`` settings (``MLDIAG_BACKEND=gcp``, its project and bucket)
    out of the environment: unit and end-to-end tests run on the embedded backend, and only the
    integration tests' ``devstack`` fixture puts them back. ``MLDIAG_REQUIRE_*`` stay: they are
    demands on the test run itself."""
    config.stash[DEPLOYMENT_SETTINGS] = {
        name: os.environ.pop(name) for name in list(os.environ)
        if name.startswith("MLDIAG_") and not name.startswith("MLDIAG_REQUIRE_")
    }


@pytest.fixture(scope="session")
def deployment_settings(request: pytest.FixtureRequest) -> dict[str, str]:
    """The ``MLDIAG_*`` settings the environment had when the run started (a devstack's, in CI)."""
    return dict(request.config.stash[DEPLOYMENT_SETTINGS])


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
        now=clock,
    )
