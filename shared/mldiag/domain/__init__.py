"""The domain model: resources, names and errors. No cloud imports here.

Names are loaded on first use: importing :mod:`mldiag.domain.errors` alone (the
raw-event reader's process does) does not build every resource model.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {
    "mldiag.domain.errors": (
        "Aborted", "AlreadyExists", "FailedPrecondition", "InvalidArgument", "InvalidTransition",
        "MldiagError", "NotFound", "PermanentFailure",
    ),
    "mldiag.domain.resources": (
        "AnalysisState", "AnalysisStatus", "AnalyzerReport", "Artifacts", "DetectionState", "DeviceTracerLevel",
        "EventType", "Finding", "FindingCategory", "HealthStatus", "HostFile", "HostTracerLevel", "Kind",
        "LatestAnalysis", "MachineLearningRun", "MonitoredEvent", "Operation", "OperationMetadata", "Orchestrator",
        "Priority", "PythonTracerLevel", "RecommendedAction", "Resource", "ResourceState", "RunConfigs", "RunPhase",
        "SessionPhase", "Status", "Suppression", "TargetSession", "TargetState", "ProfilerSession",
        "ProfilerTarget", "WorkloadDetails",
    ),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
