"""``summary.html``: the analysis as one self-contained page, and ``analysis.json`` beside it.

The page is rendered by Jinja2 with autoescaping from
``templates/summary.html.j2``: inline CSS, charts drawn as inline SVG from
geometry computed here, no script, no font, no image and no request to anywhere
(a Content-Security-Policy says so to the browser too). Every string that came
from the profile or from a model is text to Jinja, so markup in an op name is
shown, never run. The only links are the session in the XProf viewer (http or
https only) and ``analysis.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined

from mldiag.analysis.evidence import Analysis, Followup, ToolResult, ToolStatus
from mldiag.analysis.host_evidence import Distribution, HostActivity, HostEvidence, TimeCause
from mldiag.analysis.rules.analyst import size
from mldiag.domain.resources import HealthStatus

ANALYSIS_FILE = "analysis.json"
SUMMARY_FILE = "summary.html"
CHART_WIDTH = 640
STEP_CHART_HEIGHT = 200
TOP_OPS = 10
BAR_HEIGHT = 22
LABEL_CHARS = 44
LABEL_SHARE, VALUE_SHARE = 0.45, 0.2  # of the top-ops chart's width, for op names and values
MAX_CHART_HOSTS = 4
ROOFLINE_FIELDS = 14
MAX_TIME_PARTS = 12  # the largest parts of an attribution drawn one by one; the rest as one segment
MIN_UNATTRIBUTED = 0.005  # of the loop: a shortfall of the parts this large is drawn, smaller ones are rounding
CAUSE_WORDS = {
    TimeCause.DEVICE_COMPUTE: "device compute",
    TimeCause.COLLECTIVES: "collectives",
    TimeCause.TRANSFERS: "host-device transfers",
    TimeCause.COMPILATION: "compilation",
    TimeCause.DISPATCH: "dispatch",
    TimeCause.HOST_WORK: "host work",
    TimeCause.WAITING: "waiting",
    TimeCause.INTERPRETER: "waiting for the interpreter",
    TimeCause.UNTRACED: "untraced",
}


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str
    partial: bool = False  # part of a step only: drawn faint


@dataclass(frozen=True)
class StepChart:
    host: str
    busy: list[Bar]
    idle: list[Bar]
    gaps: list[Bar]  # the host's time between a step and the next, stacked on the step
    top_ms: float
    steps: int
    truncated: bool
    last_partial: bool
    width: int = CHART_WIDTH
    height: int = STEP_CHART_HEIGHT


@dataclass(frozen=True)
class OpBar:
    label: str
    name: str
    width: float
    y: float
    value: str


@dataclass(frozen=True)
class OpsChart:
    host: str
    bars: list[OpBar]
    width: int = CHART_WIDTH
    label_x: float = CHART_WIDTH * LABEL_SHARE

    @property
    def height(self) -> int:
        return len(self.bars) * BAR_HEIGHT + 8


@dataclass(frozen=True)
class TimeSegment:
    """One part of the loop's time as a segment of the bar and a row of its legend."""

    kind: str  # the cause's value, or "other" / "unattributed": the segment's CSS class
    words: str
    name: str
    thread: str
    ms: float
    share: float
    width: float  # percent of the bar
    useful: bool = False
    step_share: Distribution | None = None  # its share of each step, over the steps


@dataclass(frozen=True)
class AttributionChart:
    host: str
    loop_ms: float
    steps: int
    segments: list[TimeSegment]

    @property
    def useful_share(self) -> float:
        return sum(segment.share for segment in self.segments if segment.useful)

    @property
    def description(self) -> str:
        """The bar in words, for a reader that cannot see it."""
        return "; ".join(f"{segment.words}{f' {segment.name}' if segment.name else ''}: {segment.share:.1%}"
                         for segment in self.segments)


def _attribution_chart(host: HostEvidence) -> AttributionChart | None:
    """Where the loop's time went on ``host``: its largest parts, the rest together, and any shortfall."""
    attribution = host.attribution
    if attribution is None or not attribution.parts or attribution.loop_ms <= 0:
        return None
    total = sum(part.share for part in attribution.parts)
    scale = 100 / max(total, 1.0)  # parts that overlap past the whole still fit the bar
    segments = [TimeSegment(kind=part.cause.value, words=CAUSE_WORDS[part.cause], name=part.name, thread=part.thread,
                            ms=part.ms, share=part.share, width=part.share * scale, useful=part.useful,
                            step_share=part.step_share)
                for part in attribution.parts[:MAX_TIME_PARTS]]
    rest = attribution.parts[MAX_TIME_PARTS:]
    if rest:
        share = sum(part.share for part in rest)
        segments.append(TimeSegment(kind="other", words=f"{len(rest)} smaller parts", name="", thread="",
                                    ms=sum(part.ms for part in rest), share=share, width=share * scale))
    if 1 - total >= MIN_UNATTRIBUTED:
        segments.append(TimeSegment(kind="unattributed", words="not attributed", name="", thread="",
                                    ms=(1 - total) * attribution.loop_ms, share=1 - total, width=(1 - total) * 100))
    return AttributionChart(host.host, attribution.loop_ms, attribution.steps, segments)


def _step_chart(host: HostEvidence) -> StepChart | None:
    """Each step as a bar: busy at the bottom, idle above it, then the host's gap before the next step; a last step
    that is only part of one is drawn faint and labelled so."""
    steps = host.series.step_ms
    if len(steps) < 2:
        return None
    busy = host.series.busy_fraction or [0.0] * len(steps)
    gaps_after = [*host.series.gap_before_ms[1:len(steps)], 0.0]
    top = max(ms + gap for ms, gap in zip(steps, gaps_after)) or 1.0
    slot = CHART_WIDTH / len(steps)
    width = max(slot * 0.8, 0.5)
    scale = (STEP_CHART_HEIGHT - 4) / top
    last_partial = host.series.last_partial and not host.series.truncated
    busy_bars, idle_bars, gap_bars = [], [], []
    for index, (ms, fraction, gap) in enumerate(zip(steps, busy, gaps_after)):
        busy_ms = ms * fraction
        partial = last_partial and index == len(steps) - 1
        title = (f"step {index + 1} (partial): {ms:.2f} ms, busy {fraction:.0%}; the capture ends with this run's "
                 "device work, before a next step starts, so the step's whole length is not known"
                 if partial else f"step {index + 1}: {ms:.2f} ms, busy {fraction:.0%}")
        x = index * slot + (slot - width) / 2
        busy_bars.append(Bar(x, STEP_CHART_HEIGHT - busy_ms * scale, width, busy_ms * scale, title, partial))
        idle_bars.append(Bar(x, STEP_CHART_HEIGHT - ms * scale, width, (ms - busy_ms) * scale, title, partial))
        if gap > 0:
            gap_bars.append(Bar(x, STEP_CHART_HEIGHT - (ms + gap) * scale, width, gap * scale,
                                f"between steps {index + 1} and {index + 2}: {gap:.2f} ms on the host"))
    return StepChart(host.host, busy_bars, idle_bars, gap_bars, top, len(steps), host.series.truncated,
                     last_partial)


def _ops_chart(host: HostEvidence) -> OpsChart | None:
    ops = host.top_ops[:TOP_OPS]
    if not ops:
        return None
    top = max(op.self_ms_per_step for op in ops) or 1.0
    room = CHART_WIDTH * (1 - LABEL_SHARE - VALUE_SHARE)
    return OpsChart(host.host, [
        OpBar(label=op.name if len(op.name) <= LABEL_CHARS else op.name[:LABEL_CHARS - 1] + "…", name=op.name,
              width=max(op.self_ms_per_step / top * room, 1.0), y=index * BAR_HEIGHT + 4,
              value=f"{op.self_ms_per_step:.3f} ms ({op.share_of_busy:.0%})")
        for index, op in enumerate(ops)
    ])


def _host_rows(host: HostEvidence) -> list[HostActivity]:
    """The host's activities inside steps, then its dispatches that are not among them: a dispatch the step's
    code calls directly is a top-level activity too, the same events."""
    listed = {activity.name for activity in host.host_activities}
    return [*host.host_activities, *(call for call in host.dispatched if call.name not in listed)]


def _link(uri: str) -> str:
    """``uri`` when it is a web link; "" for anything else (``javascript:``, ``data:``, ``gs:``)."""
    return uri if urlsplit(uri).scheme in ("http", "https") and urlsplit(uri).netloc else ""


def _tool(analysis: Analysis, name: str) -> ToolResult | None:
    return next((tool for tool in analysis.tools if tool.name == name), None)


def _data(result: ToolResult | None) -> dict[str, Any]:
    ok = result is not None and result.status is ToolStatus.OK and isinstance(result.data, dict)
    return result.data if ok else {}


def _followups(analysis: Analysis, *tools: str) -> list[Followup]:
    return [f for f in analysis.followups if f.tool in tools]


def _sections(analysis: Analysis) -> dict[str, Any]:
    """What the detail sections show, picked from the tools' answers."""
    roofline = _tool(analysis, "get_roofline_model")
    program = _data(roofline).get("program") or {}
    op_profile = _tool(analysis, "get_hlo_op_profile")
    memory = _tool(analysis, "get_memory_profile")
    allocations = _data(_tool(analysis, "get_peak_allocations"))
    kpi = _data(_tool(analysis, "get_kpi_metrics"))
    return {
        "roofline": {"tool": roofline, "fields": list(program.items())[:ROOFLINE_FIELDS]},
        "memory": {"tool": memory, "profile": _data(memory),
                   "top_modules": ((allocations.get("summary") or {}).get("top_modules") or [])[:8]},
        "op_profile": {"tool": op_profile, "categories": (_data(op_profile).get("category_summary") or [])[:10]},
        "kernels": {"followups": _followups(analysis, "get_kernel_stats"),
                    "custom_call_share": kpi.get("custom_call_share_pct")},
        "llo": {"followups": _followups(analysis, "llo_load", "llo_query"),
                "tpu": any(host.device_kind.value == "tpu" for host in analysis.hosts)},
    }


def _rate(value: float, unit: str) -> str:
    """A rate with an SI prefix: ``840.8 TFLOP/s``, ``1.64 TB/s``."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _environment() -> Environment:
    environment = Environment(loader=PackageLoader("mldiag.analysis", "templates"), autoescape=True,
                              undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    environment.filters.update(
        ms=lambda value: "–" if value is None else f"{value:.2f} ms",
        percent=lambda value: "–" if value is None else f"{value:.1%}",
        bytes=lambda value: "–" if value is None else size(value),
        json=lambda value: json.dumps(value, ensure_ascii=False, sort_keys=True),
        flop_rate=lambda value, scale=1.0: "–" if value is None else _rate(value * scale, "FLOP/s"),
        byte_rate=lambda value: "–" if value is None else _rate(value, "B/s"),
    )
    return environment


def render_summary(analysis: Analysis, *, dashboard_uri: str = "", analysis_href: str = ANALYSIS_FILE) -> str:
    """The report page for ``analysis``; ``dashboard_uri`` opens the session in the XProf viewer."""
    hosts = analysis.hosts[:MAX_CHART_HOSTS]
    return _environment().get_template("summary.html.j2").render(
        a=analysis,
        attention=analysis.status is HealthStatus.NEEDS_ATTENTION,
        top_finding=analysis.findings[0] if analysis.findings else None,
        attribution_charts=[chart for chart in map(_attribution_chart, hosts) if chart is not None],
        step_charts=[chart for chart in map(_step_chart, hosts) if chart is not None],
        ops_charts=[chart for chart in map(_ops_chart, hosts) if chart is not None],
        sections=_sections(analysis),
        host_rows=_host_rows,
        dashboard_uri=_link(dashboard_uri),
        analysis_href=analysis_href,
    )


def write_reports(analysis: Analysis, out: Path, *, dashboard_uri: str = "") -> tuple[Path, Path]:
    """Write ``analysis.json`` and ``summary.html`` into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    data, page = out / ANALYSIS_FILE, out / SUMMARY_FILE
    data.write_text(json.dumps(analysis.to_json_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    page.write_text(render_summary(analysis, dashboard_uri=dashboard_uri), encoding="utf-8")
    return data, page
