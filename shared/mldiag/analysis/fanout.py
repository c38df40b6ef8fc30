"""A multi-host session analysed host by host: each host's evidence, and their merge into one analysis.

:func:`mldiag.analysis.engine.analyze_host` analyses one ``<host>.xplane.pb``
on its own and keeps what the session's analysis needs as a
:class:`HostAnalysis` (serialisable, written next to the session's report);
:func:`merge_hosts` turns the hosts' evidence into the session's
:class:`~mldiag.analysis.evidence.Analysis` with the same analyst that reads a
session analysed in one process.

What differs from one process: XProf's session-wide tools (overview, op
profile, roofline, memory, ...) ran on each host alone. The merge takes each
tool's result from the host that sets the pace, the one with the slowest step
(in a synchronous multi-host program every host waits for it), and the memory
tools' from the host with the highest peak; each result names its host.
Raw-event evidence, HLO issues, programs and kernels are kept from every host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import Field

from mldiag.analysis.evidence import Analysis, Evidence, HloIssue, HloProgram, ProfileInput, ToolResult, ToolStatus
from mldiag.analysis.host_evidence import HostEvidence
from mldiag.analysis.rules import analyst
from mldiag.analysis.xprof.hlo import KernelWork
from mldiag.domain.resources import HealthStatus

HOST_EVIDENCE_FOLDER = "hosts"  # beside the session's report: <report folder>/hosts/<host>.json
HOST_EVIDENCE_FILE = "host.json"  # what the worker writes for one host
MEMORY_TOOLS = frozenset({"get_memory_profile", "get_peak_allocations"})


class HostAnalysis(Evidence):
    """``<report folder>/hosts/<host>.json``: one host's evidence, and its verdict analysed alone."""

    host: str
    file: str
    bytes: int
    status: HealthStatus  # this host's own verdict
    step_time_ms: float | None = None
    peak_memory_bytes: int | None = None
    evidence: HostEvidence
    tools: list[ToolResult]
    hlo_issues: dict[str, list[HloIssue]] = Field(default_factory=dict)
    hlo_programs: list[HloProgram] = Field(default_factory=list)
    hlo_kernels: list[KernelWork] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    seconds: float = 0.0

    @classmethod
    def of(cls, alone: Analysis, hlo_kernels: list[KernelWork]) -> HostAnalysis:
        """The evidence of ``alone``, the analysis of one host file."""
        if len(alone.hosts) != 1:
            raise ValueError(f"a host's analysis reads one file, not {len(alone.hosts)}")
        evidence = alone.hosts[0]
        return cls(host=evidence.host, file=evidence.file, bytes=alone.profile.bytes, status=alone.status,
                   step_time_ms=alone.metrics.step_time_ms, peak_memory_bytes=alone.metrics.peak_memory_bytes,
                   evidence=evidence, tools=alone.tools, hlo_issues=alone.hlo_issues,
                   hlo_programs=alone.hlo_programs, hlo_kernels=hlo_kernels, versions=alone.versions,
                   seconds=alone.seconds)


def pace_host(parts: Iterable[HostAnalysis]) -> HostAnalysis:
    """The host with the slowest step (the first host when none has steps)."""
    ordered = sorted(parts, key=lambda part: part.host)
    return max(ordered, key=lambda part: -1.0 if part.step_time_ms is None else part.step_time_ms)


def _memory_host(parts: list[HostAnalysis]) -> HostAnalysis:
    return max(parts, key=lambda part: -1 if part.peak_memory_bytes is None else part.peak_memory_bytes)


def _tools(parts: list[HostAnalysis]) -> list[ToolResult]:
    """Each tool's result from the host it is taken from, or from the first host that has data for it."""
    pace, memory = pace_host(parts), _memory_host(parts)
    by_host = {part.host: {tool.name: tool for tool in part.tools} for part in parts}
    merged = []
    for name in dict.fromkeys(tool.name for part in parts for tool in part.tools):
        preferred = memory if name in MEMORY_TOOLS else pace
        candidates = [preferred, *(part for part in parts if part is not preferred)]
        found = [(part.host, by_host[part.host][name]) for part in candidates if name in by_host[part.host]]
        host, result = next(((h, r) for h, r in found if r.status is ToolStatus.OK), found[0])
        merged.append(result.model_copy(update={"host": host}))
    return merged


def _hlo_issues(parts: list[HostAnalysis]) -> dict[str, list[HloIssue]]:
    merged: dict[str, dict[tuple[str, str, str], HloIssue]] = {}
    for part in parts:
        for detector, issues in part.hlo_issues.items():
            seen = merged.setdefault(detector, {})
            for issue in issues:
                seen.setdefault((issue.module, issue.instruction, issue.detail), issue)
    return {detector: list(issues.values()) for detector, issues in merged.items()}


def merge_hosts(parts: list[HostAnalysis], *, source: str, session: str, missing: Mapping[str, str] | None = None,
                seconds: float = 0.0) -> Analysis:
    """The session's analysis from its hosts' evidence; ``missing`` names each host without evidence, and why."""
    if not parts:
        raise ValueError("no host's evidence to merge")
    parts = sorted(parts, key=lambda part: part.host)
    programs: dict[str, HloProgram] = {}
    kernels: dict[tuple[str, str], KernelWork] = {}
    for part in parts:  # the same program runs on every host: the first host's copy stands for it
        for program in part.hlo_programs:
            programs.setdefault(program.module, program)
        for kernel in part.hlo_kernels:
            kernels.setdefault((kernel.module, kernel.instruction), kernel)
    analysis = analyst.assess(
        hosts=[part.evidence for part in parts],
        tools=_tools(parts),
        hlo_issues=_hlo_issues(parts),
        hlo_programs=list(programs.values()),
        hlo_kernels=list(kernels.values()),
        profile=ProfileInput(source=source, session=session, files=[part.file for part in parts],
                             bytes=sum(part.bytes for part in parts)),
        versions=parts[0].versions,
        seconds=seconds,
    )
    analysis.missing_hosts = dict(sorted((missing or {}).items()))
    return analysis

