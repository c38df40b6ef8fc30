"""Asking for an analysis: the one way a session's files are sent to ``analyze_session``.

Registration asks once a session has settled, a capture once the files of its
targets are in, ``mldiag profiler-session analyze`` to run an analysis again,
and maintenance for an analysis that stopped without a result. Each asks with
:func:`request_analysis`, in the unit of work that records why: the session's
analysis goes PENDING and the request
(:class:`~mldiag.domain.messages.AnalysisRequest`) is sent once that commits,
under an outbox key of the session and its set of files, so that the same files
are requested once however often they are asked for;
:mod:`mldiag.services.analysis_jobs` serves it.
"""

from __future__ import annotations

from mldiag.domain.messages import AnalysisRequest
from mldiag.domain.resources import AnalysisState, ProfilerSession
from mldiag.services.repository import document_key
from mldiag.services.unit_of_work import UnitOfWork


def outbox_key(session_name: str, generation_set: str) -> str:
    """Where the request for these files of the session waits in the outbox until it is published."""
    return f"analysis:{document_key(session_name)}:{generation_set}"


def request_analysis(unit: UnitOfWork, session: ProfilerSession, *, force: bool = False) -> bool:
    """Ask, in ``unit``, for one analysis of the session's current files, the analysis PENDING on ``session``
    (which the caller saves); returns whether it asked.

    It does not when these exact files were already asked for (unless ``force``).
    """
    generation_set = session.generation_set()
    session.settle_after = None
    if not generation_set or (generation_set == session.analysis.generation_set and not force):
        return False
    session.keep_earlier_analysis()
    session.analysis.state = AnalysisState.PENDING
    session.analysis.generation_set = generation_set
    session.analysis.error = ""
    request = AnalysisRequest(session=session.name, generation_set=generation_set,
                              host_files={host: file.uri for host, file in session.host_files.items()})
    unit.publish(outbox_key(session.name, generation_set), request.outgoing())
    return True
