"""The ``analyze_session`` function: one analysis request, start to finish, recorded on the session.

A request (:class:`~mldiag.domain.messages.AnalysisRequest`, from
:mod:`mldiag.services.analysis_requests`) is handled once per session and set of files:

* a request for files the session no longer holds (its ``generationSet``
  moved on) is stale: acknowledged and dropped; so is one for a set already
  DONE or FAILED (``mldiag profiler-session analyze`` asks again);
* otherwise the analysis goes PENDING → RUNNING, the host files are downloaded
  into scratch space and analysed by the analysis runner (:class:`~mldiag.ports.AnalysisRunner`,
  a child process where deployed) under ``analysis_timeout_seconds``, and ``summary.html`` and
  ``analysis.json`` are written to ``<session folder>/mldiag/<generation set>/``
  (so a rerun that overwrites the session's files leaves the earlier report
  readable); the session records DONE, the health, the reasoner, both report
  URIs, the top finding and the step time, and so does its run's
  ``latestAnalysis`` when it is the run's newest.

Failures are sorted the way the event archive sorts them: a profile that cannot
be read, a missing file, a timeout or running out of memory will fail again, so
the analysis is FAILED with the reason and the event acknowledged
(:class:`PermanentFailure`); anything else (storage hiccups, a crashed worker)
puts the analysis back to PENDING with the reason and is retried, until the
last delivery attempt records FAILED. Where the delivery count does not reach the
function (functions-framework drops it from the push), the request's dead
letter does it instead (:func:`give_up`).

A session of ``fan_out_min_hosts`` host files or more is fanned out instead
(:mod:`mldiag.services.fan_out`): one ``analyze_host`` instance per host, the
last of which asks for the merge, an :class:`~mldiag.domain.messages.AnalysisRequest`
with ``merge``, which this function serves by merging the hosts' evidence,
investigating and writing the reports as for any session (hosts that failed are
named in them).

What a killed process leaves is picked up later: maintenance asks again for an
analysis left RUNNING or PENDING past the time limit, or fails it after its
last attempt (:func:`retry_stale`); on the embedded backend analyses keep their
scratch under the data dir, so that ``mldiag up`` can have the runner kill what
a killed predecessor left analysing there and remove that scratch when it
starts (:func:`clean_up_after_a_stop`).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import structlog

from mldiag.analysis.evidence import Analysis
from mldiag.analysis.profile.profiles import UnreadableProfile
from mldiag.analysis.report import ANALYSIS_FILE, SUMMARY_FILE
from mldiag.config import Settings
from mldiag.domain.errors import AnalysisFailed, NotFound, PermanentFailure
from mldiag.domain.host_analyses import HostAnalyses, followups_host
from mldiag.domain.layout import XPLANE_SUFFIX, report_folder
from mldiag.domain.messages import AnalysisRequest
from mldiag.domain.names import parent_of, short_name
from mldiag.domain.resources import AnalysisState, ProfilerSession
from mldiag.ports import AnalysisJob, Where
from mldiag.services import analysis_requests, fan_out, fleet, notifications, unit_of_work
from mldiag.services.dependencies import Analysing, Blobs, Configured, Publishing, Stored
from mldiag.services.event_archive import Ignored
from mldiag.services.session_files import require_xspace_object
from mldiag.services.unit_of_work import UnitOfWork


class AnalysisJobPorts(Stored, Publishing, Blobs, Configured, Protocol):
    """What recording an analysis job's progress uses."""


class RunningAnalysisPorts(AnalysisJobPorts, Analysing, Protocol):
    """What running an analysis job uses: the analysis runner too."""


MAX_REASON_CHARS = 500
RETRY_PREFIX = "will retry: "  # how a failure that is to be retried reads on the session
SCRATCH_PREFIX = "mldiag-session-"
# Downloading and uploading come on top of the worker's own time limit; an analysis RUNNING for longer is not.
STALE_MARGIN_SECONDS = 120.0
log = structlog.get_logger(__name__)


def _update(services: AnalysisJobPorts, name: str, change: Callable[[ProfilerSession], str],
            analysis: Analysis | None = None) -> str:
    """Apply ``change`` to the stored session in a unit of work; returns what it says.

    When the change completes an analysis (``analysis``, what it found), the run's ``latestAnalysis`` follows in
    the same unit, so the run list never disagrees with the session, and so do the
    ``analysis.v1.completed`` notification and the analysis's fleet record (published once committed).
    """
    def work(unit: UnitOfWork) -> str:
        previous = unit.sessions.find(name)
        if previous is None:
            raise Ignored("the session no longer exists")
        session = previous.model_copy(deep=True)
        said = change(session)
        completed = session.analysis.state is AnalysisState.DONE and previous.analysis.state is not AnalysisState.DONE
        run = unit.runs.find(parent_of(name)) if completed else None  # reads before writes
        saved = unit.sessions.save(previous, session)
        if run is not None:
            summarised = run.model_copy(deep=True)
            summarised.record_analysis(saved)
            unit.runs.save(run, summarised)
        if completed:
            step_time_change = analysis.comparison.step_time_ms.ratio if analysis and analysis.comparison else None
            notifications.analysis_completed(unit, services, saved, step_time_change)
        if completed and analysis is not None:
            fleet.publish_record(unit, services, fleet.fleet_record(analysis, saved, run,
                                                                    saved.analysis.end_time or services.now()))
        return said

    return unit_of_work.run(services, work)


def _start(services: AnalysisJobPorts, request: AnalysisRequest) -> AnalysisState:
    """RUNNING, if the session still waits for this request's result; returns the state it was in."""
    def change(session: ProfilerSession) -> str:
        analysis = session.analysis
        # Current means: these are the session's files now, and no request for newer ones went out since.
        if request.generation_set != session.generation_set() or request.generation_set != analysis.generation_set:
            raise Ignored("stale request: the session's files changed since; a newer request analyses them")
        if analysis.state in (AnalysisState.DONE, AnalysisState.FAILED):
            raise Ignored(f"already {analysis.state.value} for these files; "
                          "`mldiag profiler-session analyze` runs it again")
        if analysis.state not in (AnalysisState.PENDING, AnalysisState.RUNNING):
            raise Ignored(f"no analysis was requested (state {analysis.state.value})")
        was = analysis.state.value
        analysis.state = AnalysisState.RUNNING
        analysis.attempts += 1
        analysis.start_time, analysis.end_time = services.now(), None
        analysis.error = ""
        return was

    return AnalysisState(_update(services, request.session, change))


def _finish(services: AnalysisJobPorts, request: AnalysisRequest, state: AnalysisState,
            analysis: Analysis | None = None, **fields: Any) -> str:
    """Record the outcome (``analysis``: what a DONE one found), if the session still waits for this run's result."""
    def change(session: ProfilerSession) -> str:
        analysis = session.analysis
        if analysis.generation_set != request.generation_set or analysis.state is not AnalysisState.RUNNING:
            return "superseded: a newer request for this session is pending"
        analysis.state = state
        analysis.end_time = services.now()
        for name, value in fields.items():
            setattr(analysis, name, value)
        return state.value

    return _update(services, request.session, change, analysis)


def give_up(services: AnalysisJobPorts, payload: bytes, reason: str) -> str:
    """A request that exhausted its delivery attempts: its analysis is FAILED with ``reason``.

    Only while the analysis still waits on that request: PENDING after a failure
    it was to retry, or RUNNING when the instance died mid-analysis. A newer
    request for the same files (PENDING with no error) is left alone.
    """
    request = AnalysisRequest.decode(payload)

    def change(session: ProfilerSession) -> str:
        analysis = session.analysis
        waiting = analysis.state is AnalysisState.RUNNING or (
            analysis.state is AnalysisState.PENDING and analysis.error.startswith(RETRY_PREFIX))
        if analysis.generation_set != request.generation_set or not waiting:
            return f"the analysis no longer waits on this request ({analysis.state.value})"
        analysis.state = AnalysisState.FAILED
        analysis.end_time = services.now()
        analysis.error = f"gave up after every delivery attempt: {reason}"[:MAX_REASON_CHARS]
        return f"analysis of {request.session} marked FAILED"

    return _update(services, request.session, change)


def _dashboard_uri(services: AnalysisJobPorts, session: ProfilerSession) -> str:
    from mldiag.services.resources.sessions import session_location

    if session.dashboard_uri:
        return session.dashboard_uri
    run = services.runs.find(parent_of(session.name))
    return session_location(services.settings, run, session.id)[1] if run is not None else ""


def _baseline(services: AnalysisJobPorts, session: ProfilerSession, scratch: Path) -> tuple[Path | None, str]:
    """``analysis.json`` of the earlier session of the run an auto-captured one is compared with, downloaded, and
    that session's name (see find_baseline); None where there is none."""
    from mldiag.services.baselines import find_baseline

    if not session.auto_captured:
        return None, ""
    baseline = find_baseline(services, session)
    if baseline is None:
        return None, ""
    target = scratch / "baseline" / ANALYSIS_FILE
    try:
        services.blobs.download(baseline.analysis.analysis_uri, target)
    except NotFound:
        return None, ""
    return target, baseline.name


def analysis_job(settings: Settings, inputs: list[Path], scratch: Path, out: Path) -> AnalysisJob:
    """The job that analyses ``inputs`` in ``scratch`` into ``out`` within the settings' limits."""
    return AnalysisJob(inputs=tuple(inputs), out=out, scratch=scratch,
                       timeout_seconds=settings.analysis_timeout_seconds,
                       memory_ceiling_bytes=settings.analysis_memory_ceiling_bytes)


def download_profile(services: AnalysisJobPorts, uri: str, target: Path) -> Path:
    """Copy one host file into scratch space, once it is known to be a profile."""
    try:
        require_xspace_object(services.blobs, uri)  # before a copy is made of what may be gigabytes of nothing
        services.blobs.download(uri, target)
    except NotFound:
        raise AnalysisFailed(f"{uri} is gone from the bucket", permanent=True) from None
    except UnreadableProfile as error:
        raise AnalysisFailed(f"unreadable profile: {error}", permanent=True) from None
    return target


def _analyse(services: RunningAnalysisPorts, request: AnalysisRequest, session: ProfilerSession,
             scratch: Path) -> tuple[Analysis, str, str]:
    """Download, analyse, upload; returns the analysis and the URIs of ``summary.html`` and ``analysis.json``."""
    files = [download_profile(services, uri, scratch / "profile" / session.id / f"{host}{XPLANE_SUFFIX}")
             for host, uri in sorted(request.host_files.items())]
    return _report(services, request, session, scratch, files)


def _merge(services: RunningAnalysisPorts, request: AnalysisRequest, session: ProfilerSession, progress: HostAnalyses,
           scratch: Path) -> tuple[Analysis, str, str]:
    """Download the hosts' evidence (and the file the follow-ups read), merge, upload; returns the analysis and
    the report URIs."""
    done = progress.done
    if not done:
        raise AnalysisFailed("no host could be analysed: " + "; ".join(
            f"{host}: {reason}" for host, reason in progress.missing.items()), permanent=True)
    evidence = []
    for host, finished in done.items():
        target = scratch / "hosts" / f"{host}.json"
        try:
            services.blobs.download(finished.evidence_uri, target)
        except NotFound:
            raise AnalysisFailed(f"{finished.evidence_uri} is gone from the bucket", permanent=True) from None
        evidence.append(target)
    followups_on = None
    if followups := followups_host(done):
        target = scratch / "profile" / session.id / f"{followups}{XPLANE_SUFFIX}"
        followups_on = download_profile(services, done[followups].file, target)
    return _report(services, request, session, scratch, evidence, progress.missing, followups_on)


def _report(services: RunningAnalysisPorts, request: AnalysisRequest, session: ProfilerSession, scratch: Path,
            inputs: list[Path], missing_hosts: Mapping[str, str] | None = None,
            followups_on: Path | None = None) -> tuple[Analysis, str, str]:
    """Analyse ``inputs`` (hosts' evidence to merge, given the ``missing_hosts``) and upload the reports next to
    the session; returns the analysis and the reports' URIs."""
    folder = request.folder_uri
    out = scratch / "report"
    baseline, baseline_session = _baseline(services, session, scratch)
    job = dataclasses.replace(analysis_job(services.settings, inputs, scratch, out), source=folder,
                              dashboard_uri=_dashboard_uri(services, session), baseline=baseline,
                              baseline_session=baseline_session, merge=missing_hosts is not None,
                              missing_hosts=missing_hosts or {}, followups_on=followups_on)
    analysis = services.analysis_runner.analyse(job)
    report_uri, analysis_uri = (f"{report_folder(folder, request.generation_set)}/{name}"
                                for name in (SUMMARY_FILE, ANALYSIS_FILE))
    services.blobs.upload(out / ANALYSIS_FILE, analysis_uri, "application/json")
    services.blobs.upload(out / SUMMARY_FILE, report_uri, "text/html; charset=utf-8")
    return analysis, report_uri, analysis_uri


def scratch_root(settings: Settings) -> Path | None:
    """Where this machine's analyses keep their scratch space (see Settings.scratch_dir); None: the system's."""
    root = settings.scratch_dir
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    return root


def clean_up_after_a_stop(services: RunningAnalysisPorts) -> tuple[int, int]:
    """Before analyses start on this machine: kill what a killed predecessor left analysing, and remove its
    scratch folders; returns how many of each. Only the embedded backend keeps its scratch in a folder of
    its own (the data dir's); in the cloud an instance's temporary space goes with it."""
    root = services.settings.scratch_dir
    if root is None or not root.is_dir():
        return 0, 0
    stopped = removed = 0
    for folder in root.iterdir():
        if folder.is_dir() and not folder.is_symlink():
            stopped += services.analysis_runner.kill_left_behind(folder)
            shutil.rmtree(folder, ignore_errors=True)
        else:
            folder.unlink(missing_ok=True)
        removed += 1
    if stopped or removed:
        log.info("cleaned up after an earlier stop", workers_stopped=stopped, scratch_removed=removed)
    return stopped, removed


def retry_stale(services: AnalysisJobPorts) -> tuple[int, int]:
    """Analyses that stopped without a result: asked again, or FAILED with the reason after the last attempt.

    An analysis RUNNING for longer than the worker's time limit plus :data:`STALE_MARGIN_SECONDS` has no
    process behind it any more (the instance or ``mldiag up`` was killed); one PENDING that long, its request
    unserved, is asked for again. Returns how many were retried and how many FAILED.
    """
    limit = services.settings.analysis_timeout_seconds + STALE_MARGIN_SECONDS
    cutoff = services.now() - timedelta(seconds=limit)
    retried = failed = 0
    for state in (AnalysisState.RUNNING, AnalysisState.PENDING):
        for session in services.sessions.find_where([Where("analysis.state", "==", state.value)], limit=500):
            if _stale_since(session, cutoff) and not fan_out.progressed_since(services.store.get, session, cutoff):
                asked, gave_up = unit_of_work.run(services, _retrying_or_failing(services, session.name, limit,
                                                                                 cutoff))
                retried += asked
                failed += gave_up
    return retried, failed


def _stale_since(session: ProfilerSession, cutoff: datetime) -> bool:
    analysis = session.analysis
    if analysis.state is AnalysisState.RUNNING:
        since = analysis.start_time
    elif analysis.state is AnalysisState.PENDING:
        since = session.update_time
    else:
        return False
    return since is not None and since <= cutoff


def _retrying_or_failing(services: AnalysisJobPorts, name: str, limit: float,
                         cutoff: datetime) -> Callable[[UnitOfWork], tuple[bool, bool]]:
    """The unit of work that asks again for the session's stale analysis, or fails it; it returns whether it asked
    and whether it failed it."""
    def work(unit: UnitOfWork) -> tuple[bool, bool]:
        previous = unit.sessions.find(name)
        if previous is None or not _stale_since(previous, cutoff) or fan_out.progressed_since(
                unit.transaction.get, previous, cutoff):
            return False, False
        session = previous.model_copy(deep=True)
        analysis = session.analysis
        if analysis.state is AnalysisState.RUNNING:
            reason = f"the analysis stopped without a result (RUNNING for over {limit:g} s: its process was stopped)"
        else:
            reason = f"the analysis request was not served within {limit:g} s"
        if analysis.attempts >= services.settings.max_delivery_attempts:
            analysis.state, analysis.end_time = AnalysisState.FAILED, services.now()
            analysis.error = f"{reason}; gave up after {analysis.attempts} attempt(s)"[:MAX_REASON_CHARS]
            unit.sessions.save(previous, session)
            return False, True
        asked = analysis_requests.request_analysis(unit, session, force=True)
        session.analysis.error = f"{RETRY_PREFIX}{reason}"[:MAX_REASON_CHARS]
        unit.sessions.save(previous, session)
        return asked, False

    return work


def _reasoner(analysis: Analysis) -> str:
    investigation = analysis.investigation
    if investigation is None:
        return "offline"
    if investigation.fallback_reason:
        return f"offline (Vertex AI failed: {investigation.fallback_reason})"[:MAX_REASON_CHARS]
    return f"vertex ({investigation.model})" if investigation.reasoner == "vertex" else investigation.reasoner


def analyze_requested(services: RunningAnalysisPorts, request: AnalysisRequest, attempt: int) -> str:
    """The ``analyze_session`` handler body: one analysis request (its ``attempt``-th delivery) in, a one-line
    account out."""
    last_attempt = attempt >= services.settings.max_delivery_attempts
    with structlog.contextvars.bound_contextvars(session=request.session):
        progress = fan_out.merge_ready(services, request) if request.merge else None
        was = _start(services, request)
        hosts = len(request.host_files)
        if progress is None and hosts >= services.settings.fan_out_min_hosts:
            return fan_out.start(services, request, fresh=was is AnalysisState.PENDING)
        session = services.sessions.get(request.session)
        what = (f"merge of {len(progress.done)} hosts' evidence" if progress is not None else
                f"{hosts} host file{'s' if hosts != 1 else ''}")
        log.info(f"analysis of {short_name(session.name)} started ({what})", notice=True,
                 attempt=session.analysis.attempts)
        try:
            with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=scratch_root(services.settings)) as scratch:
                if progress is not None:
                    analysis, report_uri, analysis_uri = _merge(services, request, session, progress, Path(scratch))
                else:
                    analysis, report_uri, analysis_uri = _analyse(services, request, session, Path(scratch))
        except Exception as error:  # noqa: BLE001 - recorded on the session, then acknowledged or retried
            permanent = isinstance(error, AnalysisFailed) and error.permanent
            reason = str(error) if isinstance(error, AnalysisFailed) else f"{type(error).__name__}: {error}"
            if permanent or last_attempt:
                _finish(services, request, AnalysisState.FAILED, error=reason[:MAX_REASON_CHARS])
                raise PermanentFailure(f"analysis failed: {reason}") from error
            _finish(services, request, AnalysisState.PENDING, error=f"{RETRY_PREFIX}{reason}"[:MAX_REASON_CHARS])
            raise
        top = analysis.findings[0] if analysis.findings else None
        outcome = _finish(
            services, request, AnalysisState.DONE, health=analysis.status, reasoner=_reasoner(analysis),
            report_uri=report_uri, analysis_uri=analysis_uri, error="",
            top_finding=f"{top.priority.value} {top.title}" if top else "", step_time_ms=analysis.metrics.step_time_ms,
            analysis=analysis,
        )
        step_time = analysis.metrics.step_time_ms
        log.info(f"analysis of {short_name(session.name)} done: {analysis.status.value}"
                 + (f", step time {step_time:.1f} ms" if step_time is not None else "")
                 + (f"; top finding {top.priority.value} {top.title}" if top else "")
                 + (f"; missing host{'s' if len(analysis.missing_hosts) > 1 else ''} "
                    + ", ".join(analysis.missing_hosts) if analysis.missing_hosts else ""),
                 notice=True, status=analysis.status.value, step_time_ms=step_time, report=report_uri,
                 recorded=outcome, missing_hosts=analysis.missing_hosts)
        return f"{analysis.status.value}: {report_uri} ({outcome})"
