"""``mldiag demo``'s refusals: it says what is wrong before starting anything."""

from __future__ import annotations

import importlib.util
import socket

from typer.testing import CliRunner

from mldiag.cli.main import app


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # free again once closed: nothing listens there


def test_an_unreachable_control_plane_is_named_and_no_workload_starts(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(app, ["demo", "--api-url", url, "--gcs-path", str(tmp_path / "bucket"),
                                      "--work-dir", str(tmp_path / "demo")])
    assert result.exit_code == 1
    assert f"cannot reach the control plane at {url}" in result.output
    assert "nothing was left running" in result.output
    assert not (tmp_path / "demo" / "workload.log").exists()



def test_a_missing_demo_extra_is_named_with_the_command_that_installs_it(tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "jax" else find_spec(name, *args))
    result = CliRunner().invoke(app, ["demo", "--work-dir", str(tmp_path / "demo")])
    assert result.exit_code == 1
    assert "the demo needs JAX: pip install -e '.[demo]'" in " ".join(result.output.split())
    assert not (tmp_path / "demo").exists()
