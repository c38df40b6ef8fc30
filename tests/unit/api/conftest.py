"""Fixtures for the API suite: the app over a real document store.

The store is SQLite here; ``tests/integration/api`` overrides ``store`` with the
Firestore emulator and runs the same test functions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from api_suite import API_URL, LOCATION, PROJECT, Api
from mldiag.adapters.inprocess_bus import InProcessBus
from mldiag.adapters.local_blobs import LocalBlobs
from mldiag.adapters.sqlite_store import SqliteStore
from mldiag.api import create_app
from mldiag.bootstrap import Services
from mldiag.config import Settings
from mldiag.ports import DocumentStore


@pytest.fixture
def store(tmp_path: Path) -> DocumentStore:
    return SqliteStore(tmp_path / "store.sqlite3")


@pytest.fixture
def make_services(store: DocumentStore, tmp_path: Path) -> Callable[..., Services]:
    """Services over ``store`` with settings overridden by keyword (``api_token=...``)."""

    def make(**overrides: Any) -> Services:
        settings = Settings(data_dir=tmp_path / "data", project=PROJECT, location=LOCATION,
                            api_url=API_URL, **overrides)
        blobs = LocalBlobs(settings.data_dir, share_base_url=API_URL, share_key=settings.share_key)
        return Services(settings=settings, store=store, blobs=blobs, bus=InProcessBus(PROJECT))

    return make


@pytest.fixture
def services(make_services: Callable[..., Services]) -> Services:
    return make_services()


@pytest.fixture
def make_api(make_services: Callable[..., Services]) -> Callable[..., Api]:
    def make(headers: dict[str, str] | None = None, **settings: Any) -> Api:
        return Api(create_app(make_services(**settings)).test_client(), headers)

    return make


@pytest.fixture
def api(services: Services) -> Api:
    return Api(create_app(services).test_client())
