"""A run's step time and health across its sessions, as the geometry of a small SVG chart.

The console renders it server-side (``console/_step_chart.html``, no script):
one point per analysed session, oldest first, at its step time, coloured by the
health its analysis found; the x axis names when the first, middle and last
sessions were created, the y axis is in milliseconds per step. Only numbers and enum words come out of here;
session ids reach the page through Jinja's autoescape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

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
