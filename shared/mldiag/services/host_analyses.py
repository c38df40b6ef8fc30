"""The ``analyze_host`` function: one host file of a fanned-out session, analysed on an instance of its own.

A request (:class:`~mldiag.domain.messages.HostAnalysisRequest`, staged when
:mod:`mldiag.services.fan_out` starts a fan-out) is served once per host:

* the host file is downloaded into scratch space and analysed alone by the
  analysis runner (:meth:`~mldiag.ports.AnalysisRunner.analyse_host`) under
  ``analysis_timeout_seconds``; its evidence is written to
  ``<session folder>/mldiag/<generation set>/hosts/<host>.json``;
* the host is recorded DONE in the fan-out's count (:func:`mldiag.services.fan_out.record_host`),
  the last host asking for the merge;
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
from mldiag.domain.host_analyses import HostProgress, HostState
from mldiag.domain.layout import XPLANE_SUFFIX, report_folder
from mldiag.domain.messages import HostAnalysisRequest
from mldiag.domain.names import short_name
from mldiag.services import fan_out
from mldiag.services.analysis_jobs import MAX_REASON_CHARS, SCRATCH_PREFIX, analysis_job, download_profile, scratch_root
from mldiag.services.dependencies import Analysing, Blobs, Configured, Publishing, Stored


class HostAnalysisPorts(Stored, Publishing, Blobs, Configured, Protocol):
    """What recording one host's analysis uses."""


class RunningHostAnalysisPorts(HostAnalysisPorts, Analysing, Protocol):
    """What analysing one host uses: the analysis runner too."""


log = structlog.get_logger(__name__)


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
        fan_out.pending_host(services, request)
        try:
            with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=scratch_root(services.settings)) as scratch:
                outcome = _analyse(services, request, Path(scratch))
        except Exception as error:  # noqa: BLE001 - recorded on the fan-out, then acknowledged or retried
            permanent = isinstance(error, AnalysisFailed) and error.permanent
            reason = str(error) if isinstance(error, AnalysisFailed) else f"{type(error).__name__}: {error}"
            if permanent or last_attempt:
                failed = HostProgress(file=request.host_file, state=HostState.FAILED,
                                      reason=reason[:MAX_REASON_CHARS])
                counted = fan_out.record_host(services, request, failed)
                log.warning(f"host {request.host} of {short_name(request.session)} failed: {reason}",
                            recorded=counted)
                raise PermanentFailure(f"host {request.host} failed: {reason} ({counted})") from error
            raise
        counted = fan_out.record_host(services, request, outcome)
        log.info(f"host {request.host} of {short_name(request.session)} analysed: {outcome.status}", recorded=counted)
        return f"host {request.host} {outcome.status}: {outcome.evidence_uri} ({counted})"


def give_up(services: HostAnalysisPorts, payload: bytes, reason: str) -> str:
    """A host request that exhausted its delivery attempts: the host is FAILED with ``reason``, and counted."""
    request = HostAnalysisRequest.decode(payload)
    failed = HostProgress(file=request.host_file, state=HostState.FAILED,
                          reason=f"gave up after every delivery attempt: {reason}"[:MAX_REASON_CHARS])
    return f"host {request.host} of {short_name(request.session)}: {fan_out.record_host(services, request, failed)}"
