"""Profile analysis, part 1: the evidence and the deterministic analyst.

``analyze_profile(paths)`` runs the 15 XProf tools of the managed product on a
private copy of one session's ``<host>.xplane.pb`` files, computes its own
signals from the raw trace events, and returns an :class:`Analysis`: metrics,
a health snapshot, prioritised findings and all the evidence behind them.
``start_analysis(paths)`` does the same in two steps, for a caller with its own
work to do while XProf converts the profile.

Names are loaded on first use, so that importing one module of the package
(the raw-event reader runs alone in a child process) does not load the rest;
heavy dependencies (xprof, the trace reader) load only when an analysis runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "analyze_profile": "mldiag.analysis.engine",
    "start_analysis": "mldiag.analysis.engine",
    "Analysis": "mldiag.analysis.evidence",
    "ToolResult": "mldiag.analysis.evidence",
    "ToolStatus": "mldiag.analysis.evidence",
    "Session": "mldiag.analysis.profiles",
    "UnreadableProfile": "mldiag.analysis.profiles",
    "find_session": "mldiag.analysis.profiles",
    "MANAGED_TOOLS": "mldiag.analysis.xprof_tools",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
