"""Which earlier session of the same run an analysis is compared with (:mod:`mldiag.analysis.comparison`).

Among the run's sessions before this one that were not auto-captured and whose
analysis finished: the latest OPTIMAL one, else the latest of any health.
"""

from __future__ import annotations

from mldiag.domain.names import parent_of
from mldiag.domain.resources import AnalysisState, HealthStatus, ProfilerSession
from mldiag.ports import OrderBy, Where
from mldiag.services.dependencies import Stored


def find_baseline(services: Stored, session: ProfilerSession) -> ProfilerSession | None:
    """The run's latest earlier OPTIMAL session that was not auto-captured and whose analysis finished;
    failing that, the latest such session of any health."""
    candidates = services.sessions.list(
        parent_of(session.name),
        where=[Where("analysis.state", "==", AnalysisState.DONE.value), Where("autoCaptured", "==", False)],
        order_by=[OrderBy("createTime", descending=True)],
        page_size=20,
    ).items

    def usable(candidate: ProfilerSession) -> bool:
        later = session.create_time and candidate.create_time and candidate.create_time >= session.create_time
        return candidate.name != session.name and bool(candidate.analysis.analysis_uri) and not later

    usable_ones = [candidate for candidate in candidates if usable(candidate)]
    optimal = (candidate for candidate in usable_ones if candidate.analysis.health is HealthStatus.OPTIMAL)
    return next(optimal, usable_ones[0] if usable_ones else None)
