"""Session registration: a profile file lands in the bucket, the session appears.

Handles ``google.cloud.storage.object.v1.finalized`` for objects laid out as
XProf writes them::

    <prefix>/<run>/[tensorboard/]plugins/profile/<session>/<host>.xplane.pb

Each host file joins its session (multi-host sessions merge), keyed on the
object's generation so a redelivered event changes nothing, an overwrite
registers again, and an event for an older generation that arrives after a
newer one is ignored (recorded as such in the event archive). Once the
session has settled, exactly one analysis request per set of files goes out
on ``analysis-requests`` through the outbox (:mod:`mldiag.services.analysis_requests`).
A session that names its hosts (a capture's targets, the hosts a programmatic
session was reported from) has settled once every one of them that did not
fail has its file; otherwise once no new file came for ``settle_seconds``,
except that a capture's session waits for the files of its targets that did
not fail, up to the capture's deadline, rather than settling with a host
missing. A session that only waits out its window (every scanned session: its
files came from the workload's own profiler, with no capture to say how many)
is settled by the maintenance tick (:meth:`Registrar.settle_due`), not by a
file's event.

A rerun of a job that names its session the same way overwrites the session's
files: the finished analysis of the earlier files moves to the session's
``earlierAnalyses`` (its report stays where it was written, in its own
generation folder) and the new files are analysed afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, Protocol

import structlog
from cloudevents.http import CloudEvent
from pydantic_core import from_json

from mldiag.domain.capture import DEADLINE_GRACE
from mldiag.domain.envelopes import STORAGE_FINALIZED
from mldiag.domain.errors import InvalidArgument, PermanentFailure
from mldiag.domain.layout import PROFILE_MARKER, SIBLING_SUFFIXES, XPLANE_SUFFIX, host_of, parse_blob_uri
from mldiag.domain.names import LocationName, id_from_text, short_name, validate_id
from mldiag.domain.resources import (
    HostFile,
    Kind,
    MachineLearningRun,
    ProfilerSession,
    SessionPhase,
    TargetSession,
    phase_of_targets,
)
from mldiag.domain.clock import format_timestamp
from mldiag.ports import Document, Where
from mldiag.services import analysis_requests, unit_of_work
from mldiag.services.dependencies import Configured, Publishing, Stored
from mldiag.services.event_archive import Ignored, Transactional
from mldiag.services.unit_of_work import UnitOfWork


class RegistrationPorts(Stored, Publishing, Configured, Protocol):
    """What registering a profile file uses."""


# Files XProf itself writes next to a session when a viewer opens it: not ours to register.
XPROF_CACHE_SUFFIXES = (".pb", ".SSTABLE", ".json.gz", ".sstable")
CAPTURED_KINDS = frozenset({Kind.KIND_ON_DEMAND, Kind.KIND_SNAPSHOT})
MAX_SETTLING_AT_ONCE = 500  # sessions one maintenance pass settles
# A session document's last fields (the model's last two, then its computed phase), and its store's own.
_LAST_FIELDS = frozenset({"lastFileTime", "settleAfter", "sessionPhase", "etag", "_parent"})

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ProfileObject:
    """A finalized object that sits in a session folder."""

    bucket: str
    name: str
    generation: str
    size: int
    prefix: str  # the path above the run folder ("" at the bucket root)
    run_folder: str
    session_folder: str
    file_name: str

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}"

    @property
    def gcs_path(self) -> str:
        """The run's ``artifacts.gcsPath``: where run folders live."""
        return f"gs://{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def session_folder_uri(self) -> str:
        return self.uri.rsplit("/", 1)[0]


def parse_finalized(data: Any, max_bytes: int) -> ProfileObject:
    """Validate the event's object metadata and place it in the profile layout.

    Raises :class:`PermanentFailure` for events that can never be registered and
    :class:`Ignored` for objects that are simply not profile files.
    """
    if not isinstance(data, dict):
        raise PermanentFailure("event data is not a JSON object with the object's metadata")
    bucket, name = data.get("bucket"), data.get("name")
    if not isinstance(bucket, str) or not isinstance(name, str) or not bucket or not name:
        raise PermanentFailure("event data lacks the object's 'bucket' and 'name'")
    try:
        parse_blob_uri(f"gs://{bucket}/{name}")
    except InvalidArgument as bad:
        raise PermanentFailure(f"unusable object name: {bad}") from None
    try:
        generation = str(int(data.get("generation") or 0))
        size = int(data.get("size") or 0)
    except (TypeError, ValueError):
        raise PermanentFailure("'generation' and 'size' must be integers") from None

    head, marker, tail = name.rpartition(PROFILE_MARKER)
    if not marker:
        raise Ignored("not under a plugins/profile folder")
    parts = tail.split("/")
    if len(parts) != 2:
        raise Ignored("not directly inside a session folder")
    session_folder, file_name = parts
    folders = head.split("/") if head else []
    if folders and folders[-1] == "tensorboard":
        folders.pop()
    if not folders:
        raise Ignored("no run folder above plugins/profile")
    profile = ProfileObject(bucket, name, generation, size, "/".join(folders[:-1]), folders[-1],
                            session_folder, file_name)

    if not file_name.endswith(XPLANE_SUFFIX) and not file_name.endswith(SIBLING_SUFFIXES):
        if file_name.endswith(XPROF_CACHE_SUFFIXES) or file_name.startswith("ALL_HOSTS."):
            raise Ignored("an XProf cache file")
        raise PermanentFailure(f"{file_name!r} sits in a session folder but is not a profile file")
    if size == 0:
        raise PermanentFailure(f"{profile.uri} is empty (0 bytes)")
    if size > max_bytes:
        raise PermanentFailure(f"{profile.uri} is {size} bytes, over the {max_bytes}-byte limit")
    return profile


def _id_for(folder: str, field: str) -> str:
    try:
        return validate_id(folder, field=field)
    except InvalidArgument:
        return id_from_text(folder)


class Registrar:
    """Registers profile files into sessions, and requests their analysis once they have settled."""

    def __init__(self, services: RegistrationPorts):
        self.services = services
        self.settings = services.settings
        self.location = LocationName(self.settings.project, self.settings.location)

    # -- the run --------------------------------------------------------------------

    def _run_in(self, unit: UnitOfWork, profile: ProfileObject) -> tuple[str, MachineLearningRun | None]:
        """The name of the run whose ``gcsPath`` holds this run folder, read in ``unit`` (its stored document: only
        its name and path are asked), and ``None``; or the name of a new run inferred from the path, and that run,
        for the caller to stage once its reads are done."""
        def holds_folder(run: Document) -> bool:
            return str(run.get("artifacts", {}).get("gcsPath", "")).rstrip("/") == profile.gcs_path

        folder_id = _id_for(profile.run_folder, "machineLearningRunId")
        at_folder_name = str(self.location.run(folder_id))
        at_folder_id = unit.runs.find_document(at_folder_name)
        if at_folder_id is not None and folder_id == profile.run_folder and holds_folder(at_folder_id):
            return at_folder_name, None
        paths = [profile.gcs_path, profile.gcs_path + "/"]
        for run in self.services.runs.find_where([Where("artifacts.gcsPath", "in", paths)], limit=1000):
            if run.id == profile.run_folder and run.artifacts.gcs_path.rstrip("/") == profile.gcs_path:
                return run.name, None
        candidates = [folder_id, id_from_text(f"{profile.bucket}/{profile.prefix}/{profile.run_folder}")]
        for run_id in dict.fromkeys(candidates):
            name = str(self.location.run(run_id))
            existing = at_folder_id if run_id == folder_id else unit.runs.find_document(name)
            if existing is None:
                return name, MachineLearningRun(name=name, display_name=profile.run_folder,
                                                artifacts={"gcsPath": profile.gcs_path},
                                                labels={"created_by": "mldiag-scan"})
            if holds_folder(existing):
                return name, None
        raise PermanentFailure(f"no run id is free for {profile.gcs_path}/{profile.run_folder}")

    # -- the session ----------------------------------------------------------------

    def register(self, profile: ProfileObject) -> str:
        """Record the file in its session; returns a one-line account of what changed."""
        return unit_of_work.run(self.services, self.registering(profile))

    def registering(self, profile: ProfileObject) -> Transactional:
        """The unit of work that records the file in its session (its run found, or made, in the same unit): it
        returns a one-line account of what changed."""
        session_id = _id_for(profile.session_folder, "profilerSessionId")

        def work(unit: UnitOfWork) -> str:
            run_name, new_run = self._run_in(unit, profile)
            name = f"{run_name}/profilerSessions/{session_id}"
            stored = unit.sessions.find_document(name)
            if new_run is not None:
                unit.runs.create(new_run)
            document = stored if stored is not None else self._new_session_document(name, profile)
            if (appended := self._with_new_host(document, profile)) is not None:
                unit.sessions.stage_document(appended, new=stored is None)
                if stored is None:
                    self._announce(unit, name, profile)
                return f"{profile.file_name} registered in {name}"
            previous = None if stored is None else unit.sessions.load(stored)
            session = self._new_session(name, profile) if previous is None else _to_change(previous)
            replaced = session.host_files.get(host_of(profile.file_name)) if profile.file_name.endswith(
                XPLANE_SUFFIX) else None
            report_of_replaced = session.analysis.report_uri
            self._refuse_older_generation(session, profile)
            if not self._add_file(session, profile):
                # A redelivery. If a crash came between commit and publish, the request is still staged.
                if requested := session.analysis.generation_set:
                    unit.publish_left_behind(analysis_requests.outbox_key(name, requested))
                return "already registered"
            asked = self._settled(session) and analysis_requests.request_analysis(unit, session)
            unit.sessions.stage_save(previous, session)
            if replaced is not None:
                account = (f"session {session.id} of run {short_name(run_name)} received a newer profile "
                           f"(generation {profile.generation} of {profile.file_name})")
                if report_of_replaced:
                    account += f"; the earlier analysis is kept at {report_of_replaced}"
            else:
                account = f"{profile.file_name} registered in {name}"
            if previous is None:
                self._announce(unit, name, profile)
            return account + (" (analysis requested)" if asked else "")

        return work

    @staticmethod
    def _announce(unit: UnitOfWork, name: str, profile: ProfileObject) -> None:
        """Say, once it has committed, that the file made a new session."""
        unit.on_commit(lambda: log.info(f"session {short_name(name)} registered from {profile.session_folder_uri}",
                                        notice=True, session=name))

    def _new_session_document(self, name: str, profile: ProfileObject) -> Document:
        """The document of the session :meth:`_new_session` makes, created now, as its model writes it: what
        :meth:`_with_new_host` registers a session's first file in."""
        created = format_timestamp(self.services.now())
        document = {"name": name, "createTime": created, "updateTime": created, **from_json(_scanned_session_text())}
        document["storageFolderUri"] = profile.session_folder_uri
        return document

    def _new_session(self, name: str, profile: ProfileObject) -> ProfilerSession:
        return ProfilerSession(
            name=name,
            kind=Kind.KIND_SCANNED,
            storage_folder_uri=profile.session_folder_uri,
        )

    @staticmethod
    def _files_of(session: ProfilerSession, profile: ProfileObject) -> tuple[dict[str, HostFile], str]:
        """The session's file list that holds ``profile``, and its key there."""
        if profile.file_name.endswith(XPLANE_SUFFIX):
            return session.host_files, host_of(profile.file_name)
        return session.extra_files, profile.file_name

    def _refuse_older_generation(self, session: ProfilerSession, profile: ProfileObject) -> None:
        """An event that arrives late for a file the session already holds a newer generation of changes nothing."""
        files, key = self._files_of(session, profile)
        current = files.get(key)
        if current is not None and int(profile.generation) < int(current.generation or 0):
            raise Ignored(f"generation {profile.generation} of {profile.file_name} is older than the registered "
                          f"generation {current.generation}")

    def _with_new_host(self, stored: Document, profile: ProfileObject) -> Document | None:
        """The stored document of a scanned session with the file of a host new to it (not among its files, its
        targets or their parts) registered, the session's model neither loaded nor dumped: the changes
        :meth:`_add_file` makes (the file, the host's part and its place among the targets, when the last file came
        and when the session settles) made to the document, in the model's field order. Nothing else can follow:
        the file starts the settle window again, and only the maintenance tick settles a scanned session. ``None``
        for any other file (a host the session knows, a file beside the host files, a session of another kind, no
        settle window), which :meth:`_add_file` registers in the model."""
        host = host_of(profile.file_name)
        files, parts, targets = stored.get("hostFiles", {}), stored.get("targetSessions", {}), stored.get(
            "profilerTargets", [])
        if (not profile.file_name.endswith(XPLANE_SUFFIX) or stored.get("kind") != Kind.KIND_SCANNED.value
                or host in files or host in parts or host in targets or self.settings.settle_seconds <= 0):
            return None
        now = self.services.now()
        arrived = format_timestamp(now)
        session = dict(stored)
        for field in _LAST_FIELDS:  # rewritten below, at their places at the end of the document
            session.pop(field, None)
        # A HostFile's and a TargetSession's JSON, as their models write them.
        session["hostFiles"] = {**files, host: {"uri": profile.uri, "sizeBytes": profile.size,
                                                "generation": profile.generation}}
        session["targetSessions"] = {**parts, host: {"startTime": arrived, "endTime": arrived,
                                                     "sessionPhase": SessionPhase.SUCCEEDED.value, "error": ""}}
        session["profilerTargets"] = [*targets, host]
        if not session.get("storageFolderUri"):
            session["storageFolderUri"] = profile.session_folder_uri
        session["updateTime"] = session["lastFileTime"] = arrived
        session["settleAfter"] = format_timestamp(now + timedelta(seconds=self.settings.settle_seconds))
        session["sessionPhase"] = phase_of_targets(
            each.get("sessionPhase", SessionPhase.ACTIVE) for each in session["targetSessions"].values()).value
        return session

    def _add_file(self, session: ProfilerSession, profile: ProfileObject) -> bool:
        files, key = self._files_of(session, profile)
        host = host_of(profile.file_name)
        current = files.get(key)
        if current is not None and current.generation == profile.generation:
            return False
        files[key] = HostFile(uri=profile.uri, size_bytes=profile.size, generation=profile.generation)
        if profile.file_name.endswith(XPLANE_SUFFIX):
            now = self.services.now()
            if host not in session.target_sessions:
                session.target_sessions[host] = TargetSession(
                    start_time=now, end_time=now, session_phase=SessionPhase.SUCCEEDED)
            if session.kind is Kind.KIND_SCANNED and host not in session.profiler_targets:
                session.profiler_targets.append(host)
            session.last_file_time = now
            session.settle_after = now + timedelta(seconds=self.settings.settle_seconds)
        if not session.storage_folder_uri:
            session.storage_folder_uri = profile.session_folder_uri
        return True

    # -- settling and the analysis request ------------------------------------------------

    def _settled(self, session: ProfilerSession) -> bool:
        # A target whose capture failed will send no file.
        expected = {t for t in session.profiler_targets
                    if t not in session.target_sessions or session.target_sessions[t].session_phase is not SessionPhase.FAILED}
        if session.kind is not Kind.KIND_SCANNED and expected and expected <= set(session.host_files):
            return True
        now = self.services.now()
        deadline = self._capture_deadline(session)
        if expected and deadline is not None and now < deadline:
            return False
        return session.settle_after is not None and session.settle_after <= now

    @staticmethod
    def _capture_deadline(session: ProfilerSession) -> datetime | None:
        """Until when a capture's session waits for its targets' files rather than settling with a host missing:
        the deadline at which maintenance fails a target's capture that nobody finished."""
        starts = [part.start_time for part in session.target_sessions.values() if part.start_time is not None]
        if session.kind not in CAPTURED_KINDS or not starts:
            return None
        return min(starts) + session.duration + DEADLINE_GRACE

    def _due(self) -> list[str]:
        """The sessions whose settle window has passed and that have settled (a capture's may still wait)."""
        windows_passed = self.services.sessions.find_where(
            [Where("settleAfter", "<=", format_timestamp(self.services.now()))], limit=MAX_SETTLING_AT_ONCE)
        return [session.name for session in windows_passed if self._settled(session)]

    def settle_is_due(self) -> bool:
        """Whether some session has settled, so that :meth:`settle_due` has work."""
        return bool(self._due())

    def settle_due(self) -> int:
        """Request analysis for every session that has settled; returns how many."""
        requested = 0
        for name in self._due():

            def work(unit: UnitOfWork, name: str = name) -> bool:
                previous = unit.sessions.find(name)
                if previous is None or not self._settled(previous):
                    return False
                session = _to_change(previous)
                asked = analysis_requests.request_analysis(unit, session)
                unit.sessions.save(previous, session)
                return asked

            requested += unit_of_work.run(self.services, work)
        return requested


@cache
def _scanned_session_text() -> str:
    """A new scanned session's fields after its name and times, as its model writes them (the name, the times and
    the etag left out)."""
    return ProfilerSession(kind=Kind.KIND_SCANNED).model_dump_json(
        by_alias=True, exclude_none=True, exclude={"name", "create_time", "update_time", "etag"})


def _to_change(session: ProfilerSession) -> ProfilerSession:
    """A copy of ``session`` for registration to change, ``session`` staying as it was read (its save checks the
    transition from it): what registering a file and requesting an analysis change in place (the file lists, the
    targets and the analysis) is copied, the rest shared. A fraction of the cost of a deep copy or a second
    load."""
    return session.model_copy(update={
        "host_files": dict(session.host_files), "extra_files": dict(session.extra_files),
        "target_sessions": dict(session.target_sessions), "profiler_targets": list(session.profiler_targets),
        "analysis": session.analysis.model_copy(),
    })


def registering_finalized(services: RegistrationPorts, event: CloudEvent) -> Transactional:
    """The ``register_session`` handler body: the unit of work that registers one finalize event's file
    (:meth:`Registrar.registering`)."""
    if event["type"] != STORAGE_FINALIZED:
        raise PermanentFailure(f"register_session handles {STORAGE_FINALIZED}, not {event['type']!r}")
    profile = parse_finalized(event.get_data(), services.settings.max_profile_bytes)
    return Registrar(services).registering(profile)
