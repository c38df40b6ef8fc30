"""Fleet records made to order: realistic rows without running an analysis."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from mldiag.domain.fleet import CauseTime, FindingCost, FleetRecord, Label

NOW = datetime(2025, 3, 8, 12, tzinfo=timezone.utc)
RUNS = "projects/p/locations/l/machineLearningRuns"
LOST_CAUSES = ("collectives", "transfers", "compilation", "dispatch", "host_work", "waiting", "interpreter", "untraced")


def record(run: str = "run1", session: str = "s1", generation: str = "g1", *, at: datetime = NOW,
           step_ms: float = 100.0, lost: dict[str, float] | None = None, compute_ms: float = 800.0,
           devices: int = 4, labels: dict[str, str] | None = None, framework: str = "jax") -> FleetRecord:
    """A one-host record whose loop is ``compute_ms`` of device compute plus ``lost`` (cause -> ms)."""
    lost = {"host_work": 200.0} if lost is None else lost
    loop = compute_ms + sum(lost.values())
    parts = [("device_compute", compute_ms, True), *((cause, ms, False) for cause, ms in lost.items())]
    attribution = [CauseTime(cause=cause, ms=ms, share=ms / loop, device_ms=ms * devices, useful=useful)
                   for cause, ms, useful in sorted(parts, key=lambda part: -part[1])]
    lost_ms = sum(lost.values())
    return FleetRecord(
        record_id=f"{RUNS}/{run}/profilerSessions/{session}@{generation}", analyzed_at=at, run=f"{RUNS}/{run}",
        run_display_name=run, session=f"{RUNS}/{run}/profilerSessions/{session}", generation_set=generation,
        capture_kind="programmatic", status="NEEDS_ATTENTION" if lost_ms else "OPTIMAL",
        top_finding="P0 Host-bound" if lost_ms else "", host_count=1, device_count=devices, device_kind="tpu",
        hardware="TPU v5e", framework=framework, steps=10, step_time_ms=step_ms, step_time_mean_ms=step_ms,
        step_time_median_ms=step_ms, step_time_p90_ms=step_ms * 1.1, step_time_min_ms=step_ms * 0.9,
        step_time_max_ms=step_ms * 1.3, mfu=0.4, busy_fraction=compute_ms / loop, loop_ms=loop,
        loop_device_ms=loop * devices, lost_ms=lost_ms, lost_device_ms=lost_ms * devices,
        lost_share=lost_ms / loop, attribution=attribution,
        findings=[FindingCost(priority="P0", category="input_bound", title="Host-bound",
                              cost_ms=lost.get("host_work"), cost_share=lost.get("host_work", 0) / loop)],
        labels=[Label(key=key, value=value) for key, value in sorted((labels or {}).items())])


def generated(count: int, seed: int = 7) -> list[FleetRecord]:
    """``count`` records over 14 days, 200 runs of 5 teams, each losing time to a few causes."""
    chance = random.Random(seed)
    made = []
    for index in range(count):
        run = f"run{index % 200}"
        lost = {cause: chance.uniform(0, 300) for cause in chance.sample(LOST_CAUSES, chance.randint(0, 4))}
        made.append(record(run, f"s{index}", f"g{index}", at=NOW - timedelta(minutes=index * 2),
                           step_ms=chance.uniform(50, 500), lost=lost, devices=chance.choice((1, 4, 8, 256)),
                           labels={"team": f"team{index % 5}", "job": run}))
    return made
