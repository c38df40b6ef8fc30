"""Analysis tests that trace with JAX or convert with XProf itself, on the embedded backend only: the
helpers of ``tests/unit/analysis/analysis_support.py`` serve them as they serve the unit tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "analysis"))


@pytest.fixture(autouse=True)
def isolated_environment(isolated_environment: None) -> None:
    """Every test here runs with the environment of ``tests/conftest.py``'s ``isolated_environment``."""
