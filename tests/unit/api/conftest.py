"""The API suite over SQLite: ``store`` here, the rest from ``api_suite``.

``tests/integration/api`` runs the same test functions over the Firestore emulator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from api_suite import api, google_signer, make_api, make_services, services  # noqa: F401 - fixtures
from mldiag.adapters.store.sqlite import SqliteStore
from mldiag.ports import DocumentStore


@pytest.fixture
def store(tmp_path: Path) -> DocumentStore:
    return SqliteStore(tmp_path / "store.sqlite3")
