"""What the API test suite shares: paths, a small client, and the fixtures every backend uses.

Each conftest that runs the suite imports these fixtures and provides ``store``
(SQLite in ``tests/unit/api``, the Firestore emulator in ``tests/integration/api``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from flask import Flask
from flask.testing import FlaskClient
from google.auth import crypt
from requests.structures import CaseInsensitiveDict

from in_process_analysis_runner import InProcessAnalysisRunner
from mldiag.adapters.bus.inprocess import InProcessBus
from mldiag.adapters.blobs.local import LocalBlobs
from mldiag.entrypoints.http.app import create_app
from mldiag.bootstrap import dial_profiler
from mldiag.services.dependencies import Services
from mldiag.config import Settings
from mldiag.ports import DocumentStore

PROJECT, LOCATION = "test-project", "test-location"
API_URL = "http://mldiag.test"
OWNED_BUCKET = "profiles"  # the bucket the suite's runs write to, besides the default one
BASE = f"/v1alpha/projects/{PROJECT}/locations/{LOCATION}"
RUNS = f"{BASE}/machineLearningRuns"


class Api:
    """The Flask test client, with the paths and bodies the suite uses over and over."""

    def __init__(self, client: FlaskClient, headers: dict[str, str] | None = None):
        self.client = client
        self.headers = headers or {}

    def request(self, method: str, path: str, **kwargs: Any):
        return self.client.open(path, method=method, headers={**self.headers, **kwargs.pop("headers", {})},
                                **kwargs)

    def create_run(self, run_id: str, **body: Any) -> dict[str, Any]:
        response = self.request("POST", f"{RUNS}?machine_learning_run_id={run_id}", json=body)
        assert response.status_code == 200, response.json
        assert response.json["done"] is True
        return response.json["response"]

    def run(self, run_id: str):
        return self.request("GET", f"{RUNS}/{run_id}")


class WsgiAdapter(requests.adapters.BaseAdapter):
    """Serves a ``requests`` session from a WSGI app in this process, so real clients
    (the official SDK's, the CLI's) can talk to the app without a socket."""

    def __init__(self, app: Flask):
        super().__init__()
        self._client = app.test_client()

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        served = self._client.open(request.url, method=request.method, data=request.body,
                                   headers=dict(request.headers))
        response = requests.Response()
        response.status_code = served.status_code
        response._content = served.get_data()
        response.headers = CaseInsensitiveDict(served.headers)
        response.url = request.url or ""
        response.request = request
        return response

    def close(self) -> None:
        pass


@pytest.fixture
def make_services(store: DocumentStore, tmp_path: Path) -> Callable[..., Services]:
    """Services over ``store`` with settings overridden by keyword (``api_token=...``)."""

    def make(**overrides: Any) -> Services:
        settings = Settings(**{"data_dir": tmp_path / "data", "project": PROJECT, "location": LOCATION,
                               "api_url": API_URL, "owned_buckets": [OWNED_BUCKET], **overrides})
        blobs = LocalBlobs(settings.data_dir, share_base_url=API_URL, share_key=settings.share_key)
        return Services(settings=settings, store=store, blobs=blobs, bus=InProcessBus(PROJECT), profiler=dial_profiler,
                        analysis_runner=InProcessAnalysisRunner(settings))

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
