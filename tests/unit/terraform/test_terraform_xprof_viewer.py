"""The XProf viewer service starts on a new deployment's empty bucket, and only once it may read it.

A new bucket has nothing under ``profiles/`` and Cloud Storage has no empty folders, so to
XProf the log directory does not exist; a local folder that does not exist stands in for it.
"""

from __future__ import annotations

import pytest
import gzip
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from terraform_config import load_module
from terraform_support import REPO, Planted
from test_terraform_consistency import plain, resources

IMAGE = REPO / "terraform/modules/xprof-viewer/image"
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serves(command: list[str], port: int) -> tuple[bool, str]:
    """Whether ``command`` answers HTTP on ``port`` before it exits or the timeout passes; its output."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugin/profile/runs", timeout=5) as reply:
                    body = reply.read()
                    if reply.headers.get("Content-Encoding") == "gzip":
                        body = gzip.decompress(body)
                    return reply.status == 200 and json.loads(body) == [], ""
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        return False, process.communicate(timeout=30)[0] if process.poll() is not None else "timed out"
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


def viewer_problems(terraform: Path) -> list[str]:
    module = load_module(terraform / "modules/xprof-viewer")
    service = plain(resources(module, "google_cloud_run_v2_service")[0].body)
    grants = {b.labels[1]: plain(b.body) for b in resources(module, "google_storage_bucket_iam_member")}
    readers = [name for name, grant in grants.items() if grant.get("role") == "roles/storage.objectViewer"
               and grant.get("member") == "${google_service_account.viewer.member}"]
    if not readers:
        return ["the viewer module must grant its account roles/storage.objectViewer on the bucket"]
    if f"${{google_storage_bucket_iam_member.{readers[0]}}}" not in service.get("depends_on", []):
        return ["the viewer service must depend on its objectViewer grant"]
    return []


def test_the_viewer_image_starts_with_serve_py():
    dockerfile = (IMAGE / "Dockerfile").read_text(encoding="utf-8")
    assert "COPY serve.py /opt/xprof-viewer/serve.py" in dockerfile
    assert 'ENTRYPOINT ["python", "/opt/xprof-viewer/serve.py"]' in dockerfile


@pytest.mark.slow
def test_the_viewer_serves_a_log_directory_that_does_not_exist_yet(tmp_path: Path):
    port = free_port()
    started, output = serves([sys.executable, str(IMAGE / "serve.py"), f"--logdir={tmp_path / 'profiles'}",
                              f"--port={port}", f"--grpc_port={free_port()}", "--hide_capture_profile_button"], port)
    assert started, output


@pytest.mark.slow
def test_stock_xprof_refuses_the_same_directory(tmp_path: Path):
    port = free_port()
    started, output = serves([sys.executable, "-m", "xprof.server", f"--logdir={tmp_path / 'profiles'}",
                              f"--port={port}", f"--grpc_port={free_port()}"], port)
    assert not started and "does not exist" in output


def test_the_viewer_service_waits_for_its_read_grant():
    assert viewer_problems(REPO / "terraform") == []


def test_planted_viewer_without_its_grant_dependency_is_reported(planted: Planted):
    planted.replace("modules/xprof-viewer/main.tf", "  depends_on = [google_storage_bucket_iam_member.viewer]\n", "")
    assert viewer_problems(planted.terraform) == ["the viewer service must depend on its objectViewer grant"]
