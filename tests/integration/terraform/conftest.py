"""Terraform checks that run at length (a provider schema loaded again by the checker's own entry point):
the fixtures and helpers of ``tests/unit/terraform/terraform_support.py`` serve them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "terraform"))

from terraform_support import planted  # noqa: E402, F401 (a fixture)


@pytest.fixture(autouse=True)
def isolated_environment(isolated_environment: None) -> None:
    """Every test here runs with the environment of ``tests/conftest.py``'s ``isolated_environment``."""
