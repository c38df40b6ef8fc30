"""The node agent's local door for the SDK, over real sockets: the real API behind a token, the agent's
forwarder on a free port, and the official SDK's own client in front."""

from __future__ import annotations

import dataclasses
import http.client
import json
import threading
from collections.abc import Iterator

import pytest
import requests
import structlog.testing
from google_cloud_mldiagnostics.clients.self_hosted_diagon_service_client import SelfHostedDiagonServiceClient
from werkzeug.serving import make_server

from mldiag.entrypoints.http.app import create_app
from mldiag.services.dependencies import Services
from mldiag.agent.sdk_forwarder import MAX_BODY_BYTES, SdkForwarder
from mldiag.client.api import ApiClient

TOKEN = "agent-token-for-tests"
RUNS = "/v1alpha/projects/p/locations/l/machineLearningRuns"
LOGICAL_ID = "7a1c5e0f-3b2d-4c8e-9f10-123456789abc"


@pytest.fixture
def control_plane(embedded: Services) -> Iterator[tuple[str, Services]]:
    services = dataclasses.replace(embedded, settings=embedded.settings.model_copy(update={"api_token": TOKEN}))
    server = make_server("127.0.0.1", 0, create_app(services), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", services
    server.shutdown()


@pytest.fixture
def forwarder(control_plane) -> Iterator[SdkForwarder]:
    url, _ = control_plane
    forwarder = SdkForwarder(ApiClient(url, TOKEN, timeout=4.0)).start()
    yield forwarder
    forwarder.stop()


def _raw(forwarder: SdkForwarder, method: str, path: str, body: bytes = b"", **headers: str):
    connection = http.client.HTTPConnection("127.0.0.1", forwarder.port, timeout=10)
    connection.putrequest(method, path, skip_host="Host" in headers)
    for name, value in {"Content-Type": "application/json", **headers}.items():
        connection.putheader(name, value)
    if "Transfer-Encoding" not in headers:
        connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    return response.status, json.loads(response.read() or b"{}")


@pytest.mark.slow
def test_the_sdk_registers_and_ends_its_run_through_the_agent_with_the_agents_token(forwarder, control_plane):
    _, services = control_plane
    sdk = SelfHostedDiagonServiceClient(control_plane_url=forwarder.url)
    created = sdk.create_ml_run(name=LOGICAL_ID, display_name="train", run_phase="ACTIVE",
                                artifacts={"gcsPath": "gs://profiles/team"}, workload_details={"id": "train"})
    assert created["name"] == f"machineLearningRuns/{LOGICAL_ID}"
    assert sdk.update_ml_run(name=LOGICAL_ID, run_phase="COMPLETED")["workload"]["state"] == "STATE_SUCCEEDED"
    # The control plane took the calls as the API token's: the agent's credential, not the SDK's (it has none).
    stored = services.runs.get(f"projects/p/locations/l/machineLearningRuns/{LOGICAL_ID}")
    assert stored.registered_by == "api-token" and stored.run_phase.value == "COMPLETED"
    assert requests.get(f"{forwarder.url}/v1/agent-info", timeout=10).json() == {"cluster_id": "default"}


@pytest.mark.parametrize(("method", "path"), [
    ("POST", f"{RUNS}?machine_learning_run_id=r1"),
    ("DELETE", f"{RUNS}/r1"),
    ("GET", "/v1alpha/projects/p/locations/l/events"),
    ("PATCH", "/v1/machineLearningRuns/a/b"),
    ("PATCH", "/v1/../v1alpha/projects/p/locations/l/machineLearningRuns/r1"),
    ("PATCH", "/v1/machineLearningRuns/.."),
    ("PATCH", "/v1/machineLearningRuns/%2e%2e%2fevents"),
    ("GET", "/ui"),
])
@pytest.mark.slow
def test_only_the_sdks_routes_are_forwarded(forwarder, control_plane, method, path):
    status, body = _raw(forwarder, method, path, b"{}")
    assert status == 404 and "forwards the SDK's routes only" in body["error"]["message"]
    _, services = control_plane
    assert services.runs.list("projects/p/locations/l").items == []


@pytest.mark.slow
def test_a_web_page_that_rebinds_a_name_to_the_agent_is_refused(forwarder):
    status, body = _raw(forwarder, "PATCH", "/v1/machineLearningRuns?allow_missing=true",
                        json.dumps({"logicalId": "x"}).encode(), Host="attacker.example")
    assert status == 403


@pytest.mark.slow
def test_bodies_are_bounded(forwarder):
    too_big = b" " * (MAX_BODY_BYTES + 1)
    assert _raw(forwarder, "PATCH", "/v1/machineLearningRuns", too_big)[0] == 413
    assert _raw(forwarder, "PATCH", "/v1/machineLearningRuns", b"", **{"Transfer-Encoding": "chunked"})[0] == 411


@pytest.mark.slow
def test_a_refusal_by_the_control_plane_reaches_the_sdk_and_the_log_in_one_line(control_plane):
    url, _ = control_plane
    forwarder = SdkForwarder(ApiClient(url, "not-the-token", timeout=4.0)).start()
    try:
        with structlog.testing.capture_logs() as logged:
            status, body = _raw(forwarder, "PATCH", "/v1/machineLearningRuns?allow_missing=true",
                                json.dumps({"logicalId": LOGICAL_ID}).encode())
    finally:
        forwarder.stop()
    assert status == 403 and body["error"]["status"] == "PERMISSION_DENIED"
    refusals = [line for line in logged if line["event"] == "the control plane refused an SDK call"]
    assert len(refusals) == 1 and "the bearer token is not valid" in refusals[0]["reason"]


@pytest.mark.slow
def test_a_control_plane_that_cannot_be_reached_is_a_503(closed_port):
    forwarder = SdkForwarder(ApiClient(f"http://127.0.0.1:{closed_port}", TOKEN, timeout=2.0)).start()
    try:
        status, body = _raw(forwarder, "PATCH", "/v1/machineLearningRuns?allow_missing=true", b"{}")
    finally:
        forwarder.stop()
    assert status == 503 and "cannot reach the control plane" in body["error"]["message"]
