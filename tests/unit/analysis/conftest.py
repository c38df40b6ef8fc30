"""Each test profile's analysis, run once per test session."""

from __future__ import annotations

import functools

import pytest
from analysis_support import xplane

from mldiag.analysis import Analysis, analyze_profile


@functools.cache
def _analysis(name: str) -> Analysis:
    return analyze_profile([xplane(name)])


@pytest.fixture(scope="session")
def analysis_of():
    """``analysis_of(name)``: the fixture's analysis, computed on first use."""
    return _analysis
