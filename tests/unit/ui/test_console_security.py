"""Who may act in the console, and forged posts: the token's sign-in cookie, the form token, Sec-Fetch-Site."""

from __future__ import annotations

import pytest

from mldiag.entrypoints.console import security

from console_support import LOCATION, add_run, add_target

TOKEN = "console-test-token-0123456789"
CAPTURE = "/ui/runs/r1/capture"


@pytest.fixture
def locked(make_console):
    """A console in token mode, with a run that has a target to capture."""
    console = make_console(api_token=TOKEN)
    add_target(console.services, add_run(console.services, "r1"))
    return console


def _sessions(console) -> list:
    return console.services.sessions.list(str(LOCATION.run("r1")), page_size=100).items


def test_pages_are_readable_without_signing_in_as_api_reads_are(locked):
    page = locked.text("/ui/runs/r1")
    assert "Sign in</a> to capture profiles" in page
    assert 'action="/ui/runs/r1/capture"' not in page


def test_an_action_without_signing_in_is_refused_and_changes_nothing(locked):
    response = locked.post(CAPTURE, {"duration": "1s"})
    assert response.status_code == 401
    assert "Sign in</a> with the control plane" in response.get_data(as_text=True)
    assert _sessions(locked) == []


def test_a_wrong_token_does_not_sign_in(locked):
    response = locked.post("/ui/sign-in", {"token": "guess"})
    assert response.status_code == 403
    assert security.SIGN_IN_COOKIE not in response.headers.get("Set-Cookie", "")


def test_signing_in_sets_an_httponly_strict_cookie_that_is_not_the_token(locked):
    response = locked.post("/ui/sign-in", {"token": TOKEN, "next": "/ui/runs/r1"})

    assert response.status_code == 303 and response.headers["Location"] == "/ui/runs/r1"
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith(f"{security.SIGN_IN_COOKIE}=") and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
    assert 'action="/ui/runs/r1/capture"' in locked.text("/ui/runs/r1")
    assert locked.post(CAPTURE, {"duration": "1s"}, page="/ui/runs/r1").status_code == 303
    assert len(_sessions(locked)) == 1


def test_signing_out_ends_the_right_to_act(locked):
    locked.post("/ui/sign-in", {"token": TOKEN})
    locked.post("/ui/sign-out")
    assert locked.post(CAPTURE, {"duration": "1s"}).status_code == 401


@pytest.mark.parametrize("cookie", ["", "garbage", "99999999999.deadbeef", "1.{mac}"])
def test_forged_or_expired_sign_in_cookies_are_refused(locked, cookie):
    auth = security.ConsoleAuth(security.Guard(locked.services.settings))
    expired = cookie.replace("{mac}", auth._mac(1))
    locked.client.set_cookie(security.SIGN_IN_COOKIE, expired, path="/ui")
    assert locked.post(CAPTURE, {"duration": "1s"}).status_code == 401


def test_a_cookie_from_before_the_token_was_rotated_stops_working(make_console):
    before = security.ConsoleAuth(security.Guard(make_console(api_token=TOKEN).services.settings))
    after = security.ConsoleAuth(security.Guard(make_console(api_token=TOKEN + "-rotated").services.settings))
    cookie, _ = before.sign_in(TOKEN)
    assert before.may_act("", cookie) and not after.may_act("", cookie)


def test_the_bearer_token_works_instead_of_the_cookie(locked):
    assert locked.post(CAPTURE, {"duration": "1s"}, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 303
    assert locked.post(CAPTURE, {"duration": "1s"}, headers={"Authorization": "Bearer wrong"}).status_code == 403


def test_sign_in_only_returns_to_pages_of_the_console(locked):
    for target in ("https://evil.example/ui/", "//evil.example/ui/", "/v1alpha/x", "/ui\\..\\x"):
        response = locked.post("/ui/sign-in", {"token": TOKEN, "next": target})
        assert response.headers["Location"] == "/ui/", target


def test_open_mode_has_nothing_to_sign_in_to(console):
    response = console.post("/ui/sign-in", {"token": "anything"})
    assert response.status_code == 403 and "open mode" in response.get_data(as_text=True)


def test_cloud_mode_needs_an_id_token_even_to_read(make_console):
    console = make_console(auth_audience="https://control-plane.example")
    assert console.get("/ui/").status_code == 401


# --- forged posts -------------------------------------------------------------------


@pytest.fixture
def open_console(console):
    add_target(console.services, add_run(console.services, "r1"))
    return console


def test_a_post_without_the_form_token_is_refused(open_console):
    open_console.form_token()  # the cookie is there; the form field is not
    response = open_console.client.post(CAPTURE, data={"duration": "1s"})
    assert response.status_code == 403 and _sessions(open_console) == []


def test_a_post_with_a_token_the_browser_does_not_hold_is_refused(open_console):
    open_console.form_token()
    assert open_console.post(CAPTURE, {"duration": "1s"}, token="made-up-by-another-site").status_code == 403
    assert _sessions(open_console) == []


def test_a_post_without_the_token_cookie_is_refused(open_console):
    token = open_console.form_token()
    open_console.client.delete_cookie(security.CSRF_COOKIE, path="/ui")
    assert open_console.post(CAPTURE, {"duration": "1s"}, token=token).status_code == 403


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_a_post_a_browser_marks_as_from_another_site_is_refused(open_console, site):
    response = open_console.post(CAPTURE, {"duration": "1s"}, headers={"Sec-Fetch-Site": site})
    assert response.status_code == 403 and _sessions(open_console) == []


def test_a_post_from_the_console_itself_is_accepted(open_console):
    assert open_console.post(CAPTURE, {"duration": "1s"}, headers={"Sec-Fetch-Site": "same-origin"}).status_code == 303


def test_the_form_token_cookie_is_httponly_and_strict(console):
    cookie = console.get("/ui/").headers["Set-Cookie"]
    assert cookie.startswith(f"{security.CSRF_COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
    assert "Set-Cookie" not in console.get("/ui/").headers  # kept, not reissued on every page


@pytest.mark.slow
def test_a_burst_of_wrong_sign_ins_is_throttled_per_client_address(locked, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(locked.app.extensions["mldiag.entrypoints.console.sign_in_throttle"], "_now", lambda: clock[0])
    codes = [locked.post("/ui/sign-in", {"token": f"guess-{i}"}).status_code for i in range(300)]
    assert codes == [403] * security.MAX_FAILED_SIGN_INS + [429] * (300 - security.MAX_FAILED_SIGN_INS)

    refused = locked.post("/ui/sign-in", {"token": TOKEN})  # the right token is not even looked at
    assert refused.status_code == 429 and refused.headers["Retry-After"] == str(int(security.SIGN_IN_WINDOW_S))
    assert "too many wrong sign-ins" in refused.get_data(as_text=True)
    assert security.SIGN_IN_COOKIE not in refused.headers.get("Set-Cookie", "")

    elsewhere = locked.post("/ui/sign-in", {"token": TOKEN}, environ_base={"REMOTE_ADDR": "10.0.0.9"})
    assert elsewhere.status_code == 303

    clock[0] += security.SIGN_IN_WINDOW_S
    assert locked.post("/ui/sign-in", {"token": TOKEN}).status_code == 303
