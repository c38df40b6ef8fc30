"""``mldiag up`` run as its own process (crash recovery, OTLP, maintenance ticks): on the embedded backend
only, as the unit tests of ``tests/unit/cli`` are; slow enough that they run with the integration tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_environment(isolated_environment: None) -> None:
    """Every test here runs with the environment of ``tests/conftest.py``'s ``isolated_environment``."""
