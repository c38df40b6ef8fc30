"""The follow-up checks of an investigation: at most four, on arguments that name what the profile holds.

A reasoner (offline or Gemini) proposes a follow-up as a tool name and
arguments; :class:`FollowupTools` checks the proposal against the profile and
runs it with the XProf package's own implementation on the analysis's private
copy:

* ``get_hlo_neighborhood``: operands and users around an HLO instruction (what
  blocks fusion, what forces data movement), ``xprof.cli.internal.oss.hlo_tools``;
* ``aggregate_xplane_events``: count, mean, p90 and max of matching timeline
  events, grouped by event, plane (host or device) or line: XProf's answer
  (``xprof.cli.internal.oss.xplane_tools``), computed from the timelines the
  raw-event read saved (:mod:`mldiag.analysis.profile.timeline`) rather than by
  reading the profile again; XProf itself answers the few questions the
  timelines cannot answer exactly (TPU events, events named by a number)
  where the memory budget allows;
* ``get_kernel_stats``: device kernels by total time,
  ``xprof.cli.tools.get_kernel_stats_tool``;
* ``llo_load`` and ``llo_query``: XProf's LLO analysis of TPU custom kernels
  (``get_llo_analysis``, ``get_llo_static_analysis``); "not available" where
  the profile carries no LLO data.

Arguments are never passed through as written: an HLO module and instruction
must exist in the profile, events are named from the evidence or picked from
fixed families (the regular expressions are built here, escaped), and numbers
and choices are bounded. A proposal that fails these checks, or comes after the
fourth follow-up, is refused and recorded, never run.
"""

from __future__ import annotations

import importlib
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mldiag.analysis.evidence import Analysis, Followup, ToolStatus
from mldiag.analysis.profile.timeline import Timeline, aggregate_events
from mldiag.analysis.profile.trace_names import COMMUNICATION, COMPILE, DISPATCH_PREFIX, FAMILIES
from mldiag.analysis.rules.analyst import quoted
from mldiag.analysis.xprof.budget import OverBudget
from mldiag.analysis.xprof.xprof_tools import ToolContext

MAX_FOLLOWUPS = 4
MAX_OUTPUT_CHARS = 6000
MAX_WHY_CHARS = 300
MAX_NAME_CHARS = 400
MAX_EVENTS = 8
SHOWN = 3  # entries of a tool's answer quoted in what it showed
# Peak memory of one aggregation (measured with every event matching), in multiples of the saved timelines'
# size, and where XProf itself answers, of the profile's size (its reader holds the whole profile as objects).
TIMELINE_AGGREGATE_COST = 5
XPROF_AGGREGATE_COST = 37
EVENT_FAMILIES: dict[str, str] = {
    "jit_dispatch": "^" + re.escape(DISPATCH_PREFIX),
    "compilation": COMPILE.pattern,
    "collectives": COMMUNICATION.pattern,
    **{family: pattern.pattern for family, pattern in FAMILIES.items()},
}
LLO_MODES = ("list_ops", "region_tree", "bundle_util", "opcodes", "register_pressure", "spills", "bdi_stalls",
             "target_info")
_CASE_INSENSITIVE = frozenset({"collectives", *FAMILIES})
_NEIGHBOUR = re.compile(r"\[dist=(?P<dist>\d+)\]\s+\[[^\]]*\]\s+(?:ROOT\s+)?(?P<name>\S+)\s+=\s+(?P<shape>\S+)\s+"
                        r"(?P<opcode>[\w\-]+)\(")


class Refused(ValueError):
    """A follow-up that does not run: unknown tool, arguments naming nothing in the profile, or over the limit."""


@dataclass(frozen=True)
class Parameter:
    """One argument of a follow-up tool, as declared to the reasoner and checked on the way back."""

    name: str
    kind: type  # str, int or list (of str)
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()
    bounds: tuple[int, int] = (0, 0)
    default: Any = None


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: tuple[Parameter, ...]


_WHY = Parameter("why", str, "The hypothesis this check tests, in one sentence.", required=True)
TOOL_SPECS: dict[str, ToolSpec] = {spec.name: spec for spec in (
    ToolSpec("get_hlo_neighborhood",
             "Operands and users of one HLO instruction within a few steps: what blocks its fusion or forces a "
             "copy or a layout change.", (
                 Parameter("module", str, "An HLO module of this profile (from list_hlo_modules).", required=True),
                 Parameter("instruction", str, "An instruction of that module, e.g. a fusion or copy name.",
                           required=True),
                 Parameter("radius", int, "How many steps to walk from the instruction.", bounds=(1, 3), default=2),
                 _WHY)),
    ToolSpec("aggregate_xplane_events",
             "Count, mean, p90 and max duration of timeline events, by event name, by plane (host or device) or "
             "by line; for timeline delays and per-host or per-device skew. Give either events or family.", (
                 Parameter("events", list, "Event names exactly as the evidence quotes them (ops, host "
                                           "activities, dispatched programs, the step marker)."),
                 Parameter("family", str, "A fixed family of events instead of names.",
                           choices=tuple(EVENT_FAMILIES)),
                 Parameter("group_by", str, "How to group the events.", choices=("event", "plane", "line"),
                           default="event"),
                 _WHY)),
    ToolSpec("get_kernel_stats",
             "Device kernels (GPU kernels, TPU ops) by total time, with the custom-call share; empty on CPU "
             "profiles.", (
                 Parameter("kernel", str, "Only this op or kernel, named as the evidence quotes it."),
                 Parameter("limit", int, "How many kernels to list.", bounds=(1, 20), default=10),
                 _WHY)),
    ToolSpec("llo_load",
             "Load XProf's LLO analysis of the profile's TPU custom kernels (Pallas, Mosaic); says whether the "
             "profile has LLO data.", (_WHY,)),
    ToolSpec("llo_query",
             "Query the LLO static analysis of one op's kernel (after llo_load).", (
                 Parameter("mode", str, "What to show.", required=True, choices=LLO_MODES),
                 Parameter("hlo_op", str, "The op whose kernel to show, named as the evidence quotes it."),
                 _WHY)),
)}


def _clean_name(value: str) -> str:
    return value.strip().removeprefix("%")


@dataclass
class Catalogue:
    """What a proposal may name: the profile's HLO modules and their instructions, and its event names."""

    modules: dict[str, frozenset[str]]  # module -> instruction names
    events: frozenset[str]  # event names as the evidence quotes them

    @classmethod
    def of(cls, analysis: Analysis, context: ToolContext) -> Catalogue:
        modules = {module.name: frozenset(module.instructions) for module in context.hlo()}
        events = {issue.runs_as for issues in analysis.hlo_issues.values() for issue in issues}
        for host in analysis.hosts:
            events.update(item.name for item in (*host.top_ops, *host.host_activities, *host.between_steps,
                                                 *host.dispatched, *host.dispatch_origins, *host.programs))
            events.add(host.step_marker)
        return cls(modules, frozenset(events - {""}))

    def event(self, name: str) -> str:
        for candidate in (name, _clean_name(name)):
            if candidate in self.events:
                return candidate
        raise Refused(f"no event named {quoted(name[:MAX_NAME_CHARS])} in this profile's evidence")


def _checked(spec: ToolSpec, arguments: Mapping[str, Any], catalogue: Catalogue) -> dict[str, Any]:
    """The arguments with defaults filled in, each checked against its declaration and the profile."""
    if not isinstance(arguments, Mapping):
        raise Refused(f"{spec.name}: arguments must be an object")
    declared = {p.name: p for p in spec.parameters}
    unknown = sorted(set(arguments) - set(declared))
    if unknown:
        raise Refused(f"{spec.name}: unknown argument(s) {', '.join(quoted(a[:60]) for a in unknown[:5])}")
    checked: dict[str, Any] = {}
    for parameter in spec.parameters:
        value = arguments.get(parameter.name, parameter.default)
        if value is None or value == "" or value == []:
            if parameter.required:
                raise Refused(f"{spec.name}: {parameter.name} is required")
            continue
        checked[parameter.name] = _typed(spec.name, parameter, value)
    return _checked_against_profile(spec.name, checked, catalogue)


def _typed(tool: str, parameter: Parameter, value: Any) -> Any:
    where = f"{tool}: {parameter.name}"
    if parameter.kind is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        low, high = parameter.bounds
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise Refused(f"{where} must be a whole number from {low} to {high}")
        return value
    if parameter.kind is list:
        if not isinstance(value, list) or not value or len(value) > MAX_EVENTS:
            raise Refused(f"{where} must be a list of 1 to {MAX_EVENTS} names")
        if not all(isinstance(item, str) and 0 < len(item) <= MAX_NAME_CHARS for item in value):
            raise Refused(f"{where} must hold names of at most {MAX_NAME_CHARS} characters")
        return list(value)
    if not isinstance(value, str):
        raise Refused(f"{where} must be text")
    if parameter.choices and value not in parameter.choices:
        raise Refused(f"{where} must be one of {', '.join(parameter.choices)}")
    limit = MAX_WHY_CHARS if parameter is _WHY else MAX_NAME_CHARS
    if len(value) > limit:
        raise Refused(f"{where} is longer than {limit} characters")
    return value


def _checked_against_profile(tool: str, arguments: dict[str, Any], catalogue: Catalogue) -> dict[str, Any]:
    if tool == "get_hlo_neighborhood":
        module = arguments["module"]
        if module not in catalogue.modules:
            raise Refused(f"no HLO module {quoted(module)} in this profile")
        arguments["instruction"] = _clean_name(arguments["instruction"])
        if arguments["instruction"] not in catalogue.modules[module]:
            raise Refused(f"no instruction {quoted(arguments['instruction'])} in HLO module {quoted(module)}")
    elif tool == "aggregate_xplane_events":
        if ("events" in arguments) == ("family" in arguments):
            raise Refused("aggregate_xplane_events: give either events or family")
        if "events" in arguments:
            arguments["events"] = [catalogue.event(name) for name in arguments["events"]]
    elif tool in ("get_kernel_stats", "llo_query"):
        for key in ("kernel", "hlo_op"):
            if key in arguments:
                arguments[key] = catalogue.event(arguments[key])
    return arguments


# --- running the checks --------------------------------------------------------------------------


def _xprof(module: str, function: str) -> Callable[..., Any]:
    tool = getattr(importlib.import_module(module), function)
    return getattr(tool, "__wrapped__", tool)  # past XProf's on-disk result cache, as the 15 tools are


def events_regex(names: list[str]) -> str:
    """Exactly these events; a TPU op's event is its whole HLO line (``%fusion.3 = f32[...] fusion(...)``)."""
    alternatives = sorted({re.escape(_clean_name(name)) for name in names})
    return "^%?(?:" + "|".join(alternatives) + r")(?:\s+=.*)?$"


def _milliseconds(group: dict[str, Any], key: str) -> str:
    """A duration XProf gives in picoseconds, in milliseconds."""
    return f"{float(group.get(key) or 0) / 1e9:.3f} ms"


def _parsed(output: str) -> Any:
    try:
        return json.loads(output)
    except ValueError:
        return None


def _from_timelines(context: ToolContext, event_regex: str, group_by: str, approximate: bool = False) -> str | None:
    saved = sum(path.stat().st_size for path in context.timelines)
    with context.budget.reserve(TIMELINE_AGGREGATE_COST * saved, "aggregating the saved timelines"):
        return aggregate_events([Timeline.load(path) for path in context.timelines], event_regex, group_by,
                                approximate=approximate)


def _aggregate(context: ToolContext, arguments: dict[str, Any]) -> str:
    """XProf's answer from the saved timelines, or where they cannot give it exactly, XProf's own if the
    memory budget allows it, else the timelines' approximation."""
    family = arguments.get("family")
    event_regex = (("(?i)" if family in _CASE_INSENSITIVE else "")
                   + (EVENT_FAMILIES[family] if family else events_regex(arguments["events"])))
    group_by = arguments.get("group_by", "event")
    answer = _from_timelines(context, event_regex, group_by)
    if answer is not None:
        return answer
    try:
        with context.budget.reserve(XPROF_AGGREGATE_COST * context.profile_bytes, "XProf's event aggregation"):
            return _xprof("xprof.cli.internal.oss.xplane_tools", "aggregate_xplane_events")(
                context.session_id, event_regex=event_regex, group_by=group_by)
    except OverBudget:
        return _from_timelines(context, event_regex, group_by, approximate=True)


@dataclass
class Outcome:
    status: ToolStatus
    showed: str


def _aggregate_outcome(output: str, arguments: dict[str, Any]) -> Outcome:
    data = _parsed(output) or {}
    groups = sorted(data.get("aggregates") or [], key=lambda g: -float(g.get("total_duration_ps") or 0))
    if not groups:
        return Outcome(ToolStatus.NO_DATA, "no matching events in the timeline")
    key = arguments.get("group_by", "event")
    shown = [
        f"{key} {quoted(str(g.get(key, '?')))}: {g.get('count', 0)} events, "
        f"mean {_milliseconds(g, 'avg_duration_ps')}, p90 {_milliseconds(g, 'p90_duration_ps')}, "
        f"max {_milliseconds(g, 'max_duration_ps')}"
        for g in groups[:SHOWN]
    ]
    more = f" (and {len(groups) - SHOWN} more groups)" if len(groups) > SHOWN else ""
    return Outcome(ToolStatus.OK, "; ".join(shown) + more)


def _neighborhood_outcome(output: str, arguments: dict[str, Any]) -> Outcome:
    neighbours = [match.groupdict() for match in _NEIGHBOUR.finditer(output)]
    if not neighbours:
        return Outcome(ToolStatus.NO_DATA, output.strip().splitlines()[0][:200] if output.strip() else "empty result")
    blockers = output.count("FUSION_BLOCKER")
    shown = [f"{quoted(n['name'])} = {n['shape']} {n['opcode']} (distance {n['dist']})" for n in neighbours[:SHOWN + 1]]
    return Outcome(ToolStatus.OK, f"{len(neighbours)} instructions within {arguments.get('radius', 2)} steps of "
                                  f"{quoted(arguments['instruction'])}: " + "; ".join(shown)
                   + (f"; {blockers} marked as fusion blockers" if blockers else "; no fusion blockers flagged"))


def _kernel_name(record: dict[str, Any]) -> str:
    """XProf's short name, unless the kernel is a C++ one: there the short name is its first word ("void")."""
    short, whole = str(record.get("short_name") or ""), str(record.get("kernel_name") or "")
    return whole if whole and (not short or "::" in whole or "<" in whole) else short


def _kernel_outcome(output: str, arguments: dict[str, Any]) -> Outcome:
    data = _parsed(output)
    records = data.get("kernel_records") if isinstance(data, dict) else data
    if not records:
        reason = data.get("info") if isinstance(data, dict) else ""
        return Outcome(ToolStatus.NO_DATA, str(reason or "no device kernels in this profile"))
    shown = [
        f"{quoted(_kernel_name(r))}: {r.get('execution_count', 0)} runs, "
        f"{float(r.get('total_duration_us') or 0) / 1e3:.3f} ms in total, "
        f"mean {float(r.get('avg_duration_us') or 0):.1f} us"
        for r in records[:SHOWN]
    ]
    # The table's own custom-call share counts kernels named "custom-call" or "pallas" only, so library kernels
    # (cuBLAS, hipBLASLt, Transformer Engine) read as 0 %; the KPI's share, from the HLO, is the one quoted.
    return Outcome(ToolStatus.OK, "; ".join(shown))


def _llo_outcome(output: str, arguments: dict[str, Any]) -> Outcome:
    data = _parsed(output)
    if not isinstance(data, dict):
        return Outcome(ToolStatus.ERROR, "XProf's LLO analysis answered something that is not JSON")
    status = str(data.get("status", "")).upper()
    if status in ("UNAVAILABLE", "ERROR") or data.get("success") is False:
        reason = str(data.get("error") or data.get("message") or data.get("reason") or status)
        return Outcome(ToolStatus.NO_DATA, f"not available: {reason[:300]}")
    return Outcome(ToolStatus.OK, f"LLO analysis available ({len(data)} fields: {', '.join(sorted(data)[:8])})")


@dataclass(frozen=True)
class _Runner:
    call: Callable[[ToolContext, dict[str, Any]], Any]
    outcome: Callable[[str, dict[str, Any]], Outcome]


_RUNNERS: dict[str, _Runner] = {
    "get_hlo_neighborhood": _Runner(
        lambda context, args: _xprof("xprof.cli.internal.oss.hlo_tools", "get_hlo_neighborhood")(
            context.session_id, args["instruction"], radius=args.get("radius", 2), module_name=args["module"],
            detect_fusion_blockers=True),
        _neighborhood_outcome),
    "aggregate_xplane_events": _Runner(_aggregate, _aggregate_outcome),
    "get_kernel_stats": _Runner(
        lambda context, args: _xprof("xprof.cli.tools.get_kernel_stats_tool", "get_kernel_stats")(
            context.session_id, trace_matchers=(events_regex([args["kernel"]]),) if "kernel" in args else None,
            limit=args.get("limit", 10), include_summary=True),
        _kernel_outcome),
    "llo_load": _Runner(
        lambda context, args: _xprof("xprof.cli.tools.get_llo_analysis_tool", "get_llo_analysis")(
            context.session_id),
        _llo_outcome),
    "llo_query": _Runner(
        lambda context, args: _xprof("xprof.cli.tools.oss.llo_static_analysis_tool", "get_llo_static_analysis")(
            context.session_id, mode=args["mode"], hlo_op=_clean_name(args.get("hlo_op", ""))),
        _llo_outcome),
}
assert set(_RUNNERS) == set(TOOL_SPECS)


@dataclass
class FollowupTools:
    """The follow-ups of one investigation: checks proposals, runs at most ``limit``, records each."""

    context: ToolContext
    catalogue: Catalogue
    limit: int = MAX_FOLLOWUPS
    followups: list[Followup] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, analysis: Analysis, context: ToolContext, limit: int = MAX_FOLLOWUPS) -> FollowupTools:
        return cls(context, Catalogue.of(analysis, context), limit)

    @property
    def remaining(self) -> int:
        return self.limit - len(self.followups)

    def run(self, tool: str, arguments: Mapping[str, Any]) -> Followup:
        """Check and run one proposal; :class:`Refused` (and recorded) when it may not run."""
        try:
            if tool not in TOOL_SPECS:
                raise Refused(f"unknown tool {quoted(str(tool)[:60])}; the follow-up tools are "
                              + ", ".join(TOOL_SPECS))
            if self.remaining <= 0:
                raise Refused(f"{tool}: the limit of {self.limit} follow-ups is reached")
            checked = _checked(TOOL_SPECS[tool], arguments, self.catalogue)
        except Refused as refused:
            self.refused.append(str(refused))
            raise
        why = checked.pop("why")
        runner = _RUNNERS[tool]
        started = time.perf_counter()
        try:
            raw = runner.call(self.context, checked)
            output = raw if isinstance(raw, str) else json.dumps(raw)
            outcome = runner.outcome(output, checked)
        except Exception as error:  # noqa: BLE001 - a failed check is recorded, never fatal
            output = ""
            outcome = Outcome(ToolStatus.ERROR, f"{type(error).__name__}: {error}")
        followup = Followup(
            tool=tool, arguments=checked, why=why, status=outcome.status,
            showed=self.context.private_paths_hidden(outcome.showed)[:1000],
            seconds=round(time.perf_counter() - started, 3),
            output=self.context.private_paths_hidden(output)[:MAX_OUTPUT_CHARS],
        )
        self.followups.append(followup)
        return followup
