"""The XProf viewer child of ``mldiag up --viewer``: real xprof on a real profile, on 127.0.0.1 only.

XProf caches its conversions next to a session, so the viewer serves a copy of the fixture.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from mldiag.local.xprof_viewer import ViewerFailed, XprofViewer

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "profiles" / "compute_bound"
SESSION = Path("compute_bound") / "plugins" / "profile" / "compute_bound"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("logdir")
    shutil.copytree(FIXTURE, copy / "compute_bound")
    return copy


@pytest.fixture(scope="module")
def viewer(logdir: Path, tmp_path_factory: pytest.TempPathFactory):
    started = XprofViewer(logdir, 0, tmp_path_factory.mktemp("viewer") / "viewer.log")
    started.start()
    yield started
    started.stop()


def _outside_address() -> str | None:
    """An address of this machine other than loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET: nothing is sent, the kernel only picks a source address
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_the_viewer_opens_a_session_folder_by_its_path(viewer, logdir):
    session = str(logdir / SESSION)
    runs = requests.get(f"{viewer.url}/data/plugin/profile/runs", params={"session_path": session}, timeout=30)
    assert runs.json() == ["compute_bound"]
    tools = requests.get(f"{viewer.url}/data/plugin/profile/run_tools",
                         params={"session_path": session, "run": "compute_bound"}, timeout=30)
    assert "overview_page" in tools.json()


def test_the_viewer_listens_on_loopback_only(viewer):
    host, port = urlsplit(viewer.url).hostname, urlsplit(viewer.url).port
    assert host == "127.0.0.1"
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no address but loopback")
    with pytest.raises(OSError), socket.create_connection((outside, port), timeout=2):
        pass


def test_stopping_the_viewer_frees_its_port(tmp_path):
    viewer = XprofViewer(tmp_path, 0, tmp_path / "viewer.log")
    url = viewer.start()
    viewer.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=5)


def test_a_port_in_use_fails_with_the_viewers_own_words(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        with pytest.raises(ViewerFailed, match="did not start") as failure:
            XprofViewer(tmp_path, taken.getsockname()[1], tmp_path / "viewer.log").start()
    assert "Address already in use" in str(failure.value)
