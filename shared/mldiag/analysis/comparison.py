"""What changed: an analysis compared with an earlier one of the same run.

When an automatic capture follows a degradation alert, the question is less
"what is slow" than "what got slower". :func:`compare` sets two analyses side
by side — step time, busy fraction, host gaps, dispatches, memory, and the ops
and host activities whose time per step appeared or grew — and says it in a few
sentences for the top of the report
(:func:`mldiag.services.baselines.find_baseline` picks the baseline). The
headline calls the baseline healthy only when its analysis found it OPTIMAL.
"""

from __future__ import annotations

from collections.abc import Iterable

from mldiag.analysis.evidence import Analysis, Change, Comparison, TimeChange
from mldiag.analysis.host_evidence import HostEvidence
from mldiag.domain.resources import HealthStatus

GROWTH_THRESHOLD = 0.2  # an op or activity must grow by 20 % ...
GROWTH_FLOOR_MS = 0.5  # ... and by half a millisecond per step to be worth naming
MAX_LISTED = 8


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _per_step(hosts: list[HostEvidence], *picks: str) -> dict[str, float]:
    """Mean time per step of each op (``top_ops``) or host activity over the hosts that have it."""
    totals: dict[str, list[float]] = {}
    for host in hosts:
        for item in (item for pick in picks for item in getattr(host, pick)):
            value = item.self_ms_per_step if "top_ops" in picks else item.ms_per_step
            totals.setdefault(item.name, []).append(value)
    return {name: sum(values) / len(values) for name, values in totals.items()}


def _grown(before: dict[str, float], after: dict[str, float]) -> tuple[list[TimeChange], list[TimeChange]]:
    new, grown = [], []
    for name, now in after.items():
        then = before.get(name)
        if then is None:
            if now >= GROWTH_FLOOR_MS:
                new.append(TimeChange(name=name, before_ms_per_step=0.0, after_ms_per_step=now))
        elif now - then >= GROWTH_FLOOR_MS and now >= then * (1 + GROWTH_THRESHOLD):
            grown.append(TimeChange(name=name, before_ms_per_step=then, after_ms_per_step=now))
    by_delta = lambda change: -change.delta_ms  # noqa: E731
    return sorted(new, key=by_delta)[:MAX_LISTED], sorted(grown, key=by_delta)[:MAX_LISTED]


def baseline_label(comparison: Comparison) -> str:
    """How the headline names the baseline: healthy only if its own analysis said OPTIMAL."""
    session = comparison.baseline_session.rsplit("/", 1)[-1]
    if comparison.baseline_status is HealthStatus.OPTIMAL:
        return f"the healthy session {session}"
    if comparison.baseline_status is HealthStatus.NEEDS_ATTENTION:
        return f"the earlier session {session} (itself NEEDS_ATTENTION)"
    return f"the earlier session {session}"


def _headline(comparison: Comparison) -> list[str]:
    baseline = baseline_label(comparison)
    step = comparison.step_time_ms
    lines = []
    if step.ratio is not None and abs(step.ratio) < 0.005:
        lines.append(f"Step time is unchanged at {step.after:.1f} ms against {baseline}.")
    elif step.ratio is not None:
        direction = "rose" if step.ratio > 0 else "fell"
        lines.append(f"Step time {direction} from {step.before:.1f} ms to {step.after:.1f} ms "
                     f"({step.ratio:+.0%}) against {baseline}.")
    busy, gap = comparison.busy_fraction, comparison.gap_ms_per_step
    if busy.before is not None and busy.after is not None:
        lines.append(f"The devices were busy {busy.after:.0%} of each step (was {busy.before:.0%}).")
    growth = [("host time between steps", gap), ("idle time in steps", comparison.idle_ms_per_step)]
    for label, change in growth:
        if change.before is not None and change.after is not None and change.after - change.before >= GROWTH_FLOOR_MS:
            lines.append(f"The {label} grew by {change.after - change.before:.1f} ms per step "
                         f"({change.before:.1f} → {change.after:.1f} ms).")
    grown = [*comparison.new_ops, *comparison.grown_ops, *comparison.grown_host_activities]
    if grown:
        largest = max(grown, key=lambda change: change.delta_ms)
        lines.append(f"The largest growth is {largest.name!r}: {largest.before_ms_per_step:.1f} → "
                     f"{largest.after_ms_per_step:.1f} ms per step.")
    elif step.ratio is not None and step.ratio > GROWTH_THRESHOLD:
        lines.append("No op grew on its own: the time went outside the traced ops (host work, waiting).")
    return lines


def compare(current: Analysis, baseline: Analysis, baseline_session: str) -> Comparison:
    def host_mean(analysis: Analysis, field: str) -> float | None:
        return _mean(getattr(host, field) for host in analysis.hosts)

    new_ops, grown_ops = _grown(_per_step(baseline.hosts, "top_ops"), _per_step(current.hosts, "top_ops"))
    activities = ("host_activities", "between_steps")  # the host's work inside steps and in the gaps
    new_activities, grown_activities = _grown(_per_step(baseline.hosts, *activities),
                                              _per_step(current.hosts, *activities))
    comparison = Comparison(
        baseline_session=baseline_session,
        baseline_status=baseline.status,
        step_time_ms=Change(before=baseline.metrics.step_time_ms, after=current.metrics.step_time_ms),
        busy_fraction=Change(before=baseline.metrics.busy_fraction, after=current.metrics.busy_fraction),
        gap_ms_per_step=Change(before=host_mean(baseline, "gap_ms_per_step"),
                               after=host_mean(current, "gap_ms_per_step")),
        idle_ms_per_step=Change(before=host_mean(baseline, "idle_ms_per_step"),
                                after=host_mean(current, "idle_ms_per_step")),
        dispatches_per_step=Change(before=host_mean(baseline, "dispatches_per_step"),
                                   after=host_mean(current, "dispatches_per_step")),
        peak_memory_bytes=Change(before=baseline.metrics.peak_memory_bytes, after=current.metrics.peak_memory_bytes),
        new_ops=new_ops,
        grown_ops=grown_ops,
        grown_host_activities=[*new_activities, *grown_activities][:MAX_LISTED],
    )
    comparison.headline = _headline(comparison)
    return comparison
