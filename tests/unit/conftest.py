"""Unit tests run on the embedded backend only: no deployment settings leak in from the shell or CI."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_environment(isolated_environment: None) -> None:
    """Every unit test runs with the environment of ``tests/conftest.py``'s ``isolated_environment``."""


@pytest.fixture(scope="session")
def demo_analyses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """``analysis.json`` of the demo's healthy and degraded sessions, analysed as the worker would."""
    from pathlib import Path

    from typer.testing import CliRunner

    from mldiag.cli.main import app

    profiles = Path(__file__).parents[1] / "fixtures" / "profiles"
    written = {}
    for name in ("demo_healthy", "demo_degraded"):
        out = tmp_path_factory.mktemp(name)
        result = CliRunner().invoke(app, ["analyze", str(profiles / name), "--out", str(out)])
        assert result.exit_code == 0, result.output
        written[name] = (out / "analysis.json").read_bytes()
    return written
