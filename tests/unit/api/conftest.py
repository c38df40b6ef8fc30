"""The API suite over SQLite: ``store`` and a stand-in for Google's signing key here, the rest from ``api_suite``.

``tests/integration/api`` runs the same test functions over the Firestore emulator.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt

from api_suite import api, make_api, make_services, services  # noqa: F401 - fixtures
from mldiag.adapters.sqlite_store import SqliteStore
from mldiag.ports import DocumentStore


@pytest.fixture
def store(tmp_path: Path) -> DocumentStore:
    return SqliteStore(tmp_path / "store.sqlite3")


@pytest.fixture(scope="module")
def google_signer() -> tuple[crypt.RSASigner, bytes]:
    """A signing key and its self-signed certificate, standing in for one of Google's."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "accounts.google.com")])
    now = datetime.now(timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
                   .not_valid_after(now + timedelta(days=1)).sign(key, hashes.SHA256()))
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    return crypt.RSASigner.from_string(private_pem, key_id="test-key"), certificate.public_bytes(
        serialization.Encoding.PEM)
