"""Fixtures of the console tests: embedded services (settings overridable) and a browser-like client."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from console_support import API_URL, LOCATION, Console
from in_process_analysis_runner import InProcessAnalysisRunner
from mldiag.adapters.bus.inprocess import InProcessBus
from mldiag.adapters.blobs.local import LocalBlobs
from mldiag.adapters.store.sqlite import SqliteStore
from mldiag.bootstrap import dial_profiler
from mldiag.services.dependencies import Services
from mldiag.config import Settings


@pytest.fixture
def make_services(tmp_path: Path, clock) -> Callable[..., Services]:
    def make(**overrides: Any) -> Services:
        settings = Settings(data_dir=tmp_path / "data", project=LOCATION.project, location=LOCATION.location,
                            api_url=API_URL, **overrides)
        return Services(settings=settings, store=SqliteStore(settings.sqlite_path),
                        blobs=LocalBlobs(settings.data_dir, share_base_url=API_URL),
                        bus=InProcessBus(LOCATION.project), profiler=dial_profiler,
                        analysis_runner=InProcessAnalysisRunner(settings), now=clock)

    return make


@pytest.fixture
def services(make_services: Callable[..., Services]) -> Services:
    return make_services()


@pytest.fixture
def console(services: Services) -> Console:
    return Console(services)


@pytest.fixture
def make_console(make_services: Callable[..., Services]) -> Callable[..., Console]:
    return lambda **settings: Console(make_services(**settings))
