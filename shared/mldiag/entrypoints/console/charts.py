"""The console's server-side SVG charts, as geometry: a run's step time across its sessions, and the fleet's lost time.

The console renders it server-side (``console/_step_chart.html``, no script):
one point per analysed session, oldest first, at its step time, coloured by the
health its analysis found; the x axis names when the first, middle and last
sessions were created, the y axis is in milliseconds per step. Only numbers and enum words come out of here;
session ids reach the page through Jinja's autoescape.

The fleet page (``console/fleet.html``) ranks runs by the accelerator time they
lost over a window, each with a bar as long as its loss against the largest,
split by cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from mldiag.domain.resources import AnalysisState, ProfilerSession
from mldiag.entrypoints.console.formatting import state_class

WIDTH, HEIGHT = 640, 160
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 24, 12, 36
EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class ChartPoint:
    session: str
    x: float
    y: float
    step_time_ms: float
    health: str  # a CSS-safe word: optimal, needs-attention, ...
    created: str  # when the session was created, "12-05 19:37" (UTC)


@dataclass(frozen=True)
class StepTimeChart:
    points: list[ChartPoint]
    top_ms: float  # the step time at the top of the plot area
    width: int = WIDTH
    height: int = HEIGHT
    left: int = MARGIN_LEFT
    top: int = MARGIN_TOP
    bottom: int = HEIGHT - MARGIN_BOTTOM

    @property
    def x_labels(self) -> list[ChartPoint]:
        """The points whose creation time labels the x axis: the first, the middle one and the last."""
        chosen = sorted({0, (len(self.points) - 1) // 2, len(self.points) - 1})
        return [self.points[index] for index in chosen if self.points[index].created]

    @property
    def line(self) -> str:
        """The points of the SVG polyline joining the sessions in order."""
        return " ".join(f"{point.x:.1f},{point.y:.1f}" for point in self.points)


def step_time_chart(sessions: Sequence[ProfilerSession]) -> StepTimeChart | None:
    """The chart of the sessions whose analysis finished with a step time, oldest first; None for fewer than 2."""
    analysed = sorted((session for session in sessions if session.analysis.state is AnalysisState.DONE
                       and session.analysis.step_time_ms is not None),
                      key=lambda session: session.create_time or EARLIEST)
    if len(analysed) < 2:
        return None
    top_ms = max(session.analysis.step_time_ms or 0.0 for session in analysed) * 1.1 or 1.0
    plot_width = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_height = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    points = []
    for index, session in enumerate(analysed):
        step_ms = session.analysis.step_time_ms or 0.0
        points.append(ChartPoint(
            session=session.id,
            x=MARGIN_LEFT + plot_width * index / (len(analysed) - 1),
            y=MARGIN_TOP + plot_height * (1 - step_ms / top_ms),
            step_time_ms=step_ms,
            health=state_class(session.analysis.health) or "unknown",
            created=session.create_time.astimezone(timezone.utc).strftime("%m-%d %H:%M") if session.create_time else "",
        ))
    return StepTimeChart(points=points, top_ms=top_ms)


# --- the fleet page: runs ranked by the accelerator time they lost, each bar split by cause ---------

BAR_WIDTH, BAR_HEIGHT = 240, 14


@dataclass(frozen=True)
class CauseSegment:
    cause: str  # a TimeCause value other than device_compute: a CSS-safe word
    device_ms: float
    x: float
    width: float


@dataclass(frozen=True)
class RankedRun:
    run_id: str
    display_name: str
    analyses: int
    lost_device_ms: float
    lost_share: float | None
    causes: dict[str, float]  # cause -> accelerator ms lost to it
    segments: list[CauseSegment]  # the bar: as long as the run's loss against the largest, split by cause
    latest_session_id: str
    latest_analyzed_at: str
    trend: float | None = None  # the newest analysis's lost share less the oldest's, with two analyses or more


@dataclass(frozen=True)
class FleetRanking:
    runs: list[RankedRun]
    causes: list[str]  # the causes any listed run lost time to, in the table's order
    bar_width: int = BAR_WIDTH
    bar_height: int = BAR_HEIGHT


def fleet_ranking(answer: dict[str, Any], lost_causes: Sequence[str]) -> FleetRanking:
    """The ``top-waste`` answer (:func:`mldiag.services.fleet.top_waste`) as the fleet page's rows and bars."""
    rows = [dict(zip(answer["columns"], row, strict=True)) for row in answer["rows"]]
    causes = [cause for cause in lost_causes if any(row.get(f"{cause}_device_ms") for row in rows)]
    largest = max((row["lost_device_ms"] or 0.0 for row in rows), default=0.0) or 1.0
    ranked = []
    for row in rows:
        lost = {cause: float(row.get(f"{cause}_device_ms") or 0.0) for cause in causes}
        segments, x = [], 0.0
        for cause, device_ms in lost.items():
            if device_ms > 0:
                width = BAR_WIDTH * device_ms / largest
                segments.append(CauseSegment(cause=cause, device_ms=device_ms, x=x, width=width))
                x += width
        ranked.append(RankedRun(
            run_id=str(row["run"]).rsplit("/", 1)[-1], display_name=row["display_name"] or "",
            analyses=int(row["analyses"]), lost_device_ms=float(row["lost_device_ms"] or 0.0),
            lost_share=row["lost_share"], causes=lost, segments=segments,
            latest_session_id=str(row["latest_session"]).rsplit("/", 1)[-1],
            latest_analyzed_at=str(row["latest_analyzed_at"] or ""), trend=_trend(row)))
    return FleetRanking(runs=ranked, causes=causes)


def _trend(row: dict[str, Any]) -> float | None:
    oldest, latest = row.get("oldest_lost_share"), row.get("latest_lost_share")
    if int(row["analyses"]) < 2 or oldest is None or latest is None:
        return None
    return float(latest) - float(oldest)
