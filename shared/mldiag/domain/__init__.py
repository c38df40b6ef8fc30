"""The domain model: resources, names and errors. No cloud imports here."""

from mldiag.domain.errors import (
    Aborted, AlreadyExists, FailedPrecondition, InvalidArgument, InvalidTransition,
    MldiagError, NotFound, PermanentFailure,
)
from mldiag.domain.resources import (
    AnalysisState, AnalysisStatus, AnalyzerReport, Artifacts, DetectionState, DeviceTracerLevel,
    EventType, Finding, FindingCategory, HealthStatus, HostFile, HostTracerLevel, Kind,
    MachineLearningRun, MonitoredEvent, Operation, OperationMetadata, Orchestrator, Priority,
    PythonTracerLevel, RecommendedAction, Resource, ResourceState, RunConfigs, RunPhase,
    SessionPhase, Status, Suppression, TargetSession, TargetState, ProfilerSession, ProfilerTarget,
    WorkloadDetails,
)

__all__ = [name for name in dir() if not name.startswith("_")]
