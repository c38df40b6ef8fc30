"""Profiler sessions: create, update (per-host merge), and share links to their report.

The server computes where a session lives (``storageFolderUri``, XProf's
``<gcsPath>/<run>/plugins/profile/<session>``) and how to open it
(``dashboardUri``, the XProf viewer with ``?session_path=``); clients' values
for both are ignored. An update of ``targetSessions`` merges host by host, so
hosts of a multi-host run can report independently, and every host with a
target session is listed in ``profilerTargets``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from urllib.parse import quote

from mldiag.config import Settings
from mldiag.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from mldiag.domain.names import SESSIONS, ChildName, RunName
from mldiag.domain.resources import MachineLearningRun, ProfilerSession
from mldiag.domain.types import bounded_duration
from mldiag.services import unit_of_work
from mldiag.services.dependencies import Blobs, Configured, Stored
from mldiag.services.resources.masks import Merge, apply_update, assign


class SessionPorts(Stored, Blobs, Configured, Protocol):
    """What managing sessions uses."""


MUTABLE_FIELDS = frozenset({
    "kind", "profilerTargets", "targetSessions", "duration", "hostTracerLevel", "deviceTracerLevel",
    "pythonTracerLevel", "autoCaptured", "monitoredEvents",
})
MIN_SHARE_TTL = timedelta(minutes=1)
MAX_SHARE_TTL = timedelta(days=7)  # the longest a Cloud Storage V4 signed URL may live


def _merge_target_sessions(stored: dict[str, Any] | None, incoming: dict[str, Any]) -> dict[str, Any]:
    return {**(stored or {}), **incoming}


def _merge_targets(stored: list[str] | None, incoming: list[str]) -> list[str]:
    return list(dict.fromkeys([*(stored or []), *incoming]))


_MERGES: dict[str, Merge] = {"targetSessions": _merge_target_sessions, "profilerTargets": _merge_targets}


def session_location(settings: Settings, run: MachineLearningRun, session_id: str) -> tuple[str, str]:
    """``(storageFolderUri, dashboardUri)`` of a session of ``run``; empty if the run stores no profiles."""
    if not run.artifacts.gcs_path:
        return "", ""
    folder = run.session_folder(session_id)
    viewer = (settings.xprof_viewer_url or f"{settings.api_url.rstrip('/')}/viewer").rstrip("/")
    return folder, f"{viewer}/?session_path={quote(folder, safe='')}"


def _list_every_target(session: ProfilerSession) -> None:
    session.profiler_targets = _merge_targets(session.profiler_targets, list(session.target_sessions))


def create(services: SessionPorts, run_name: RunName, session_id: str, body: dict[str, Any]) -> ProfilerSession:
    """A new session of the run; ``session_id`` defaults to the time, as the SDK names sessions."""
    run = services.runs.get(str(run_name))
    session_id = session_id or services.now().strftime("%Y%m%d_%H%M%S_%f")
    name = str(run_name.child(SESSIONS, session_id))
    session = apply_update(ProfilerSession(name=name), body, "", mutable=MUTABLE_FIELDS)
    session.storage_folder_uri, session.dashboard_uri = session_location(services.settings, run, session_id)
    _list_every_target(session)
    try:
        return services.sessions.create(session)
    except AlreadyExists:
        raise AlreadyExists(f"{name} already exists", resource_name=name) from None


def update(services: SessionPorts, name: ChildName, body: dict[str, Any], update_mask: str) -> ProfilerSession:
    """Apply the masked fields (``targetSessions`` merged per host); the body's etag must be current."""

    def mutate(session: ProfilerSession) -> None:
        updated = apply_update(session, body, update_mask, mutable=MUTABLE_FIELDS, merge=_MERGES)
        _list_every_target(updated)
        assign(session, updated)

    etag = str(body.get("etag") or "")
    return unit_of_work.change(services, lambda unit: unit.sessions.update(str(name), mutate, etag=etag))


@dataclass(frozen=True)
class ShareLink:
    url: str
    expire_time: datetime
    report_uri: str
    dashboard_uri: str


def share(services: SessionPorts, name: ChildName, ttl: timedelta) -> ShareLink:
    """A signed URL that opens the session's report until ``ttl`` has passed."""
    try:
        bounded_duration(ttl, MIN_SHARE_TTL, MAX_SHARE_TTL)
    except ValueError as error:
        raise InvalidArgument(str(error), field="ttl") from None
    session = services.sessions.get(str(name))
    report_uri = session.analysis.report_uri
    if not report_uri:
        raise FailedPrecondition(
            f"{name} has no report yet (analysis {session.analysis.state.value}); share it once analysed"
        )
    return ShareLink(
        url=services.blobs.signed_url(report_uri, ttl),
        expire_time=services.now() + ttl,
        report_uri=report_uri,
        dashboard_uri=session.dashboard_uri,
    )
