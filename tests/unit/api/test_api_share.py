"""Share links: signed, expiring, scoped to one report; tampered or expired links are refused."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest
import structlog.testing
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from api_suite import API_URL, RUNS
from mldiag.domain import AnalysisState, AnalysisStatus, ProfilerSession
from mldiag.domain.share_links import LinkSigner, load_key
from mldiag.entrypoints.console.security import REPORT_POLICY

REPORT = b"<html><body>NEEDS_ATTENTION: input bound</body></html>"
SESSION = f"{RUNS}/r1/profilerSessions/s1"


@pytest.fixture
def analysed(api, services) -> str:
    """A session whose report is in the bucket; returns the report's URI."""
    run = api.create_run("r1", artifacts={"gcsPath": "gs://profiles"})
    report_uri = "gs://profiles/r1/plugins/profile/s1/summary.html"
    services.blobs.write_bytes(report_uri, REPORT)
    services.sessions.create(ProfilerSession(
        name=f"{run['name']}/profilerSessions/s1",
        analysis=AnalysisStatus(state=AnalysisState.DONE, report_uri=report_uri),
    ))
    return report_uri


def _share(api, ttl: str = "1h"):
    return api.request("POST", f"{SESSION}:share", json={"ttl": ttl})


def _path(url: str) -> str:
    return urlsplit(url).path


def test_a_share_link_opens_the_report_until_it_expires(api, analysed):
    response = _share(api)
    assert response.status_code == 200, response.json
    link = response.json
    assert link["url"].startswith(f"{API_URL}/share/") and link["reportUri"] == analysed
    expires = datetime.fromisoformat(link["expireTime"].replace("Z", "+00:00"))
    assert timedelta(minutes=59) < expires - datetime.now(timezone.utc) <= timedelta(hours=1)

    opened = api.request("GET", _path(link["url"]))
    assert opened.status_code == 200 and opened.data == REPORT
    assert opened.mimetype == "text/html"
    assert opened.headers["Cache-Control"] == "private, no-store"
    assert opened.headers["Referrer-Policy"] == "no-referrer"
    assert opened.headers["Content-Security-Policy"] == REPORT_POLICY  # the console's report view's sandbox


def test_the_log_holds_a_share_tokens_first_characters_only(api, analysed):
    token = _path(_share(api).json["url"]).removeprefix("/share/")
    with structlog.testing.capture_logs() as logged:
        assert api.request("GET", f"/share/{token}").status_code == 200
        assert api.request("GET", f"/share/{token}x").status_code == 403
    assert token[:-4] not in repr(logged)
    assert [line["path"] for line in logged if line["event"] == "request"] == [f"/share/{token[:12]}..."] * 2


def test_a_share_link_needs_no_credentials_but_issuing_one_does(make_api, analysed):
    guarded = make_api(api_token="tok-tok-tok")
    assert _share(guarded).status_code == 401
    issued = _share(guarded.__class__(guarded.client, {"Authorization": "Bearer tok-tok-tok"}))
    assert guarded.request("GET", _path(issued.json["url"])).data == REPORT


@pytest.mark.parametrize("tamper", ["payload", "signature", "no-signature", "garbage"])
def test_a_tampered_link_is_refused(api, analysed, tamper):
    token = _path(_share(api).json["url"]).rsplit("/", 1)[1]
    payload, signature = token.split(".")
    flip = {"A": "B"}.get(payload[5], "A")
    forged = {
        "payload": f"{payload[:5]}{flip}{payload[6:]}.{signature}",
        "signature": f"{payload}.{signature[:-2]}AA",
        "no-signature": payload,
        "garbage": "not-a-token",
    }[tamper]
    response = api.request("GET", f"/share/{forged}")
    assert response.status_code == 403 and response.json["error"]["status"] == "PERMISSION_DENIED"
    assert REPORT not in response.data


def test_a_link_for_another_object_signed_with_another_key_is_refused(api, analysed):
    other = LinkSigner(b"k" * 32).token(analysed, datetime.now(timezone.utc) + timedelta(hours=1))
    assert api.request("GET", f"/share/{other}").status_code == 403


def test_an_expired_link_is_gone(api, services, analysed):
    signer = LinkSigner(load_key(services.settings.data_dir, services.settings.share_key))
    expired = signer.token(analysed, datetime.now(timezone.utc) - timedelta(seconds=1))
    response = api.request("GET", f"/share/{expired}")
    assert response.status_code == 410 and "expired" in response.json["error"]["message"]


@pytest.mark.slow
def test_the_share_key_can_be_configured(make_api, services, analysed):
    api = make_api(share_key="configured-share-key-0123456789")
    token = _path(_share(api).json["url"]).rsplit("/", 1)[1]
    assert LinkSigner(b"configured-share-key-0123456789").verify(token) == analysed


@pytest.mark.parametrize(("ttl", "code"), [
    ("30s", 400), ("169h", 400), ("8d", 400), ("soon", 400), ("168h", 200), ("7d", 200), ("1m", 200), ("1d12h", 200),
])
def test_ttl_is_bounded(api, analysed, ttl, code):
    assert _share(api, ttl).status_code == code


@pytest.mark.parametrize(("ttl", "message"), [
    ("8d", "must be at most 7d"),
    ("30s", "must be at least 1m"),
    ("99999999999999999s", "too long a duration: '99999999999999999s' (at most 3652500d)"),
    (1e308, "too long a duration: 1e+308 (at most 3652500d)"),
])
def test_a_refused_ttl_says_why_in_the_duration_syntax(api, analysed, ttl, message):
    error = _share(api, ttl).json["error"]
    assert error["status"] == "INVALID_ARGUMENT" and error["message"] == f"ttl: {message}"


def test_a_session_without_a_report_cannot_be_shared(api):
    api.create_run("r1")
    api.request("POST", f"{RUNS}/r1/profilerSessions?profiler_session_id=s1", json={})
    response = _share(api)
    assert response.status_code == 412 and "no report yet" in response.json["error"]["message"]


def test_the_share_route_is_off_outside_the_embedded_default(make_api):
    assert make_api(backend="gcp").request("GET", "/share/anything").status_code == 404


def test_cloud_storage_links_are_v4_urls_signed_by_the_service_account(tmp_path, monkeypatch):
    """GcsBlobs signs locally with a service-account key; the signature verifies against it."""
    from mldiag.adapters.blobs.gcs import GcsBlobs

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    account = "signer@test-project.iam.gserviceaccount.com"
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps({
        "type": "service_account", "project_id": "test-project", "private_key_id": "k1",
        "private_key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()).decode(),
        "client_email": account, "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token",
    }))
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))

    url = GcsBlobs("test-project").signed_url("gs://profiles/r1/summary.html", timedelta(hours=2))

    parts = urlsplit(url)
    assert parts.netloc == "storage.googleapis.com" and parts.path == "/profiles/r1/summary.html"
    query = dict(parse_qsl(parts.query))
    assert query["X-Goog-Expires"] == "7200" and query["X-Goog-Credential"].startswith(account + "/")
    signed_query = "&".join(p for p in parts.query.split("&") if not p.startswith("X-Goog-Signature="))
    canonical = "\n".join(["GET", parts.path, signed_query, f"host:{parts.netloc}", "", "host", "UNSIGNED-PAYLOAD"])
    scope = unquote(query["X-Goog-Credential"]).split("/", 1)[1]
    string_to_sign = "\n".join(["GOOG4-RSA-SHA256", query["X-Goog-Date"], scope,
                                hashlib.sha256(canonical.encode()).hexdigest()])
    key.public_key().verify(bytes.fromhex(query["X-Goog-Signature"]), string_to_sign.encode(),
                            padding.PKCS1v15(), hashes.SHA256())
