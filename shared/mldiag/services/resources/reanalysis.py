"""Analysing a session again: ``POST .../profilerSessions/S:analyze`` and ``mldiag profiler-session analyze``.

The request goes out exactly as registration sends one
(:func:`mldiag.services.analysis_requests.request_analysis`), forced, so that a
DONE or FAILED analysis of the same files runs once more.
"""

from __future__ import annotations

from typing import Protocol

from mldiag.domain.errors import FailedPrecondition
from mldiag.domain.names import ChildName
from mldiag.domain.resources import ProfilerSession
from mldiag.ports import Transaction
from mldiag.services import analysis_requests, outbox
from mldiag.services.dependencies import Publishing, Stored


class ReanalysisPorts(Stored, Publishing, Protocol):
    """What asking for a new analysis uses."""


def reanalyze(services: ReanalysisPorts, name: ChildName) -> ProfilerSession:
    """Request a new analysis of the session's current files; returns the session, analysis PENDING."""
    def work(transaction: Transaction) -> tuple[ProfilerSession, str]:
        def request(session: ProfilerSession) -> str:
            if not session.host_files:
                raise FailedPrecondition(f"{name} has no profile files to analyse yet")
            return analysis_requests.request_analysis(transaction, session, services.now(), force=True)

        return services.sessions.mutate_in(transaction, str(name), request)

    session, key = services.store.transaction(work)
    outbox.flush(services.store, services.bus, key)
    return session
