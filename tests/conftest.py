"""Fixtures shared by every test layer."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from mldiag.adapters.inprocess_bus import InProcessBus
from mldiag.adapters.local_blobs import LocalBlobs
from mldiag.adapters.sqlite_store import SqliteStore
from mldiag.bootstrap import Services
from mldiag.config import Settings


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
