"""The API cannot be driven by another web page through a user's browser (CSRF on 127.0.0.1)."""

from __future__ import annotations

import socket

import pytest

from api_suite import RUNS, Api
from mldiag.entrypoints.http.app import create_app
from mldiag.entrypoints.http.origin import HostNames
from mldiag.domain.errors import InvalidArgument


def test_text_plain_body_is_refused_and_changes_nothing(api):
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=forged", data='{"displayName": "x"}',
                           headers={"Content-Type": "text/plain"})
    assert response.status_code == 415
    assert response.json["error"]["status"] == "INVALID_ARGUMENT"
    assert "application/json" in response.json["error"]["message"]
    assert api.run("forged").status_code == 404


def test_form_post_is_refused(api):
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=forged", data={"displayName": "x"})
    assert response.status_code == 415
    assert api.run("forged").status_code == 404


def test_cross_site_request_is_refused_even_without_a_body(api):
    api.create_run("r1")
    response = api.request("DELETE", f"{RUNS}/r1", headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
    assert api.run("r1").status_code == 200


def test_same_origin_json_and_reads_still_work(api):
    api.create_run("r1")
    assert api.request("GET", f"{RUNS}/r1", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200
    response = api.request("PATCH", f"{RUNS}/r1?update_mask=display_name", json={"displayName": "renamed"},
                           headers={"Sec-Fetch-Site": "same-origin"})
    assert response.status_code == 200


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          "text/plain"])
def test_an_empty_form_post_is_refused_and_changes_nothing(api, content_type):
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=forged", data=b"",
                           headers={"Content-Type": content_type})
    assert response.status_code == 415, response.json
    assert api.run("forged").status_code == 404


def test_a_post_from_another_origin_is_refused_even_as_json(api):
    response = api.request("POST", f"{RUNS}?machine_learning_run_id=forged", json={},
                           headers={"Origin": "http://evil.example"})
    assert response.status_code == 403 and "evil.example" in response.json["error"]["message"]
    assert api.run("forged").status_code == 404
    assert api.request("POST", f"{RUNS}?machine_learning_run_id=r1", json={},
                       headers={"Origin": "http://localhost"}).status_code == 200


def test_a_post_without_body_or_type_is_what_curl_sends_and_works(api):
    assert api.request("POST", "/v1alpha/events:prune").status_code == 200


@pytest.fixture
def local_api(services):
    """The app as ``mldiag up`` serves it, listening on 127.0.0.1:8080."""
    return Api(create_app(services, HostNames.serving("127.0.0.1", 8080)).test_client())


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"])
def test_a_local_server_answers_to_its_own_names(local_api, host):
    assert local_api.request("GET", RUNS, headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example:8080", "evil.example", "127.0.0.1:9090", "127.0.0.1", "10.0.0.1:8080",
                                  "127.0.0.1.evil.example:8080", "[::1]x:8080"])
@pytest.mark.parametrize(("method", "path"), [("GET", RUNS), ("POST", f"{RUNS}?machine_learning_run_id=r1"),
                                              ("GET", "/ui/runs"), ("GET", "/share/token")])
@pytest.mark.slow
def test_a_local_server_refuses_every_other_host_name(local_api, host, method, path):
    response = local_api.request(method, path, headers={"Host": host}, json={} if method == "POST" else None)
    assert response.status_code == 400, response.data
    message = response.json["error"]["message"]
    assert "answers to 127.0.0.1:8080, [::1]:8080, localhost:8080 only" in message and "\n" not in message
    assert local_api.request("GET", f"{RUNS}/r1", headers={"Host": "127.0.0.1:8080"}).status_code == 404


def test_a_server_on_every_interface_also_answers_to_the_machine_and_to_addresses():
    names = HostNames.serving("0.0.0.0", 8080)
    for host in ("192.168.1.5:8080", "[fd00::5]:8080", f"{socket.gethostname()}:8080", "localhost:8080"):
        names.check(host)
    with pytest.raises(InvalidArgument, match="Host 'evil.example:8080'"):
        names.check("evil.example:8080")
