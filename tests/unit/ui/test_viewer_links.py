"""``/viewer/``: a session's dashboard link opens its local folder in the running XProf viewer."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from mldiag.entrypoints.console.viewer_links import VIEWER_URL

FOLDER_URI = "gs://mldiag-profiles/runs/r1/plugins/profile/s1"
VIEWER = "http://127.0.0.1:8791"


@pytest.fixture
def with_viewer(console):
    console.app.config[VIEWER_URL] = VIEWER
    console.services.blobs.write_bytes(f"{FOLDER_URI}/host.xplane.pb", b"x")
    return console


def test_without_a_viewer_the_page_says_how_to_start_one(console):
    response = console.get(f"/viewer/?session_path={quote(FOLDER_URI, safe='')}")
    assert response.status_code == 503
    page = response.get_data(as_text=True)
    assert "mldiag up --viewer" in page and "xprof server --logdir" in page


def test_a_session_folder_opens_in_the_viewer_by_its_local_path(with_viewer):
    response = with_viewer.get(f"/viewer/?session_path={quote(FOLDER_URI, safe='')}")
    assert response.status_code == 302
    local = with_viewer.services.blobs.path_for(FOLDER_URI)
    assert response.headers["Location"] == f"{VIEWER}/?session_path={quote(str(local), safe='')}"


@pytest.mark.parametrize(("session_path", "code"), [
    ("", 400),
    ("/etc", 400),
    ("https://evil.example/x", 400),
    ("gs://mldiag-profiles/../../../etc", 400),
    ("gs://mldiag-profiles/runs/r1/plugins/profile/missing", 404),
])
def test_anything_but_a_stored_session_folder_is_refused(with_viewer, session_path, code):
    response = with_viewer.get(f"/viewer/?session_path={quote(session_path, safe='')}")
    assert response.status_code == code
    assert "Location" not in response.headers
