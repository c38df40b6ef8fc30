"""The focused investigation: a reasoner follows up on the evidence and concludes.

When the health snapshot is OPTIMAL the report needs no further calls. Otherwise
a reasoner (:class:`mldiag.ports.Reasoner`) forms hypotheses from the evidence, runs at most four
follow-up checks (:mod:`mldiag.analysis.reasoning.followups`) and concludes with
findings. Two reasoners share the protocol: the deterministic offline one
(:mod:`mldiag.analysis.reasoning.offline`, the default) and Gemini on Vertex AI
(:mod:`mldiag.adapters.reasoning.vertex`).

Whatever a model answers, the offline analyst's rules stay the floor:

* each model finding must hold up against the collected data
  (:mod:`mldiag.analysis.reasoning.validation`) or it is dropped, with the reason kept;
* in each category the offline analyst's findings stand unless the model has
  one at least as severe, so a model cannot talk a P0 away;
* the status comes from the health snapshot and the surviving findings, never
  from the model.

When the model fails (unreachable, slow, over its token budget, an unusable
answer) the offline reasoner finishes the investigation with the follow-ups
left, and the report says why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mldiag.analysis.evidence import Analysis, Investigation
from mldiag.analysis.reasoning.followups import FollowupTools
from mldiag.analysis.reasoning.validation import EvidenceIndex, why_summary_unsupported, why_unsupported
from mldiag.analysis.rules.analyst import decide_status, quoted
from mldiag.analysis.xprof.xprof_tools import ToolContext
from mldiag.domain.resources import Finding, FindingCategory, HealthStatus, Priority

if TYPE_CHECKING:
    from mldiag.ports import Reasoner

SEVERITY = {Priority.P0: 0, Priority.P1: 1, Priority.P2: 2}


@dataclass
class Conclusion:
    """What a reasoner concluded: findings, optionally a summary, and the hypotheses it checked."""

    findings: list[Finding]
    summary: str = ""
    hypotheses: list[str] = field(default_factory=list)
    model: str = ""
    tokens: int = 0


class ReasonerFailed(RuntimeError):
    """The reasoner gave no usable conclusion; the message says why, for the report."""

    def __init__(self, reason: str, tokens: int = 0):
        super().__init__(reason)
        self.tokens = tokens  # what the attempt cost


def merge_findings(baseline: list[Finding], proposed: list[Finding], dropped: list[str]) -> list[Finding]:
    """The model's findings, and the baseline's wherever the model has nothing at least as severe."""
    def worst(findings: list[Finding], category: FindingCategory) -> int:
        return min((SEVERITY[f.priority] for f in findings if f.category is category), default=len(SEVERITY))

    kept = []
    for category in dict.fromkeys(f.category for f in proposed):
        ours = [f for f in proposed if f.category is category]
        if worst(ours, category) <= worst(baseline, category):
            kept.extend(ours)
        else:
            dropped.extend(f"{f.priority.value} {quoted(f.title)}: less severe than the evidence-based rule's "
                           f"{category.value} finding, which stands" for f in ours)
    covered = {f.category for f in kept}
    kept.extend(f for f in baseline if f.category not in covered)
    return sorted(kept, key=lambda f: SEVERITY[f.priority])


def accept(analysis: Analysis, conclusion: Conclusion, tools: FollowupTools, investigation: Investigation) -> None:
    """Fold a model's conclusion into ``analysis``: validated findings and summary, the floor kept."""
    index = EvidenceIndex(analysis, tools.followups)
    supported = []
    for finding in conclusion.findings:
        reason = why_unsupported(finding, index)
        if reason:
            investigation.dropped.append(f"{finding.priority.value} {quoted(finding.title)}: {reason}")
        else:
            supported.append(finding)
    analysis.findings = merge_findings(analysis.findings, supported, investigation.dropped)
    if conclusion.summary:
        reason = why_summary_unsupported(conclusion.summary, index)
        if reason:
            investigation.dropped.append(f"summary: {reason}")
        else:
            analysis.summary = conclusion.summary
    analysis.status = decide_status(analysis.health, analysis.findings)


@dataclass
class Investigator:
    """The engine's ``investigate`` step: run ``reasoner``, fall back to ``offline``, record it all."""

    reasoner: Reasoner
    offline: Reasoner

    def __call__(self, analysis: Analysis, context: ToolContext) -> Analysis:
        started = time.perf_counter()
        if analysis.status is HealthStatus.OPTIMAL:
            analysis.investigation = Investigation(
                reasoner=self.reasoner.name, note="The health snapshot is OPTIMAL: no follow-up checks were needed.")
            return analysis
        tools = FollowupTools.of(analysis, context)
        investigation = Investigation(reasoner=self.reasoner.name)
        try:
            conclusion = self.reasoner.investigate(analysis, tools)
        except Exception as error:  # noqa: BLE001 - any failure of the model falls back to the offline rules
            failed = isinstance(error, ReasonerFailed)
            investigation.fallback_reason = str(error) if failed else f"{type(error).__name__}: {error}"
            investigation.tokens = error.tokens if failed else 0
            investigation.reasoner = self.offline.name
            conclusion = self.offline.investigate(analysis, tools)
        investigation.model = conclusion.model
        investigation.tokens += conclusion.tokens
        investigation.hypotheses = [f.why for f in tools.followups] or conclusion.hypotheses
        if investigation.reasoner == self.offline.name:
            analysis.findings = conclusion.findings
        else:
            accept(analysis, conclusion, tools, investigation)
        investigation.refused = tools.refused
        investigation.seconds = round(time.perf_counter() - started, 3)
        analysis.followups = tools.followups
        analysis.investigation = investigation
        return analysis
