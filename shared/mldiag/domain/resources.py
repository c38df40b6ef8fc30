"""The resources of the ML Diagnostics model (SPEC §1), as pydantic types.

Field names and enum spellings follow Google's ``v1alpha`` JSON so that the
official SDK and ``gcloud``-shaped clients read them unchanged. Each resource
knows which of its state changes are possible (:meth:`Resource.check_transition`);
the repository calls it on every update, so an impossible change is refused
wherever it comes from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self

from pydantic import Field, ValidationError, computed_field, model_validator

from mldiag.domain.errors import InvalidArgument, InvalidTransition, invalid_argument
from mldiag.domain.types import CamelModel, Duration, PrefixedEnum, Timestamp

# --- enums -------------------------------------------------------------------


class RunPhase(PrefixedEnum):
    RUN_PHASE_UNSPECIFIED = "RUN_PHASE_UNSPECIFIED"
    ACTIVE = "ACTIVE"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class ResourceState(PrefixedEnum):
    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    ACTIVE = "ACTIVE"
    DELETING = "DELETING"


class Orchestrator(PrefixedEnum):
    ORCHESTRATOR_UNSPECIFIED = "ORCHESTRATOR_UNSPECIFIED"
    NONE = "NONE"
    GCE = "GCE"
    GKE = "GKE"
    SLURM = "SLURM"
    CUSTOM = "CUSTOM"


class Kind(PrefixedEnum):
    KIND_UNSPECIFIED = "KIND_UNSPECIFIED"
    KIND_ON_DEMAND = "KIND_ON_DEMAND"
    KIND_PROGRAMMATIC = "KIND_PROGRAMMATIC"
    KIND_SCANNED = "KIND_SCANNED"
    KIND_SNAPSHOT = "KIND_SNAPSHOT"

    @classmethod
    def _prefix(cls) -> str:
        return "KIND_"


class SessionPhase(PrefixedEnum):
    SESSION_PHASE_UNSPECIFIED = "SESSION_PHASE_UNSPECIFIED"
    ACTIVE = "ACTIVE"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class HostTracerLevel(PrefixedEnum):
    HOST_TRACER_LEVEL_UNSPECIFIED = "HOST_TRACER_LEVEL_UNSPECIFIED"
    HOST_TRACER_LEVEL_DISABLED = "HOST_TRACER_LEVEL_DISABLED"
    HOST_TRACER_LEVEL_CRITICAL = "HOST_TRACER_LEVEL_CRITICAL"
    HOST_TRACER_LEVEL_INFO = "HOST_TRACER_LEVEL_INFO"
    HOST_TRACER_LEVEL_VERBOSE = "HOST_TRACER_LEVEL_VERBOSE"

    @classmethod
    def _prefix(cls) -> str:
        return "HOST_TRACER_LEVEL_"

    @property
    def profiler_option(self) -> int:
        """The integer ``host_tracer_level`` the XProf profiler server expects."""
        return {"DISABLED": 0, "CRITICAL": 1, "INFO": 2, "VERBOSE": 3}.get(self.name.rsplit("_", 1)[1], 2)


class DeviceTracerLevel(PrefixedEnum):
    DEVICE_TRACER_LEVEL_UNSPECIFIED = "DEVICE_TRACER_LEVEL_UNSPECIFIED"
    DEVICE_TRACER_LEVEL_DISABLED = "DEVICE_TRACER_LEVEL_DISABLED"
    DEVICE_TRACER_LEVEL_ENABLED = "DEVICE_TRACER_LEVEL_ENABLED"

    @classmethod
    def _prefix(cls) -> str:
        return "DEVICE_TRACER_LEVEL_"

    @property
    def profiler_option(self) -> int:
        return 0 if self is DeviceTracerLevel.DEVICE_TRACER_LEVEL_DISABLED else 1


class PythonTracerLevel(PrefixedEnum):
    PYTHON_TRACER_LEVEL_UNSPECIFIED = "PYTHON_TRACER_LEVEL_UNSPECIFIED"
    PYTHON_TRACER_LEVEL_DISABLED = "PYTHON_TRACER_LEVEL_DISABLED"
    PYTHON_TRACER_LEVEL_ENABLED = "PYTHON_TRACER_LEVEL_ENABLED"

    @classmethod
    def _prefix(cls) -> str:
        return "PYTHON_TRACER_LEVEL_"

    @property
    def profiler_option(self) -> int:
        return 1 if self is PythonTracerLevel.PYTHON_TRACER_LEVEL_ENABLED else 0


class TargetState(PrefixedEnum):
    ACTIVE = "ACTIVE"
    GONE = "GONE"


class AnalysisState(PrefixedEnum):
    NOT_STARTED = "NOT_STARTED"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"


class EventType(PrefixedEnum):
    EVENT_TYPE_UNSPECIFIED = "EVENT_TYPE_UNSPECIFIED"
    PERFORMANCE_DEGRADATION = "PERFORMANCE_DEGRADATION"
    HANG = "HANG"
    INTERRUPTION = "INTERRUPTION"


class DetectionState(PrefixedEnum):
    DETECTION_STATE_UNSPECIFIED = "DETECTION_STATE_UNSPECIFIED"
    DETECTED = "DETECTED"
    NOT_DETECTED = "NOT_DETECTED"


class HealthStatus(PrefixedEnum):
    OPTIMAL = "OPTIMAL"
    NEEDS_ATTENTION = "NEEDS_ATTENTION"


class Priority(PrefixedEnum):
    P0 = "P0"
    P1 = "P1"
    P2 = "P2"


class FindingCategory(PrefixedEnum):
    INPUT_BOUND = "input_bound"
    DISPATCH_OVERHEAD = "dispatch_overhead"
    RECOMPILATION = "recompilation"
    MEMORY = "memory"
    COMPUTE = "compute"
    COMMUNICATION = "communication"
    COMPILER = "compiler"
    DATA_MOVEMENT = "data_movement"
    KERNEL = "kernel"
    OTHER = "other"

    @classmethod
    def _missing_(cls, value: object) -> FindingCategory | None:
        return cls._value2member_map_.get(str(value).strip().lower().replace("-", "_"))  # type: ignore[return-value]


# State machines: for each field, the moves a value may make. Staying put is always allowed.
TERMINAL_RUN_PHASES = frozenset({RunPhase.COMPLETED, RunPhase.FAILED})
# An ended run becomes ACTIVE again when its workload starts once more (the SDK registers the same
# run id for the same name); it never turns from one outcome into the other.
RUN_PHASE_MOVES: dict[RunPhase, set[RunPhase]] = {
    RunPhase.RUN_PHASE_UNSPECIFIED: set(RunPhase),
    RunPhase.ACTIVE: set(TERMINAL_RUN_PHASES),
    RunPhase.COMPLETED: {RunPhase.ACTIVE},
    RunPhase.FAILED: {RunPhase.ACTIVE},
}
SESSION_PHASE_MOVES: dict[SessionPhase, set[SessionPhase]] = {
    SessionPhase.SESSION_PHASE_UNSPECIFIED: set(SessionPhase),
    SessionPhase.ACTIVE: {SessionPhase.SUCCEEDED, SessionPhase.FAILED},
    SessionPhase.SUCCEEDED: set(),
    SessionPhase.FAILED: set(),
}
ANALYSIS_MOVES: dict[AnalysisState, set[AnalysisState]] = {
    AnalysisState.NOT_STARTED: {AnalysisState.PENDING},
    AnalysisState.PENDING: {AnalysisState.RUNNING, AnalysisState.FAILED},
    AnalysisState.RUNNING: {AnalysisState.DONE, AnalysisState.FAILED, AnalysisState.PENDING},
    AnalysisState.DONE: {AnalysisState.PENDING},
    AnalysisState.FAILED: {AnalysisState.PENDING},
}


def check_move(field: str, moves: dict[Any, set[Any]], old: Any, new: Any) -> None:
    if old != new and new not in moves.get(old, set()):
        raise InvalidTransition(field, getattr(old, "value", old), getattr(new, "value", new))


# --- resources -----------------------------------------------------------------


class Resource(CamelModel):
    """Fields every stored resource has. ``name``, times and ``etag`` are set by the server."""

    collection: ClassVar[str]

    name: str = ""
    create_time: Timestamp = None
    update_time: Timestamp = None
    etag: str = ""

    def check_transition(self, previous: Resource) -> None:
        """Raise :class:`InvalidTransition` when ``previous`` → ``self`` is impossible."""

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """Validate JSON; errors become :class:`InvalidArgument` naming the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise invalid_argument(error) from None


class Artifacts(CamelModel):
    gcs_path: str = ""


class RunConfigs(CamelModel):
    user_configs: dict[str, Any] = Field(default_factory=dict)
    software_configs: dict[str, Any] = Field(default_factory=dict)
    hardware_configs: dict[str, Any] = Field(default_factory=dict)


class WorkloadDetails(CamelModel):
    """Where the run executes. The SDK fills one of gke/slurm/custom and ``targets``."""

    gke: dict[str, Any] | None = None
    slurm: dict[str, Any] | None = None
    custom: dict[str, Any] | None = None
    targets: list[dict[str, Any]] = Field(default_factory=list)


class ContinuousProfiling(CamelModel):
    """Continuous profiling of a run, while it is on: which targets, at which (fixed) device level.

    Server-owned: set by start-continuous-profiling, cleared by stop. Only the
    device tracer records; host and python tracers are off.
    """

    profiler_targets: list[str] = Field(default_factory=list)
    device_tracer_level: DeviceTracerLevel = DeviceTracerLevel.DEVICE_TRACER_LEVEL_ENABLED
    start_time: Timestamp = None
    operation: str = ""


class LatestAnalysis(CamelModel):
    """The outcome of the run's newest analysed session, kept on the run so that its list shows it.

    Server-owned: written in the transaction that records a completed analysis,
    for the newest session (by creation) that has one.
    """

    profiler_session: str = ""
    session_create_time: Timestamp = None
    end_time: Timestamp = None
    health: HealthStatus | None = None
    step_time_ms: float | None = None
    top_finding: str = ""


class MachineLearningRun(Resource):
    collection: ClassVar[str] = "machineLearningRuns"

    display_name: str = ""
    run_set: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    configs: RunConfigs = Field(default_factory=RunConfigs)
    tools: list[dict[str, dict[str, Any]]] = Field(default_factory=list)
    artifacts: Artifacts = Field(default_factory=Artifacts)
    orchestrator: Orchestrator = Orchestrator.ORCHESTRATOR_UNSPECIFIED
    workload_details: WorkloadDetails = Field(default_factory=WorkloadDetails)
    run_phase: RunPhase = RunPhase.ACTIVE
    state: ResourceState = ResourceState.ACTIVE
    end_time: Timestamp = None
    # Set by the official SDK in self-hosted mode.
    logical_id: str = ""
    cluster_id: str = ""
    creator: str = ""
    # Set while continuous profiling is on (one per run).
    continuous_profiling: ContinuousProfiling | None = None
    latest_analysis: LatestAnalysis | None = None
    # Server-owned: how often the run became ACTIVE again after it had ended, and when it last did.
    restart_count: int = 0
    last_restart_time: Timestamp = None
    # Server-owned: the credential that registered the run through the SDK's routes (see mldiag.entrypoints.http.auth).
    registered_by: str = ""

    @property
    def id(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def ended(self) -> bool:
        """COMPLETED or FAILED: its workload is gone, so its profiler targets can no longer be captured."""
        return self.run_phase in TERMINAL_RUN_PHASES

    def restart(self, now: datetime) -> None:
        """The ended run's workload started again: ACTIVE once more, with no end time yet."""
        self.run_phase = RunPhase.ACTIVE
        self.end_time = None
        self.restart_count += 1
        self.last_restart_time = now

    def check_transition(self, previous: Resource) -> None:
        assert isinstance(previous, MachineLearningRun)
        check_move("runPhase", RUN_PHASE_MOVES, previous.run_phase, self.run_phase)

    def record_analysis(self, session: ProfilerSession) -> None:
        """Let ``latest_analysis`` show ``session``'s completed analysis, unless a newer session's is shown."""
        latest = self.latest_analysis
        newer_shown = (latest is not None and latest.profiler_session != session.name
                       and latest.session_create_time is not None and session.create_time is not None
                       and session.create_time < latest.session_create_time)
        if newer_shown:
            return
        analysis = session.analysis
        self.latest_analysis = LatestAnalysis(
            profiler_session=session.name, session_create_time=session.create_time, end_time=analysis.end_time,
            health=analysis.health, step_time_ms=analysis.step_time_ms, top_finding=analysis.top_finding,
        )

    def session_folder(self, session_id: str) -> str:
        """``<gcsPath>/<run>/plugins/profile/<session>``: where XProf expects the session."""
        if not self.artifacts.gcs_path:
            raise InvalidArgument("the run has no artifacts.gcsPath to store profiles in", field="artifacts.gcsPath")
        return f"{self.artifacts.gcs_path.rstrip('/')}/{self.id}/plugins/profile/{session_id}"


class ProfilerTarget(Resource):
    collection: ClassVar[str] = "profilerTargets"

    hostname: str = ""
    node_index: int = 0
    is_master: bool = False
    profiler_address: str = ""
    state: TargetState = TargetState.ACTIVE
    last_heartbeat_time: Timestamp = None
    # The node agent that captures this target on its own host; empty: the capture function connects directly.
    agent: str = ""

    @staticmethod
    def default_id(hostname: str, node_index: int) -> str:
        return f"{hostname}-{node_index}"


class TargetSession(CamelModel):
    """One target's part of a session."""

    start_time: Timestamp = None
    end_time: Timestamp = None
    session_phase: SessionPhase = SessionPhase.ACTIVE
    error: str = ""


class HostFile(CamelModel):
    """A profile file of the session as found in the bucket."""

    uri: str
    size_bytes: int = 0
    generation: str = ""


class Finding(CamelModel):
    """One prioritised, evidence-backed problem in a profile."""

    priority: Priority
    category: FindingCategory
    title: str
    what: str
    evidence: list[str] = Field(default_factory=list)
    impact: str = ""
    fix: str = ""


class AnalysisStatus(CamelModel):
    """Where the analysis of a session stands, and where its report lives."""

    state: AnalysisState = AnalysisState.NOT_STARTED
    health: HealthStatus | None = None
    reasoner: str = ""
    report_uri: str = ""
    analysis_uri: str = ""
    error: str = ""
    attempts: int = 0
    generation_set: str = ""
    start_time: Timestamp = None
    end_time: Timestamp = None
    top_finding: str = ""
    step_time_ms: float | None = None  # the report's key metric


def phase_of_targets(phases: Iterable[str]) -> SessionPhase:
    """A session's phase, from its targets' (as members or as stored): ACTIVE while any is (or there are none),
    FAILED only if all failed."""
    seen = set(phases)
    if not seen or SessionPhase.ACTIVE in seen:
        return SessionPhase.ACTIVE
    if seen == {SessionPhase.FAILED}:
        return SessionPhase.FAILED
    return SessionPhase.SUCCEEDED


class ProfilerSession(Resource):
    collection: ClassVar[str] = "profilerSessions"
    MAX_EARLIER_ANALYSES: ClassVar[int] = 50

    kind: Kind = Kind.KIND_UNSPECIFIED
    profiler_targets: list[str] = Field(default_factory=list)
    target_sessions: dict[str, TargetSession] = Field(default_factory=dict)
    duration: Duration = timedelta(0)
    host_tracer_level: HostTracerLevel = HostTracerLevel.HOST_TRACER_LEVEL_INFO
    device_tracer_level: DeviceTracerLevel = DeviceTracerLevel.DEVICE_TRACER_LEVEL_ENABLED
    python_tracer_level: PythonTracerLevel = PythonTracerLevel.PYTHON_TRACER_LEVEL_DISABLED
    storage_folder_uri: str = ""
    dashboard_uri: str = ""
    auto_captured: bool = False
    monitored_events: list[str] = Field(default_factory=list)
    host_files: dict[str, HostFile] = Field(default_factory=dict)
    extra_files: dict[str, HostFile] = Field(default_factory=dict)
    analysis: AnalysisStatus = Field(default_factory=AnalysisStatus)
    # Finished analyses of files the session held before (a rerun overwrote them), newest first.
    earlier_analyses: list[AnalysisStatus] = Field(default_factory=list)
    # Registration bookkeeping: when the newest host file arrived, and when the
    # session counts as settled (no newer file) unless analysis was already requested.
    last_file_time: Timestamp = None
    settle_after: Timestamp = None

    def generation_set(self) -> str:
        """A fingerprint of the host files (names and generations) the session holds now."""
        parts = sorted(f"{host}@{f.generation}" for host, f in self.host_files.items())
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16] if parts else ""

    def keep_earlier_analysis(self) -> None:
        """Before the session's current files are analysed: keep the finished analysis of earlier files.

        Nothing changes when the analysis is of the current files already or never finished; the
        latest ``MAX_EARLIER_ANALYSES`` stay listed.
        """
        finished = self.analysis
        if finished.generation_set == self.generation_set() or finished.state not in (
                AnalysisState.DONE, AnalysisState.FAILED):
            return
        self.earlier_analyses = [finished, *self.earlier_analyses][:self.MAX_EARLIER_ANALYSES]
        self.analysis = AnalysisStatus()

    def earlier_analysis(self, generation_set: str) -> AnalysisStatus | None:
        return next((kept for kept in self.earlier_analyses if kept.generation_set == generation_set), None)

    @property
    def id(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @model_validator(mode="before")
    @classmethod
    def _ignore_output_only(cls, data: Any) -> Any:
        """``sessionPhase`` is derived: a client's (or a stored) value is dropped, never validated against."""
        if isinstance(data, dict) and ("sessionPhase" in data or "session_phase" in data):
            return {k: v for k, v in data.items() if k not in ("sessionPhase", "session_phase")}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def session_phase(self) -> SessionPhase:
        """The session's phase follows its targets (:func:`phase_of_targets`)."""
        return phase_of_targets(t.session_phase for t in self.target_sessions.values())

    @property
    def capture_failed(self) -> bool:
        """Every target failed and no profile arrived: there is nothing to open or analyse."""
        return self.session_phase is SessionPhase.FAILED and not self.host_files

    @property
    def capture_error(self) -> str:
        """Why the targets failed, each named (``worker-0: unreachable ...``)."""
        errors = [f"{target}: {part.error}" for target, part in sorted(self.target_sessions.items()) if part.error]
        return "; ".join(errors) or "no target wrote a profile"

    def check_transition(self, previous: Resource) -> None:
        assert isinstance(previous, ProfilerSession)
        for target, before in previous.target_sessions.items():
            after = self.target_sessions.get(target)
            if after is not None:
                check_move(f"targetSessions.{target}.sessionPhase", SESSION_PHASE_MOVES,
                           before.session_phase, after.session_phase)
        check_move("analysis.state", ANALYSIS_MOVES, previous.analysis.state, self.analysis.state)


class RecommendedAction(CamelModel):
    description: str
    documentation_url: str = ""


class AnalyzerReport(CamelModel):
    analyzer: str
    detection_state: DetectionState = DetectionState.DETECTED
    details: str = ""
    recommended_actions: list[RecommendedAction] = Field(default_factory=list)


class Suppression(CamelModel):
    """An alert that did not lead to a capture, and why."""

    time: Timestamp = None
    reason: str
    alert: str = ""


class MonitoredEvent(Resource):
    collection: ClassVar[str] = "monitoredEvents"
    MAX_SUPPRESSIONS_KEPT: ClassVar[int] = 50

    type: EventType = EventType.PERFORMANCE_DEGRADATION
    display_name: str = ""
    start_time: Timestamp = None
    end_time: Timestamp = None
    targets: list[str] = Field(default_factory=list)
    analyzer_reports: list[AnalyzerReport] = Field(default_factory=list)
    profiler_sessions: list[str] = Field(default_factory=list)
    # Every suppressed trigger is counted; the latest ones are kept with their reasons.
    suppressed_count: int = 0
    suppressions: list[Suppression] = Field(default_factory=list)

    def suppress(self, suppression: Suppression) -> None:
        self.suppressed_count += 1
        self.suppressions = [*self.suppressions, suppression][-self.MAX_SUPPRESSIONS_KEPT:]

    @property
    def ongoing(self) -> bool:
        return self.end_time is None

    def check_transition(self, previous: Resource) -> None:
        assert isinstance(previous, MonitoredEvent)
        if previous.end_time is not None and self.end_time is None:
            raise InvalidTransition("endTime", "ended", "ongoing")


class Status(CamelModel):
    """``google.rpc.Status``."""

    code: int
    message: str
    details: list[dict[str, Any]] = Field(default_factory=list)


class OperationMetadata(CamelModel):
    create_time: Timestamp = None
    end_time: Timestamp = None
    target: str = ""
    verb: str = ""
    api_version: str = "v1alpha"


class Operation(Resource):
    """A long-running operation: ``projects/P/locations/L/operations/O``."""

    collection: ClassVar[str] = "operations"

    metadata: OperationMetadata = Field(default_factory=OperationMetadata)
    done: bool = False
    error: Status | None = None
    response: dict[str, Any] | None = None

    def check_transition(self, previous: Resource) -> None:
        assert isinstance(previous, Operation)
        if previous.done and not self.done:
            raise InvalidTransition("done", True, False)


RESOURCE_TYPES: tuple[type[Resource], ...] = (
    MachineLearningRun, ProfilerTarget, ProfilerSession, MonitoredEvent, Operation,
)
