"""The ``analyze_host`` function: one host file of a fanned-out session, analysed on an instance of its own.

A request (:class:`~mldiag.domain.messages.HostAnalysisRequest`, staged by
``analyze_session`` when it fans a session out) is served once per host:

* the host file is downloaded into scratch space and analysed alone by the
  analysis runner (:meth:`~mldiag.ports.AnalysisRunner.analyse_host`) under
  ``analysis_timeout_seconds``; its evidence is written to
  ``<session folder>/mldiag/<generation set>/hosts/<host>.json``;
* the host is recorded DONE in the fan-out's counter document, in the
  transaction that counts it; the transaction that counts the last host also
  stages the merge request (an :class:`~mldiag.domain.messages.AnalysisRequest` with ``merge``) in the
  outbox, so exactly one merge is asked for and none is lost;
* a redelivered request for a host that already finished is acknowledged and
  changes nothing; so is one for files the session no longer holds.

A host that cannot be analysed (unreadable file, timeout, out of memory), or
that fails on its last delivery attempt or reaches its dead letter
(:func:`give_up`), is recorded FAILED with the reason and counted all the same:
the merge goes ahead without it and the report names it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Protocol

import structlog

from mldiag.analysis.fanout import HOST_EVIDENCE_FILE, HOST_EVIDENCE_FOLDER
from mldiag.domain.errors import AnalysisFailed, PermanentFailure
from mldiag.domain.host_analyses import HostAnalyses, HostProgress, HostState
from mldiag.domain.layout import XPLANE_SUFFIX, report_folder
from mldiag.domain.messages import AnalysisRequest, HostAnalysisRequest
from mldiag.domain.names import short_name
from mldiag.services import unit_of_work
from mldiag.services.analysis_jobs import MAX_REASON_CHARS, SCRATCH_PREFIX, analysis_job, download_profile, scratch_root
from mldiag.services.dependencies import Analysing, Blobs, Configured, Publishing, Stored
from mldiag.services.event_archive import Ignored
from mldiag.services.fan_out_counts import host_analyses_key
from mldiag.services.unit_of_work import UnitOfWork


class HostAnalysisPorts(Stored, Publishing, Blobs, Configured, Protocol):
    """What recording one host's analysis uses."""


class RunningHostAnalysisPorts(HostAnalysisPorts, Analysing, Protocol):
    """What analysing one host uses: the analysis runner too."""


log = structlog.get_logger(__name__)


def _count_key(request: HostAnalysisRequest) -> str:
    return host_analyses_key(request.session, request.generation_set)


def record_host(services: HostAnalysisPorts, request: HostAnalysisRequest, outcome: HostProgress) -> str:
    """Count the host as finished with ``outcome``, once; the last host to finish asks for the merge."""
    key = _count_key(request)

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


def _pending(services: HostAnalysisPorts, request: HostAnalysisRequest) -> None:
    """Ignored unless this host of these files still waits for its analysis."""
    document = services.store.get(HostAnalyses.collection, _count_key(request))
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


def _analyse(services: RunningHostAnalysisPorts, request: HostAnalysisRequest, scratch: Path) -> HostProgress:
    """Download, analyse alone, upload the evidence; returns the host's outcome."""
    profile = download_profile(services, request.host_file, scratch / "profile" / f"{request.host}{XPLANE_SUFFIX}")
    out = scratch / "evidence"
    part = services.analysis_runner.analyse_host(analysis_job(services.settings, [profile], scratch, out))
    evidence = out / HOST_EVIDENCE_FILE
    uri = f"{report_folder(request.folder_uri, request.generation_set)}/{HOST_EVIDENCE_FOLDER}/{request.host}.json"
    services.blobs.upload(evidence, uri, "application/json")
    return HostProgress(file=request.host_file, state=HostState.DONE, evidence_uri=uri, status=part.status.value,
                        step_time_ms=part.step_time_ms)


def analyze_host_requested(services: RunningHostAnalysisPorts, request: HostAnalysisRequest, attempt: int) -> str:
    """The ``analyze_host`` handler body: one host's request (its ``attempt``-th delivery) in, a one-line account
    out."""
    last_attempt = attempt >= services.settings.max_delivery_attempts
    with structlog.contextvars.bound_contextvars(session=request.session, host=request.host):
        _pending(services, request)
        try:
            with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=scratch_root(services.settings)) as scratch:
                outcome = _analyse(services, request, Path(scratch))
        except Exception as error:  # noqa: BLE001 - recorded on the fan-out, then acknowledged or retried
            permanent = isinstance(error, AnalysisFailed) and error.permanent
            reason = str(error) if isinstance(error, AnalysisFailed) else f"{type(error).__name__}: {error}"
            if permanent or last_attempt:
                failed = HostProgress(file=request.host_file, state=HostState.FAILED,
                                      reason=reason[:MAX_REASON_CHARS])
                counted = record_host(services, request, failed)
                log.warning(f"host {request.host} of {short_name(request.session)} failed: {reason}",
                            recorded=counted)
                raise PermanentFailure(f"host {request.host} failed: {reason} ({counted})") from error
            raise
        counted = record_host(services, request, outcome)
        log.info(f"host {request.host} of {short_name(request.session)} analysed: {outcome.status}", recorded=counted)
        return f"host {request.host} {outcome.status}: {outcome.evidence_uri} ({counted})"


def give_up(services: HostAnalysisPorts, payload: bytes, reason: str) -> str:
    """A host request that exhausted its delivery attempts: the host is FAILED with ``reason``, and counted."""
    request = HostAnalysisRequest.decode(payload)
    failed = HostProgress(file=request.host_file, state=HostState.FAILED,
                          reason=f"gave up after every delivery attempt: {reason}"[:MAX_REASON_CHARS])
    return f"host {request.host} of {short_name(request.session)}: {record_host(services, request, failed)}"
