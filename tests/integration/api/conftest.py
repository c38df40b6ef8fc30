"""The API suite of ``tests/unit/api`` over the Firestore emulator: only ``store`` differs.

Firestore is emptied before each test; the emulator comes from the devstack
(a running one, or one the ``devstack`` fixture starts).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "api"))

from api_suite import api, google_signer, make_api, make_services, services  # noqa: E402, F401 - fixtures
from mldiag.ports import DocumentStore  # noqa: E402

PROJECT = "mldiag-api-suite"


@pytest.fixture
def store(devstack: dict[str, str]) -> DocumentStore:
    from mldiag.adapters.store.firestore import FirestoreStore

    host = devstack["FIRESTORE_EMULATOR_HOST"]
    documents = f"http://{host}/emulator/v1/projects/{PROJECT}/databases/(default)/documents"
    requests.delete(documents, timeout=10).raise_for_status()
    return FirestoreStore(PROJECT)
