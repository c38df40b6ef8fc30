"""The degradation analyzer: is this run slower than it was when it was healthy?

Each run is compared with itself. After skipping the first points (compilation,
warm-up caches), a baseline is set from a warm-up window: the median and the
median absolute deviation (MAD) of step time, and of duty cycle where the
workload reports it. Healthy points keep sharpening it until it holds
``baseline_points``; then it stays fixed, so a slow drift is not absorbed. Every later point updates a short recent window; its
median is what gets compared, so single outliers never trip anything. The
detector opens when the recent median is at least ``step_time_slowdown``
slower (or ``duty_cycle_drop`` lower) than the baseline *and* beyond ``mad_multiplier``
standard errors of the window median (estimated from the baseline's MAD), so a
noisy run needs a larger change, for ``sustain`` consecutive points;
it closes once the run is back within half that threshold for as many points.

The state is a small pydantic model kept per run, so the detector works the
same in a long-lived process and in a function that sees one report at a time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from enum import StrEnum

from pydantic import Field

from mldiag.domain.types import CamelModel, Timestamp


class DetectorParams(CamelModel):
    """Per-run knobs; the defaults follow the managed product's 15 % trigger."""

    skip_points: int = Field(default=5, ge=0, description="points ignored at the start (compilation)")
    warmup_points: int = Field(default=30, ge=5, description="points that form the first baseline")
    baseline_points: int = Field(default=200, ge=5,
                                 description="healthy points the baseline keeps sharpening on, then stays fixed")
    window_points: int = Field(default=7, ge=1, description="recent points whose median is compared")
    sustain_points: int = Field(default=1, ge=1, description="consecutive bad (or good) points to open (or close)")
    step_time_slowdown: float = Field(default=0.15, gt=0, allow_inf_nan=False,
                                      description="fractional step-time increase that counts")
    duty_cycle_drop: float = Field(default=0.15, gt=0, allow_inf_nan=False,
                                   description="fractional duty-cycle decrease that counts")
    mad_multiplier: float = Field(default=3.0, ge=0, allow_inf_nan=False,
                                  description="how many standard errors of the window median a change must exceed")


class MetricPoint(CamelModel):
    step: int = 0
    time: Timestamp = None
    step_time_seconds: float = Field(gt=0, allow_inf_nan=False)
    duty_cycle: float | None = Field(default=None, ge=0, le=1)


class Baseline(CamelModel):
    step_time_median: float
    step_time_mad: float
    duty_cycle_median: float | None = None
    duty_cycle_mad: float | None = None


class Transition(StrEnum):
    NONE = "none"
    OPENED = "opened"
    CLOSED = "closed"


class DetectorState(CamelModel):
    """Everything the detector remembers about one run between points."""

    seen: int = 0
    sample: list[MetricPoint] = Field(default_factory=list)
    baseline: Baseline | None = None
    recent: list[MetricPoint] = Field(default_factory=list)
    bad_streak: int = 0
    good_streak: int = 0
    degraded: bool = False
    last_reason: str = ""


# For normal noise, sigma = 1.4826 * MAD and the median of n points varies by 1.2533 * sigma / sqrt(n).
_MEDIAN_SPREAD_PER_MAD = 1.4826 * 1.2533


def _noise(mad: float, points: int) -> float:
    """The standard error of a window median, from the baseline's MAD."""
    return _MEDIAN_SPREAD_PER_MAD * mad / math.sqrt(points)


def _robust_level(values: list[float]) -> float:
    """The window's level: the mean without its highest and lowest quarter.

    As robust to a stray pause as the median, and steadier under ordinary jitter.
    """
    ordered = sorted(values)
    cut = len(ordered) // 4
    kept = ordered[cut: len(ordered) - cut] or ordered
    return statistics.fmean(kept)


def _median_and_mad(values: list[float]) -> tuple[float, float]:
    median = statistics.median(values)
    return median, statistics.median(abs(v - median) for v in values)


def _baseline(points: list[MetricPoint]) -> Baseline:
    step_median, step_mad = _median_and_mad([p.step_time_seconds for p in points])
    duty = [p.duty_cycle for p in points if p.duty_cycle is not None]
    duty_median, duty_mad = _median_and_mad(duty) if duty else (None, None)
    return Baseline(step_time_median=step_median, step_time_mad=step_mad,
                    duty_cycle_median=duty_median, duty_cycle_mad=duty_mad)


def _assess(state: DetectorState, params: DetectorParams, strict: bool) -> str:
    """Why the recent window looks degraded ('' if it does not). ``strict=False`` uses half the thresholds."""
    baseline = state.baseline
    assert baseline is not None
    scale = 1.0 if strict else 0.5
    step = _robust_level([p.step_time_seconds for p in state.recent])
    slower = step / baseline.step_time_median - 1
    if slower >= params.step_time_slowdown * scale and (
        step - baseline.step_time_median > params.mad_multiplier * _noise(baseline.step_time_mad, len(state.recent))
    ):
        return (f"step time {step * 1e3:.1f} ms is {slower:.0%} above the baseline "
                f"{baseline.step_time_median * 1e3:.1f} ms")
    duty = [p.duty_cycle for p in state.recent if p.duty_cycle is not None]
    if duty and baseline.duty_cycle_median:
        current = _robust_level(duty)
        lower = 1 - current / baseline.duty_cycle_median
        if lower >= params.duty_cycle_drop * scale and (
            baseline.duty_cycle_median - current
            > params.mad_multiplier * _noise(baseline.duty_cycle_mad or 0.0, len(duty))
        ):
            return f"duty cycle {current:.0%} is {lower:.0%} below the baseline {baseline.duty_cycle_median:.0%}"
    return ""


def _sharpen(state: DetectorState, healthy: MetricPoint, params: DetectorParams) -> None:
    """Add a point that left the window while all was well, until the baseline sample is full."""
    if len(state.sample) < params.baseline_points:
        state.sample.append(healthy)
        state.baseline = _baseline(state.sample)


def observe(state: DetectorState, point: MetricPoint, params: DetectorParams) -> Transition:
    """Feed one point; returns whether this point opened or closed a degradation."""
    state.seen += 1
    if state.seen <= params.skip_points:
        return Transition.NONE
    if state.baseline is None:
        state.sample.append(point)
        if len(state.sample) >= params.warmup_points:
            state.baseline = _baseline(state.sample)
        return Transition.NONE
    window = [*state.recent, point]
    state.recent = window[-params.window_points:]
    if len(window) > params.window_points and not state.degraded and not state.bad_streak:
        _sharpen(state, window[0], params)
    if len(state.recent) < params.window_points:
        return Transition.NONE
    if not state.degraded:
        reason = _assess(state, params, strict=True)
        state.bad_streak = state.bad_streak + 1 if reason else 0
        if state.bad_streak >= params.sustain_points:
            state.degraded, state.bad_streak, state.last_reason = True, 0, reason
            return Transition.OPENED
        return Transition.NONE
    recovered = not _assess(state, params, strict=False)
    state.good_streak = state.good_streak + 1 if recovered else 0
    if state.good_streak >= params.sustain_points:
        state.degraded, state.good_streak = False, 0
        state.last_reason = "back within half the threshold of the baseline"
        return Transition.CLOSED
    return Transition.NONE


def detect_degradation(points: Iterable[MetricPoint], params: DetectorParams | None = None,
                       state: DetectorState | None = None) -> list[tuple[int, Transition, str]]:
    """Run a whole series through the detector; returns (index, transition, reason) for each change."""
    params = params or DetectorParams()
    state = state or DetectorState()
    changes: list[tuple[int, Transition, str]] = []
    for index, point in enumerate(points):
        transition = observe(state, point, params)
        if transition is not Transition.NONE:
            changes.append((index, transition, state.last_reason))
    return changes
