"""Asking for an analysis: the one way a session's files are sent to ``analyze_session``.

Registration asks once a session has settled, a capture once the files of its
targets are in, ``mldiag profiler-session analyze`` to run an analysis again,
and maintenance for an analysis that stopped without a result. Each asks with
:func:`request_analysis`, in the transaction that records why: the session's
analysis goes PENDING and the request
(:class:`~mldiag.domain.messages.AnalysisRequest`) is staged in the outbox
under a key of the session and its set of files, so that the same files are
requested once, however often they are asked for, and
:mod:`mldiag.services.analysis_jobs` serves it.
"""

from __future__ import annotations

from datetime import datetime

from mldiag.domain.messages import AnalysisRequest
from mldiag.domain.resources import AnalysisState, ProfilerSession
from mldiag.ports import Transaction
from mldiag.services import outbox
from mldiag.services.repository import document_key


def outbox_key(session_name: str, generation_set: str) -> str:
    """Where the request for these files of the session waits in the outbox until it is published."""
    return f"analysis:{document_key(session_name)}:{generation_set}"


def request_analysis(transaction: Transaction, session: ProfilerSession, now: datetime, *,
                     force: bool = False) -> str:
    """Stage one analysis request for the session's current files in ``transaction``, the analysis PENDING on
    ``session`` (which the caller saves); returns the request's outbox key.

    Nothing is staged when these exact files were already requested (unless ``force``).
    """
    generation_set = session.generation_set()
    session.settle_after = None
    if not generation_set or (generation_set == session.analysis.generation_set and not force):
        return ""
    session.keep_earlier_analysis()
    session.analysis.state = AnalysisState.PENDING
    session.analysis.generation_set = generation_set
    session.analysis.error = ""
    key = outbox_key(session.name, generation_set)
    request = AnalysisRequest(session=session.name, generation_set=generation_set,
                              host_files={host: file.uri for host, file in session.host_files.items()})
    outbox.stage(transaction, key, request.outgoing(), now)
    return key
