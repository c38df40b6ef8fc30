"""Who may call: bearer tokens locally, Google ID tokens in the cloud (the SDK's routes: test_api_sdk_capability).

The ID tokens are real JWTs signed with a key made here; only the download of
Google's signing certificates is replaced, by the certificate of that key.
"""

from __future__ import annotations

import time

import pytest
from google.auth import crypt, jwt
from google.oauth2 import id_token

from api_suite import RUNS

TOKEN = "s3cret-token-for-tests"
AUDIENCE = "https://control-plane-abc.a.run.app"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _no_runs_stored(api) -> bool:
    return api.request("GET", RUNS, headers=_bearer(TOKEN)).json["machineLearningRuns"] == []


@pytest.mark.parametrize(("headers", "code"), [({}, 401), (_bearer("wrong"), 403), ({"Authorization": TOKEN}, 401)])
def test_mutations_without_the_token_are_refused_and_change_nothing(make_api, headers, code):
    api = make_api(api_token=TOKEN)
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=r1", json={}, headers=headers)
    assert response.status_code == code
    assert response.json["error"]["status"] == {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}[code]
    assert _no_runs_stored(api)


def test_the_token_opens_mutations_and_reads_stay_open(make_api):
    api = make_api(api_token=TOKEN)
    assert api.request("POST", f"{RUNS}?machine_learning_run_id=r1", json={}, headers=_bearer(TOKEN)).status_code == 200
    assert api.request("GET", f"{RUNS}/r1").status_code == 200
    assert api.request("DELETE", f"{RUNS}/r1").status_code == 401
    assert api.request("GET", f"{RUNS}/r1").status_code == 200


@pytest.fixture
def cloud_api(make_api, google_signer, monkeypatch):
    signer, certificate = google_signer
    monkeypatch.setattr(id_token, "_fetch_certs", lambda request, url: {"test-key": certificate})
    return make_api(auth_audience=AUDIENCE)


def _id_token(signer: crypt.RSASigner, audience: str = AUDIENCE, issuer: str = "https://accounts.google.com",
              expires_in: int = 3600) -> str:
    now = int(time.time())
    claims = {"iss": issuer, "aud": audience, "sub": "1234", "email": "ci@proj.iam.gserviceaccount.com",
              "iat": now, "exp": now + expires_in}
    return jwt.encode(signer, claims).decode()


def test_cloud_mode_accepts_a_google_id_token_for_its_audience(cloud_api, google_signer):
    signer, _ = google_signer
    headers = _bearer(_id_token(signer))
    assert cloud_api.request("POST", f"{RUNS}?machine_learning_run_id=r1", json={}, headers=headers).status_code == 200
    assert cloud_api.request("GET", f"{RUNS}/r1", headers=headers).status_code == 200


@pytest.mark.parametrize("token_kind", ["other-audience", "other-issuer", "expired", "not-a-jwt"])
def test_cloud_mode_refuses_tokens_that_do_not_verify(cloud_api, google_signer, token_kind):
    signer, _ = google_signer
    token = {
        "other-audience": lambda: _id_token(signer, audience="https://someone-else.run.app"),
        "other-issuer": lambda: _id_token(signer, issuer="https://evil.example"),
        "expired": lambda: _id_token(signer, expires_in=-3600),
        "not-a-jwt": lambda: "abc.def.ghi",
    }[token_kind]()
    response = cloud_api.request("POST", f"{RUNS}?machine_learning_run_id=r1", json={}, headers=_bearer(token))
    assert response.status_code == 403, response.json
    assert cloud_api.request("GET", f"{RUNS}/r1", headers=_bearer(_id_token(signer))).status_code == 404


GCLOUD_CLIENT = "32555940559.apps.googleusercontent.com"


def test_cloud_mode_accepts_a_persons_gcloud_token_where_that_audience_is_listed(
        make_api, google_signer, monkeypatch):
    """`gcloud auth print-identity-token` as a user mints for gcloud's own OAuth client, not the URL."""
    signer, certificate = google_signer
    monkeypatch.setattr(id_token, "_fetch_certs", lambda request, url: {"test-key": certificate})
    api = make_api(auth_audience=AUDIENCE, auth_other_audiences=[GCLOUD_CLIENT])
    for audience in (GCLOUD_CLIENT, AUDIENCE):
        headers = _bearer(_id_token(signer, audience=audience))
        assert api.request("GET", RUNS, headers=headers).status_code == 200, audience
    refused = _bearer(_id_token(signer, audience="https://someone-else.run.app"))
    assert api.request("GET", RUNS, headers=refused).status_code == 403


def test_a_persons_gcloud_token_is_refused_unless_its_audience_is_listed(cloud_api, google_signer):
    signer, _ = google_signer
    assert cloud_api.request("GET", RUNS, headers=_bearer(_id_token(signer, audience=GCLOUD_CLIENT))).status_code == 403


def test_other_audiences_come_from_the_environment_and_need_the_cloud_mode():
    from mldiag.config import Settings

    settings = Settings.from_env({"MLDIAG_AUTH_AUDIENCE": AUDIENCE,
                                  "MLDIAG_AUTH_OTHER_AUDIENCES": f" {GCLOUD_CLIENT}, ,{AUDIENCE}"})
    assert settings.accepted_audiences == (AUDIENCE, GCLOUD_CLIENT)
    assert Settings.from_env({"MLDIAG_AUTH_OTHER_AUDIENCES": GCLOUD_CLIENT}).accepted_audiences == ()


def test_cloud_mode_guards_reads_too(cloud_api):
    assert cloud_api.request("GET", RUNS).status_code == 401


@pytest.fixture
def certificate_server(google_signer, monkeypatch):
    """Google's certificate endpoint, served here with its Cache-Control; yields the requests it got."""
    import json
    import threading

    from werkzeug.serving import make_server
    from werkzeug.wrappers import Response

    from mldiag.entrypoints.http import auth

    _, certificate = google_signer
    served: list[str] = []

    def certificates(environ, start_response):
        served.append(environ["PATH_INFO"])
        return Response(json.dumps({"test-key": certificate.decode()}), mimetype="application/json",
                        headers={"Cache-Control": "public, max-age=19800"})(environ, start_response)

    server = make_server("127.0.0.1", 0, certificates)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    monkeypatch.setattr(id_token, "_GOOGLE_OAUTH2_CERTS_URL", f"http://127.0.0.1:{server.server_port}/oauth2/v1/certs")
    auth._transport.cache_clear()
    yield served
    auth._transport.cache_clear()
    server.shutdown()


def test_googles_certificates_are_fetched_once_while_their_cache_control_allows(
        make_api, google_signer, certificate_server):
    signer, _ = google_signer
    api = make_api(auth_audience=AUDIENCE)
    for run in ("r1", "r2", "r3"):
        response = api.request("POST", f"{RUNS}?machine_learning_run_id={run}", json={},
                               headers=_bearer(_id_token(signer)))
        assert response.status_code == 200, response.json
    assert certificate_server == ["/oauth2/v1/certs"]


def test_where_agents_upload_is_operator_data_behind_the_token(make_api):
    api = make_api(api_token=TOKEN)
    assert api.request("GET", "/v1alpha/agentConfig").status_code == 401
    answer = api.request("GET", "/v1alpha/agentConfig", headers=_bearer(TOKEN))
    assert answer.status_code == 200 and answer.json["storage"]["backend"] == "embedded"
