"""Analysing a session again: ``POST .../profilerSessions/S:analyze`` and ``mldiag profiler-session analyze``.

The request goes out exactly as registration sends one
(:func:`mldiag.services.analysis_requests.request_analysis`, in the unit of work
that sets the analysis PENDING), forced, so that a DONE or FAILED analysis of the
same files runs once more.
"""

from __future__ import annotations

from typing import Protocol

from mldiag.domain.errors import FailedPrecondition
from mldiag.domain.names import ChildName
from mldiag.domain.resources import ProfilerSession
from mldiag.services import analysis_requests, unit_of_work
from mldiag.services.dependencies import Publishing, Stored
from mldiag.services.unit_of_work import UnitOfWork


class ReanalysisPorts(Stored, Publishing, Protocol):
    """What asking for a new analysis uses."""


def reanalyze(services: ReanalysisPorts, name: ChildName) -> ProfilerSession:
    """Request a new analysis of the session's current files; returns the session, analysis PENDING."""
    def work(unit: UnitOfWork) -> ProfilerSession:
        def request(session: ProfilerSession) -> bool:
            if not session.host_files:
                raise FailedPrecondition(f"{name} has no profile files to analyse yet")
            return analysis_requests.request_analysis(unit, session, force=True)

        return unit.sessions.mutate(str(name), request)[0]

    return unit_of_work.run(services, work)
