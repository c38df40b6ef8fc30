"""Analysing a session again: ``POST .../profilerSessions/S:analyze`` and ``mldiag profiler-session analyze``.

The request goes out exactly as registration sends one (``Registrar.request_analysis``,
staged in the outbox in the same transaction that sets the analysis PENDING),
forced, so that a DONE or FAILED analysis of the same files runs once more.
"""

from __future__ import annotations

from typing import Protocol

from mldiag.domain.errors import FailedPrecondition
from mldiag.domain.names import ChildName
from mldiag.domain.resources import ProfilerSession
from mldiag.ports import Transaction
from mldiag.services import outbox
from mldiag.services.dependencies import Configured, Publishing, Stored
from mldiag.services.registration import Registrar


class ReanalysisPorts(Stored, Publishing, Configured, Protocol):
    """What asking for a new analysis uses."""


def reanalyze(services: ReanalysisPorts, name: ChildName) -> ProfilerSession:
    """Request a new analysis of the session's current files; returns the session, analysis PENDING."""
    def work(transaction: Transaction) -> tuple[ProfilerSession, str]:
        def request(session: ProfilerSession) -> str:
            if not session.host_files:
                raise FailedPrecondition(f"{name} has no profile files to analyse yet")
            return Registrar(services).request_analysis(transaction, session, force=True)

        return services.sessions.mutate_in(transaction, str(name), request)

    session, key = services.store.transaction(work)
    outbox.flush(services.store, services.bus, key)
    return session
