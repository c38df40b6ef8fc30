"""Where the counter document of a fanned-out analysis is kept, and its removal with the session.

Light on purpose: the API deletes a run's counters without loading the analysis jobs.
"""

from __future__ import annotations

from mldiag.domain.host_analyses import HostAnalyses
from mldiag.ports import DocumentStore, Where
from mldiag.services.repository import document_key


def host_analyses_key(session: str, generation_set: str) -> str:
    """The key of the counter document of a fanned-out analysis of these files."""
    return f"{document_key(session)}:{generation_set}"


def forget_fan_outs(store: DocumentStore, session: str) -> None:
    """Delete the counter documents of the session's fanned-out analyses (the session is being deleted)."""
    for document in store.query(HostAnalyses.collection, where=[Where("session", "==", session)]):
        store.delete(HostAnalyses.collection, host_analyses_key(session, document["generationSet"]))
