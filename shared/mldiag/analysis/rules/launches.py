"""A loop bound by its launches: each step runs a program so small that launching it costs the host more than the
device spends running it.

A jitted step is dispatched from Python: its arguments are flattened and handed over, the program is queued, and in a
loop that reads a result back every step the training thread then waits for it before the next launch. That cost is
per launch, whatever the program does; when the program runs for a fraction of a millisecond the devices idle for most
of each step, and only more work per launch (several steps in one program, larger batches, fewer arrays to hand over,
fewer syncs) makes the loop faster.

Told from the loop's attribution: a loop of steps that launches a few programs per step (op-by-op execution is a
finding of its own); each launch under :data:`SMALL_PROGRAM_MS` of device time; and the stepping thread's dispatches
with the time around them (its untraced time: the launch's own Python, a sync the trace does not name; and the
functions that read device values back, the sync where the Python tracer names it) the largest part of the loop that
is not the devices' work. The time around the dispatches counts with them only while it is of their size (at most
:data:`AROUND_PER_DISPATCH` times their dispatch time), or within the time the thread waits for the programs it
launched: beyond that it is the thread's own code, a cause of its own.

Where the launches overlap the devices' work (the thread launches the next program while the last one runs), they
bound the loop only when they cost at least :data:`OVER_THE_PROGRAM` times the device time. Where the thread waits
for most of its launches (:attr:`HostEvidence.awaited_launches`: a sync every step), nothing overlaps: each step pays
the launch, its latency and the sync in full on top of the program's run, whatever their ratio to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mldiag.analysis.host_evidence import HostEvidence, StepSource, TimeCause

SMALL_PROGRAM_MS = 1.0  # device time per launch under which a program can cost less than its launch
OVER_THE_PROGRAM = 4.0  # the launches' host time, over the device time, from which the launches bound the loop
AROUND_PER_DISPATCH = 2.0  # time around the dispatches up to this many times theirs is the launches' own
AWAITED = 0.5  # share of the launches the thread waits for from which the launches are synchronous
_DEVICE = (TimeCause.DEVICE_COMPUTE, TimeCause.COLLECTIVES)
_LAUNCH = (TimeCause.DISPATCH, TimeCause.UNTRACED)


@dataclass(frozen=True)
class LaunchBound:
    """What the launches cost the loop, per launch and as shares of the loop's wall time."""

    launches_per_step: float
    device_ms_per_launch: float
    dispatch_ms_per_launch: float
    untraced_ms_per_launch: float
    sync_ms_per_launch: float
    dispatch_share: float
    untraced_share: float
    sync_share: float
    syncs: tuple[str, ...]  # the functions that read device values back, where the trace names them
    awaited: bool = False  # the thread waits for most launches' programs: a sync every step, nothing overlaps

    @property
    def host_ms_per_launch(self) -> float:
        return self.dispatch_ms_per_launch + self.untraced_ms_per_launch + self.sync_ms_per_launch

    @property
    def share(self) -> float:
        return self.dispatch_share + self.untraced_share + self.sync_share


def launch_bound(host: HostEvidence, op_by_op_dispatches: float) -> LaunchBound | None:
    """The launches' cost where they bound the loop; None elsewhere (``op_by_op_dispatches``: the dispatches per
    step from which a step is executed op by op, not launched as a few programs)."""
    attribution = host.attribution
    if (attribution is None or attribution.loop_ms <= 0 or attribution.steps <= 0
            or host.step_source is StepSource.PROFILE_WINDOW
            or not 0 < host.dispatches_per_step < op_by_op_dispatches):
        return None
    launches = attribution.steps * host.dispatches_per_step
    reading = {read.name for read in host.device_reads} | {
        owner.name for activity in (*host.host_activities, *host.between_steps) for owner in activity.owners
        if owner.reads_device}
    syncs = [part for part in attribution.parts if part.cause is TimeCause.HOST_WORK and part.name in reading]
    by_cause: dict[TimeCause, tuple[float, float]] = {}
    for part in attribution.parts:
        if part not in syncs:
            ms, share = by_cause.get(part.cause, (0.0, 0.0))
            by_cause[part.cause] = (ms + part.ms, share + part.share)
    device_ms = sum(by_cause.get(cause, (0.0, 0.0))[0] for cause in _DEVICE)
    (dispatch_ms, dispatch_share), (untraced_ms, untraced_share) = (by_cause.get(c, (0.0, 0.0)) for c in _LAUNCH)
    sync_ms, sync_share = sum(part.ms for part in syncs), sum(part.share for part in syncs)
    others = [share for cause, (_, share) in by_cause.items() if cause not in (*_DEVICE, *_LAUNCH)]
    awaited = host.awaited_launches >= AWAITED
    around_ms = max(AROUND_PER_DISPATCH * dispatch_ms,
                    host.launch_wait_ms_per_step * attribution.steps if awaited else 0.0)
    if (dispatch_ms <= 0 or untraced_ms + sync_ms > around_ms
            or (not awaited and device_ms / launches >= SMALL_PROGRAM_MS)
            or (not awaited and dispatch_ms + untraced_ms + sync_ms < OVER_THE_PROGRAM * device_ms)
            or dispatch_share + untraced_share + sync_share <= max(others, default=0.0)):
        return None
    return LaunchBound(launches_per_step=host.dispatches_per_step, device_ms_per_launch=device_ms / launches,
                       dispatch_ms_per_launch=dispatch_ms / launches, untraced_ms_per_launch=untraced_ms / launches,
                       sync_ms_per_launch=sync_ms / launches, dispatch_share=dispatch_share,
                       untraced_share=untraced_share, sync_share=sync_share,
                       syncs=tuple(dict.fromkeys(part.name for part in syncs)), awaited=awaited)
