"""The SDK's routes behind a credential: the capability URL, runs bound to who registered them, owned buckets.

Each refusal is a reproduction from an attacker's point of view: a workload
that registered its run, and a caller without the token who tries to redirect,
fail or deface it.
"""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest
import structlog.testing
from google.auth import crypt, jwt
from google.oauth2 import id_token
from google_cloud_mldiagnostics.clients.self_hosted_diagon_service_client import SelfHostedDiagonServiceClient

from api_suite import RUNS, WsgiAdapter
from mldiag.entrypoints.http.app import create_app
from mldiag.domain.resources import MachineLearningRun

TOKEN = "s3cret-token-for-tests"
SECRET = "capability-0123456789-abcdefghijklmnop"
DERIVED = hmac.new(TOKEN.encode(), b"mldiag sdk capability v1", hashlib.sha256).hexdigest()
AUDIENCE = "https://control-plane-abc.a.run.app"
LOGICAL_ID = "7a1c5e0f-3b2d-4c8e-9f10-123456789abc"
REGISTER = "/v1/machineLearningRuns?update_mask=display_name,creator,logical_id,base_blob_path&allow_missing=true"
VICTIM = f"/v1/machineLearningRuns/{LOGICAL_ID}"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _registration(**fields) -> dict:
    return {"logicalId": LOGICAL_ID, "displayName": "train", "creator": "CREATOR_MANUAL",
            "baseBlobPath": "gs://profiles/team", **fields}


def _stored(api) -> dict:
    return api.request("GET", f"{RUNS}/{LOGICAL_ID}").json


@pytest.fixture
def token_api(make_api):
    return make_api(api_token=TOKEN)


def test_without_credentials_the_sdk_routes_refuse_and_store_nothing(token_api):
    response = token_api.request("PATCH", REGISTER, json=_registration())
    assert response.status_code == 401 and response.json["error"]["status"] == "UNAUTHENTICATED"
    assert "/sdk/<secret>" in response.json["error"]["message"]
    assert token_api.request("PATCH", REGISTER, json=_registration(), headers=_bearer("wrong")).status_code == 403
    assert token_api.request("GET", RUNS).json["machineLearningRuns"] == []


def test_the_capability_derived_from_the_token_opens_the_sdk_routes(token_api):
    response = token_api.request("PATCH", f"/sdk/{DERIVED}{REGISTER}", json=_registration())
    assert response.status_code == 200, response.json
    assert response.json["name"] == f"machineLearningRuns/{LOGICAL_ID}"
    assert _stored(token_api)["registeredBy"] == "sdk-capability"


@pytest.mark.parametrize("secret", ["wrong", DERIVED[:-1], DERIVED + "0", ""])
def test_a_wrong_capability_is_refused(token_api, secret):
    response = token_api.request("PATCH", f"/sdk/{secret}{REGISTER}", json=_registration())
    assert response.status_code == 403 and response.json["error"]["status"] == "PERMISSION_DENIED"
    assert token_api.request("GET", RUNS).json["machineLearningRuns"] == []


def test_the_capability_opens_the_sdk_routes_and_nothing_else(token_api):
    capability = f"/sdk/{DERIVED}"
    assert token_api.request("POST", f"{capability}{RUNS}?machine_learning_run_id=r1", json={}).status_code == 404
    assert token_api.request("GET", f"{capability}/ui").status_code == 404
    assert token_api.request("GET", f"{capability}/v1/agent-info").json == {"cluster_id": "default"}


def test_a_configured_secret_replaces_the_derived_one(make_api):
    api = make_api(api_token=TOKEN, sdk_secret=SECRET)
    assert api.request("PATCH", f"/sdk/{DERIVED}{REGISTER}", json=_registration()).status_code == 403
    assert api.request("PATCH", f"/sdk/{SECRET}{REGISTER}", json=_registration()).status_code == 200


@pytest.mark.slow
def test_the_open_mode_has_no_capability_url(make_api):
    api = make_api()
    assert api.request("PATCH", f"/sdk/{DERIVED}{REGISTER}", json=_registration()).status_code == 404
    assert api.request("PATCH", REGISTER, json=_registration()).status_code == 200


def test_the_secret_never_reaches_the_log(token_api):
    with structlog.testing.capture_logs() as logged:
        token_api.request("PATCH", f"/sdk/{DERIVED}{REGISTER}", json=_registration())
        token_api.request("PATCH", f"/sdk/{DERIVED}/v1/machineLearningRuns/{'x' * 200}", json={})
    assert DERIVED not in repr(logged)
    assert [line["path"] for line in logged if line["event"] == "request"] == [
        "/sdk/<secret>/v1/machineLearningRuns", f"/sdk/<secret>/v1/machineLearningRuns/{'x' * 200}"]


def test_the_official_sdk_client_works_unchanged_through_the_capability_url(make_services):
    services = make_services(api_token=TOKEN)
    client = SelfHostedDiagonServiceClient(control_plane_url=f"http://sdk.test/sdk/{DERIVED}")
    client.session.mount("http://sdk.test", WsgiAdapter(create_app(services)))
    created = client.create_ml_run(name=LOGICAL_ID, display_name="train", run_phase="ACTIVE",
                                   artifacts={"gcsPath": "gs://profiles/team"}, workload_details={"id": "train"})
    assert created["workload"]["state"] == "STATE_RUNNING"
    assert client.update_ml_run(name=LOGICAL_ID, run_phase="COMPLETED")["workload"]["state"] == "STATE_SUCCEEDED"


# The reproductions: a run registered by a node agent with the API token, then attacked.

@pytest.fixture
def victim(token_api):
    response = token_api.request("PATCH", REGISTER, json=_registration(), headers=_bearer(TOKEN))
    assert response.status_code == 200, response.json
    return token_api


@pytest.mark.parametrize("attack", [
    ("base_blob_path", {"baseBlobPath": "gs://attacker-bucket/loot"}),
    ("workload.state", {"workload": {"state": "STATE_FAILED"}}),
    ("display_name,creator", {"displayName": "pwned", "creator": "attacker"}),
], ids=["redirect-storage", "fail-run", "deface"])
@pytest.mark.parametrize("route", ["", f"/sdk/{DERIVED}"], ids=["no-credential", "capability"])
def test_nobody_but_its_registrant_changes_a_run(victim, attack, route):
    mask, body = attack
    before = _stored(victim)
    response = victim.request("PATCH", f"{route}{VICTIM}?update_mask={mask}", json=body)
    assert response.status_code == (401 if not route else 403), response.json
    assert _stored(victim) == before


def test_a_capability_cannot_take_over_a_run_by_registering_its_logical_id(victim):
    before = _stored(victim)
    response = victim.request("PATCH", f"/sdk/{DERIVED}{REGISTER}", json=_registration(displayName="pwned"))
    assert response.status_code == 403 and "registered by another credential" in response.json["error"]["message"]
    assert _stored(victim) == before


@pytest.mark.parametrize("created_by", ["v1alpha", "files"])
def test_runs_not_registered_through_the_sdk_cannot_be_claimed_by_it(make_services, created_by):
    services = make_services(api_token=TOKEN)
    api = create_app(services).test_client()
    if created_by == "v1alpha":
        assert api.post(f"{RUNS}?machine_learning_run_id=r1", json={}, headers=_bearer(TOKEN)).status_code == 200
    else:  # registration made it from profile files found in the bucket
        services.runs.create(MachineLearningRun(name=f"{RUNS.removeprefix('/v1alpha/')}/r1"))
    refused = api.patch(f"/sdk/{DERIVED}/v1/machineLearningRuns/r1?update_mask=workload.state",
                        json={"workload": {"state": "STATE_FAILED"}})
    assert refused.status_code == 403
    assert api.get(f"{RUNS}/r1").json["runPhase"] == "ACTIVE"


def test_the_registrant_keeps_reporting_its_phases(victim):
    response = victim.request("PATCH", f"{VICTIM}?update_mask=workload.state",
                              json={"workload": {"state": "STATE_SUCCEEDED"}}, headers=_bearer(TOKEN))
    assert response.status_code == 200 and _stored(victim)["runPhase"] == "COMPLETED"


@pytest.mark.parametrize("path", ["gs://attacker-bucket/loot", "gs://profiles-evil/x", "/etc/cron.d", "s3://x/y"])
def test_a_storage_path_outside_the_deployments_buckets_is_refused_even_to_the_token(victim, path):
    response = victim.request("PATCH", f"{VICTIM}?update_mask=base_blob_path", json={"baseBlobPath": path},
                              headers=_bearer(TOKEN))
    assert response.status_code == 403 and "not in a bucket of this deployment" in response.json["error"]["message"]
    assert _stored(victim)["artifacts"]["gcsPath"] == "gs://profiles/team"
    v1alpha = victim.request("POST", f"{RUNS}?machine_learning_run_id=r2", json={"artifacts": {"gcsPath": path}},
                             headers=_bearer(TOKEN))
    assert v1alpha.status_code == 403


def test_owned_buckets_are_configured(make_api):
    api = make_api(api_token=TOKEN, owned_buckets=["team-a"])
    ok = api.request("PATCH", REGISTER, json=_registration(baseBlobPath="gs://team-a/x"), headers=_bearer(TOKEN))
    assert ok.status_code == 200
    default = api.request("PATCH", REGISTER, json=_registration(baseBlobPath="gs://mldiag-profiles/x"),
                          headers=_bearer(TOKEN))
    assert default.status_code == 200
    assert api.request("PATCH", REGISTER, json=_registration(baseBlobPath="gs://profiles/x"),
                       headers=_bearer(TOKEN)).status_code == 403


def test_a_run_registered_before_registrants_were_recorded_is_claimed_by_the_first(make_services):
    services = make_services(api_token=TOKEN)
    api_client = create_app(services).test_client()
    services.runs.create(MachineLearningRun(name=f"projects/test-project/locations/test-location/"
                                                 f"machineLearningRuns/{LOGICAL_ID}", logical_id=LOGICAL_ID))
    assert api_client.patch(f"/sdk/{DERIVED}{VICTIM}?update_mask=workload.state",
                            json={"workload": {"state": "STATE_RUNNING"}}).status_code == 200
    assert services.runs.get(f"projects/test-project/locations/test-location/machineLearningRuns/"
                             f"{LOGICAL_ID}").registered_by == "sdk-capability"


# Cloud mode: node agents call with their own service accounts' ID tokens; a capability needs a configured secret.

@pytest.fixture
def cloud_api(make_api, google_signer, monkeypatch):
    _, certificate = google_signer
    monkeypatch.setattr(id_token, "_fetch_certs", lambda request, url: {"test-key": certificate})
    return make_api(auth_audience=AUDIENCE, sdk_secret=SECRET)


def _id_token(signer: crypt.RSASigner, email: str) -> str:
    now = int(time.time())
    claims = {"iss": "https://accounts.google.com", "aud": AUDIENCE, "sub": email, "email": email,
              "iat": now, "exp": now + 3600}
    return jwt.encode(signer, claims).decode()


def test_in_the_cloud_each_agent_account_changes_only_its_runs(cloud_api, google_signer):
    signer, _ = google_signer
    cluster_a = _bearer(_id_token(signer, "agent-a@p.iam.gserviceaccount.com"))
    cluster_b = _bearer(_id_token(signer, "agent-b@p.iam.gserviceaccount.com"))
    assert cloud_api.request("PATCH", REGISTER, json=_registration(), headers=cluster_a).status_code == 200
    failed = cloud_api.request("PATCH", f"{VICTIM}?update_mask=workload.state",
                               json={"workload": {"state": "STATE_FAILED"}}, headers=cluster_b)
    assert failed.status_code == 403
    assert cloud_api.request("PATCH", f"{VICTIM}?update_mask=workload.state",
                             json={"workload": {"state": "STATE_SUCCEEDED"}}, headers=cluster_a).status_code == 200
    assert cloud_api.request("PATCH", REGISTER, json=_registration()).status_code == 401


def test_in_the_cloud_the_capability_url_needs_no_id_token(cloud_api):
    assert cloud_api.request("PATCH", f"/sdk/{SECRET}{REGISTER}", json=_registration()).status_code == 200
    assert cloud_api.request("PATCH", f"/sdk/{DERIVED}{REGISTER}", json=_registration()).status_code == 403


@pytest.mark.parametrize("path", ["gs://profiles/team/../other-team", "gs://profiles/..", "gs://profiles/x\x00y",
                                  "gs://profiles/a\\..\\b", "/tmp/buckets/profiles/../../etc"])
def test_a_storage_path_that_could_leave_its_folder_is_refused_at_registration(victim, path):
    response = victim.request("PATCH", f"{VICTIM}?update_mask=base_blob_path", json={"baseBlobPath": path},
                              headers=_bearer(TOKEN))
    assert response.status_code == 400, response.json
    assert response.json["error"]["message"].startswith(f"artifacts.gcsPath: the storage path {path!r} holds")
    assert _stored(victim)["artifacts"]["gcsPath"] == "gs://profiles/team"
    v1alpha = victim.request("POST", f"{RUNS}?machine_learning_run_id=r2", json={"artifacts": {"gcsPath": path}},
                             headers=_bearer(TOKEN))
    assert v1alpha.status_code == 400 and victim.request("GET", f"{RUNS}/r2").status_code == 404
