"""The multi-host fan-out: a session's analysis spread over one ``analyze_host`` instance per host, then merged.

A session of ``fan_out_min_hosts`` host files or more is fanned out by
``analyze_session`` (:mod:`mldiag.services.analysis_jobs`): :func:`start`
writes the fan-out's counter document (:class:`~mldiag.domain.host_analyses.HostAnalyses`,
one per session and set of files) and stages one
:class:`~mldiag.domain.messages.HostAnalysisRequest` per host in the same unit
of work. ``analyze_host`` (:mod:`mldiag.services.host_analyses`) serves a
request only while :func:`pending_host` says its host still waits, and counts
the host's outcome with :func:`record_host`; the unit of work that counts the
last host also stages the merge request (an
:class:`~mldiag.domain.messages.AnalysisRequest` with ``merge``), so exactly
one merge is asked for and none is lost. ``analyze_session`` merges once
:func:`merge_ready` finds every host finished. Maintenance leaves a fan-out
alone while :func:`progressed_since` sees its hosts finishing, and deleting a
session's run deletes its counters (:func:`forget`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

import structlog

from mldiag.domain.host_analyses import HostAnalyses, HostProgress, HostState
from mldiag.domain.messages import AnalysisRequest, HostAnalysisRequest
from mldiag.domain.names import short_name
from mldiag.domain.resources import AnalysisState, ProfilerSession
from mldiag.ports import Document, DocumentStore, Where
from mldiag.services import unit_of_work
from mldiag.services.dependencies import Publishing, Stored
from mldiag.services.event_archive import Ignored
from mldiag.services.repository import document_key
from mldiag.services.unit_of_work import UnitOfWork


class FanOutPorts(Stored, Publishing, Protocol):
    """What counting a fan-out uses."""


log = structlog.get_logger(__name__)


def counter_key(session: str, generation_set: str) -> str:
    """The key of the counter document of the fan-out of these files."""
    return f"{document_key(session)}:{generation_set}"


def start(services: FanOutPorts, request: AnalysisRequest, fresh: bool) -> str:
    """Stage one host-analysis request per host with their counter document; returns what was done.

    A count under way is kept: a redelivery, or maintenance asking again for an analysis whose hosts take
    longer than one analysis's time limit, only publishes what the outbox still holds. A ``fresh`` request (the
    analysis was PENDING) for files whose count has ended, its merge asked for, starts a new count: the
    session is analysed again.
    """
    key = counter_key(request.session, request.generation_set)
    outbox_keys = {host: f"host-analysis:{key}:{host}" for host in sorted(request.host_files)}

    def work(unit: UnitOfWork) -> str:
        document = unit.transaction.get(HostAnalyses.collection, key)
        if document is not None:
            progress = HostAnalyses.model_validate(document)
            if not (fresh and progress.merge_requested):
                for outbox_key in outbox_keys.values():
                    unit.publish_left_behind(outbox_key)
                return f"{progress.finished} of {len(progress.hosts)} hosts finished"
        progress = HostAnalyses.of(request.session, request.generation_set, request.host_files)
        progress.progressed_at = services.now()
        unit.transaction.set(HostAnalyses.collection, key, progress.to_document())
        for host, progress_of_host in progress.hosts.items():
            host_request = HostAnalysisRequest(session=request.session, generation_set=request.generation_set,
                                               host=host, host_file=progress_of_host.file)
            unit.publish(outbox_keys[host], host_request.outgoing())
        return ""

    under_way = unit_of_work.run(services, work)
    hosts = len(outbox_keys)
    if under_way:
        return f"already fanned out to {hosts} hosts ({under_way})"
    log.info(f"analysis of {short_name(request.session)} fanned out to {hosts} hosts", notice=True)
    return f"fanned out to {hosts} hosts"


def pending_host(services: Stored, request: HostAnalysisRequest) -> None:
    """:class:`Ignored` unless this host of these files still waits for its analysis."""
    document = services.store.get(HostAnalyses.collection, counter_key(request.session, request.generation_set))
    if document is None:
        raise Ignored("no fan-out of these files is recorded")
    progress = HostAnalyses.model_validate(document)
    state = progress.hosts.get(request.host)
    if state is None:
        raise Ignored(f"host {request.host} is not one of this fan-out's")
    if state.state is not HostState.PENDING:
        raise Ignored(f"host {request.host} already {state.state.value}")
    session = services.sessions.find(request.session)
    if session is None:
        raise Ignored("the session no longer exists")
    if session.analysis.generation_set != request.generation_set:
        raise Ignored("stale request: the session's files changed since; a newer request analyses them")


def record_host(services: FanOutPorts, request: HostAnalysisRequest, outcome: HostProgress) -> str:
    """Count the host as finished with ``outcome``, once; the last host to finish asks for the merge."""
    key = counter_key(request.session, request.generation_set)

    def work(unit: UnitOfWork) -> str:
        document = unit.transaction.get(HostAnalyses.collection, key)
        if document is None:
            return "no fan-out of these files is recorded"
        progress = HostAnalyses.model_validate(document)
        if request.host not in progress.hosts:
            return f"host {request.host} is not one of this fan-out's"
        if not progress.record(request.host, outcome):
            return f"host {request.host} had finished already ({progress.hosts[request.host].state.value})"
        progress.progressed_at = services.now()
        merging = progress.take_merge()
        if merging:
            merge = AnalysisRequest(session=progress.session, generation_set=progress.generation_set,
                                    host_files={host: finished.file for host, finished in progress.hosts.items()},
                                    merge=True)
            unit.publish(f"analysis-merge:{key}", merge.outgoing())
        unit.transaction.set(HostAnalyses.collection, key, progress.to_document())
        return f"{progress.finished} of {len(progress.hosts)} hosts finished" + ("; merge requested" if merging else "")

    return unit_of_work.run(services, work)


def merge_ready(services: Stored, request: AnalysisRequest) -> HostAnalyses:
    """The counter document a merge request is for, once every host of it has finished."""
    document = services.store.get(HostAnalyses.collection, counter_key(request.session, request.generation_set))
    if document is None:
        raise Ignored("no fanned-out analysis is recorded for these files")
    progress = HostAnalyses.model_validate(document)
    if progress.finished < len(progress.hosts):
        raise Ignored(f"{progress.finished} of {len(progress.hosts)} hosts have finished: a newer fan-out of these "
                      "files is under way, and its last host asks for the merge")
    return progress


def progressed_since(get: Callable[[str, str], Document | None], session: ProfilerSession,
                     cutoff: datetime) -> bool:
    """Whether a fanned-out analysis still moves: a host of its count finished (or the count began) after
    ``cutoff``. A session of more hosts than instances takes rounds, each within the time limit."""
    if session.analysis.state is not AnalysisState.RUNNING or not session.analysis.generation_set:
        return False
    document = get(HostAnalyses.collection, counter_key(session.name, session.analysis.generation_set))
    if document is None:
        return False
    progressed = HostAnalyses.model_validate(document).progressed_at
    return progressed is not None and progressed > cutoff


def forget(store: DocumentStore, session: str) -> None:
    """Delete the counter documents of the session's fan-outs (the session is being deleted)."""
    for document in store.query(HostAnalyses.collection, where=[Where("session", "==", session)]):
        store.delete(HostAnalyses.collection, counter_key(session, document["generationSet"]))
