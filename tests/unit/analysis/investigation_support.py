"""Investigations of the committed test profiles, run once per test session.

:func:`investigated` is a fixture's analysis with the offline investigation, as
``mldiag analyze`` writes it. :func:`on_live_profile` runs the analysis once
and, while its private copy and XProf's conversions are still there, hands a
fresh copy of the analysis and that context to each of several investigations,
so that many reasoner scenarios cost one analysis.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from analysis_support import xplane

from mldiag.analysis import Analysis, analyze_profile
from mldiag.analysis.xprof.xprof_tools import ToolContext
from mldiag.bootstrap import build_investigator
from mldiag.config import Settings


@functools.cache
def investigated(name: str) -> Analysis:
    return analyze_profile([xplane(name)], investigate=build_investigator(Settings()))


def on_live_profile(name: str, **runs: Callable[[Analysis, ToolContext], Any]) -> dict[str, Any]:
    """``{key: run(analysis, context)}`` for each of ``runs``, on one analysis of the fixture ``name``."""
    results: dict[str, Any] = {}

    def each(analysis: Analysis, context: ToolContext) -> Analysis:
        for key, run in runs.items():
            results[key] = run(analysis.model_copy(deep=True), context)
        return analysis

    analyze_profile([xplane(name)], investigate=each)
    return results
