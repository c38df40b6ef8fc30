"""The API cannot be driven by another web page through a user's browser (CSRF on 127.0.0.1)."""

from __future__ import annotations

from api_suite import RUNS


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
