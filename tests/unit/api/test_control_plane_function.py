"""The deployable ``control_plane`` function: functions-framework hands each request to the API untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
from functions_framework import create_app

from mldiag import bootstrap
from mldiag.entrypoints.http.rest import MAX_BODY_BYTES
from mldiag.config import Settings

SOURCE = Path(__file__).resolve().parents[3] / "functions" / "control_plane" / "main.py"
RUNS = "/v1alpha/projects/p/locations/l/machineLearningRuns"


@pytest.fixture
def function(tmp_path, monkeypatch):
    for name, value in {"MLDIAG_BACKEND": "embedded", "MLDIAG_DATA_DIR": str(tmp_path), "MLDIAG_PROJECT": "p",
                        "MLDIAG_LOCATION": "l", "MLDIAG_API_TOKEN": "function-token"}.items():
        monkeypatch.setenv(name, value)
    bootstrap.services.cache_clear()
    yield create_app("control_plane", str(SOURCE), "http").test_client()
    bootstrap.services.cache_clear()


def test_requests_reach_the_api_with_body_query_and_headers(function):
    auth = {"Authorization": "Bearer function-token"}
    created = function.post(f"{RUNS}?machine_learning_run_id=r1", json={"displayName": "via function"}, headers=auth)
    assert created.status_code == 200 and created.json["response"]["displayName"] == "via function"
    assert function.get(f"{RUNS}/r1").json["displayName"] == "via function"
    sdk = f"/sdk/{Settings(api_token='function-token').sdk_capability}/v1/machineLearningRuns?allow_missing=true"
    assert function.patch(sdk, json={"logicalId": "sdk-run"}).status_code == 200


def test_refusals_keep_their_status_and_error_shape(function):
    refused = function.post(f"{RUNS}?machine_learning_run_id=r1", json={})
    assert refused.status_code == 401 and refused.json["error"]["status"] == "UNAUTHENTICATED"
    sdk_without_capability = function.patch("/v1/machineLearningRuns?allow_missing=true", json={"logicalId": "a"})
    assert sdk_without_capability.status_code == 401
    missing = function.get(f"{RUNS}/nope")
    assert missing.status_code == 404 and missing.json["error"]["status"] == "NOT_FOUND"
    oversized = function.post(f"{RUNS}?machine_learning_run_id=r2", data=b"x" * (MAX_BODY_BYTES + 1),
                              headers={"Authorization": "Bearer function-token"})
    assert oversized.status_code == 413
