"""Profile analysis, part 1: the evidence and the deterministic analyst.

``analyze_session(paths)`` runs the 15 XProf tools of the managed product on a
private copy of one session's ``<host>.xplane.pb`` files, computes its own
signals from the raw trace events, and returns an :class:`Analysis`: metrics,
a health snapshot, prioritised findings and all the evidence behind them.
Heavy dependencies (xprof, the trace reader) load only when an analysis runs.
"""

from mldiag.analysis.engine import analyze_session
from mldiag.analysis.evidence import Analysis, ToolResult, ToolStatus
from mldiag.analysis.profiles import Session, UnreadableProfile, download_session, find_session
from mldiag.analysis.xprof_tools import MANAGED_TOOLS

__all__ = [
    "MANAGED_TOOLS", "Analysis", "Session", "ToolResult", "ToolStatus", "UnreadableProfile",
    "analyze_session", "download_session", "find_session",
]
