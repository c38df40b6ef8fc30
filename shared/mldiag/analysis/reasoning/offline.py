"""The offline reasoner: fixed hypotheses for each kind of finding, checked with the follow-up tools.

It needs no model and gives the same answer for the same profile. Each finding
of the deterministic analyst suggests one check, most severe finding first:

* input-bound: how long each call of the host work the finding cites takes, and
  how much it varies (``aggregate_xplane_events`` on those events);
* dispatch overhead: which programs are dispatched op by op, and what each
  dispatch costs (the ``jit_dispatch`` family);
* recompilation: which compilations run inside steps (the ``compilation`` family);
* communication: collectives per device, for skew (grouped by plane);
* compiler: the neighbourhood of the first instruction the finding cites
  (``get_hlo_neighborhood``): what it reads, what reads it;
* compute and kernel: device kernels by time (``get_kernel_stats``), and on TPUs
  the LLO analysis of custom kernels (``llo_load``);
* data movement on a device: the same kernel table, to rank the transposes,
  converts and copies among all kernels;
* anything else that cites events: those events' timing.

What a check shows is added to its finding's evidence; the findings keep their
rules' priorities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mldiag.analysis.evidence import Analysis, ToolStatus
from mldiag.analysis.host_evidence import DeviceKind
from mldiag.analysis.reasoning.followups import Catalogue, FollowupTools, Refused
from mldiag.analysis.reasoning.investigation import Conclusion
from mldiag.analysis.rules.analyst import quoted
from mldiag.domain.resources import Finding, FindingCategory

MAX_CITED_EVENTS = 4


@dataclass(frozen=True)
class Check:
    tool: str
    arguments: dict[str, Any]
    hypothesis: str
    finding: int | None = None  # the finding whose evidence it extends

    @property
    def key(self) -> str:
        return f"{self.tool}:{sorted(self.arguments.items())}"


def _cited_events(finding: Finding, catalogue: Catalogue) -> list[str]:
    text = " ".join(finding.evidence)
    return sorted((name for name in catalogue.events if quoted(name) in text), key=lambda name: text.find(quoted(name)))


def _cited_instruction(finding: Finding, analysis: Analysis, catalogue: Catalogue) -> tuple[str, str] | None:
    text = " ".join(finding.evidence)
    for issues in analysis.hlo_issues.values():
        for issue in issues:
            if quoted(issue.instruction) in text and quoted(issue.module) in text:
                instructions = catalogue.modules.get(issue.module, frozenset())
                for name in (issue.runs_as, issue.instruction):
                    if name in instructions:
                        return issue.module, name
    return None


def _devices(analysis: Analysis) -> set[DeviceKind]:
    return {host.device_kind for host in analysis.hosts}


def _checks_for(index: int, finding: Finding, analysis: Analysis, catalogue: Catalogue) -> list[Check]:
    category = finding.category
    cited = [name for name in _cited_events(finding, catalogue) if name not in
             {a.name for host in analysis.hosts for a in host.dispatched}][:MAX_CITED_EVENTS]
    on_device = bool(_devices(analysis) & {DeviceKind.GPU, DeviceKind.TPU})
    if category is FindingCategory.INPUT_BOUND and cited:
        return [Check("aggregate_xplane_events", {"events": cited},
                      "The idle time is host work inside each step: how long each call of it takes, and how "
                      "much that varies.", index)]
    if category is FindingCategory.DISPATCH_OVERHEAD:
        return [Check("aggregate_xplane_events", {"family": "jit_dispatch"},
                      "The host's launches set the pace: which programs are dispatched, how often, and what one "
                      "dispatch costs.", index)]
    if category is FindingCategory.RECOMPILATION:
        return [Check("aggregate_xplane_events", {"family": "compilation"},
                      "Programs are compiled inside the loop: which compilation stages run and how long they take.",
                      index)]
    if category is FindingCategory.COMMUNICATION:
        return [Check("aggregate_xplane_events", {"family": "collectives", "group_by": "plane"},
                      "Collectives hold up the step: whether some devices wait longer than others (skew).", index)]
    if category is FindingCategory.COMPILER and (site := _cited_instruction(finding, analysis, catalogue)):
        module, instruction = site
        return [Check("get_hlo_neighborhood", {"module": module, "instruction": instruction, "radius": 2},
                      "The pattern sits next to ops it could fuse with: what this instruction reads and what "
                      "reads it.", index)]
    if category is FindingCategory.DATA_MOVEMENT and on_device:
        return [Check("get_kernel_stats", {"limit": 10},
                      "Kernels that only move or re-type data hold the devices: how they rank among all kernels, "
                      "and how often each runs.", index)]
    if category in (FindingCategory.COMPUTE, FindingCategory.KERNEL) and on_device:
        checks = [Check("get_kernel_stats", {"limit": 10},
                        "A few device kernels hold most of the time: which ones, how often each runs and for how long.",
                        index)]
        if category is FindingCategory.KERNEL and DeviceKind.TPU in _devices(analysis):
            checks.append(Check("llo_load", {},
                                "Custom kernels dominate: whether the profile carries their LLO analysis.", index))
        return checks
    if category is FindingCategory.OTHER and cited:
        return [Check("aggregate_xplane_events", {"events": cited},
                      "The events the finding names: how long each call takes, and how much that varies.", index)]
    return []


@dataclass
class OfflineReasoner:
    """Deterministic: the same evidence always gives the same checks and the same conclusion."""

    name: str = "offline"

    def plan(self, analysis: Analysis, catalogue: Catalogue) -> list[Check]:
        planned: dict[str, Check] = {}
        for index, finding in enumerate(analysis.findings):
            for check in _checks_for(index, finding, analysis, catalogue):
                planned.setdefault(check.key, check)
        return list(planned.values())

    def investigate(self, analysis: Analysis, tools: FollowupTools) -> Conclusion:
        findings = [finding.model_copy(deep=True) for finding in analysis.findings]
        for check in self.plan(analysis, tools.catalogue):
            if tools.remaining <= 0:
                break
            try:
                followup = tools.run(check.tool, {**check.arguments, "why": check.hypothesis})
            except Refused:
                continue
            if check.finding is not None and followup.status is ToolStatus.OK:
                findings[check.finding].evidence.append(f"follow-up {check.tool}: {followup.showed}")
        return Conclusion(findings=findings)
