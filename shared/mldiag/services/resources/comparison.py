"""Two stored sessions compared: ``GET .../profilerSessions/S:compare`` and the console's side-by-side page.

Each session's latest finished analysis is read back from its ``analysis.json``
(only from under the session's own ``mldiag/`` folder, as the console serves
reports) and judged with :func:`mldiag.analysis.regression.judge`; what each side ran on comes with the verdict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from mldiag.analysis.evidence import Analysis
from mldiag.analysis.regression import Thresholds, Verdict, judge
from mldiag.domain.devices import ComparedHardware, compared_hardware
from mldiag.domain.errors import FailedPrecondition
from mldiag.domain.resources import AnalysisState
from mldiag.services.dependencies import Blobs, Stored


class ComparisonPorts(Stored, Blobs, Protocol):
    """What comparing sessions uses."""


MAX_ANALYSIS_BYTES = 32 * 1024 * 1024


def stored_analysis(services: ComparisonPorts, name: str) -> Analysis:
    """The session's latest finished analysis; FAILED_PRECONDITION when it has none."""
    session = services.sessions.get(name)
    uri = session.analysis.analysis_uri
    reports = f"{session.storage_folder_uri.rstrip('/')}/mldiag/"
    if session.analysis.state is not AnalysisState.DONE or not uri or not uri.startswith(reports):
        raise FailedPrecondition(f"{name} has no finished analysis to compare "
                                 f"(analysis {session.analysis.state.value})")
    try:
        return Analysis.model_validate_json(services.blobs.read_bytes(uri, max_bytes=MAX_ANALYSIS_BYTES))
    except ValidationError:
        raise FailedPrecondition(f"the analysis of {name} is not readable by this version of mldiag; "
                                 "analyse it again") from None


@dataclass(frozen=True)
class SessionComparison:
    verdict: Verdict
    hardware: ComparedHardware

    def to_json_dict(self) -> dict[str, Any]:
        """The verdict as ``mldiag compare`` reads it: with ``regressed`` and what each side ran on."""
        return {**self.verdict.model_dump(mode="json"), "regressed": self.verdict.regressed,
                "hardware": dataclasses.asdict(self.hardware)}


def compare_sessions(services: ComparisonPorts, baseline: str, candidate: str,
                     thresholds: Thresholds | None = None) -> SessionComparison:
    """The candidate session judged against the baseline session (full resource names)."""
    before, after = stored_analysis(services, baseline), stored_analysis(services, candidate)
    return SessionComparison(judge(before, after, baseline, candidate, thresholds),
                             compared_hardware(before.hosts, after.hosts))
