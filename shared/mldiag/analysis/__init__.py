"""Profile analysis: a session's profile in, evidence, findings and a report out.

``analyze_profile(paths)`` runs the 15 XProf tools of the managed product on a
private copy of one session's ``<host>.xplane.pb`` files, computes its own
signals from the raw trace events, and returns an :class:`Analysis`: metrics,
a health snapshot, prioritised findings and all the evidence behind them.
``start_analysis(paths)`` does the same in two steps, for a caller with its own
work to do while XProf converts the profile.

The subpackages are layers, each importing only those below it (an import
contract in ``pyproject.toml``):

- ``reasoning/``: the investigation, its prompts, follow-up tools and validation;
- ``rules/``: the deterministic analyst's findings, the hardware model, dtypes;
- ``loop/``: the training loop measured from raw events, its time attributed;
- ``xprof/``: XProf's tools, their merged OpStats and HLO, the memory budget;
- ``profile/``: reading the ``XSpace`` files of a session;
- ``evidence`` and ``host_evidence``: the typed data every layer shares.

``engine`` runs one analysis, ``fanout`` one per host and their merge,
``report`` writes ``summary.html``, ``comparison`` and ``regression`` judge
two analyses against each other.

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
    "Session": "mldiag.analysis.profile.profiles",
    "UnreadableProfile": "mldiag.analysis.profile.profiles",
    "find_session": "mldiag.analysis.profile.profiles",
    "MANAGED_TOOLS": "mldiag.analysis.xprof.xprof_tools",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
