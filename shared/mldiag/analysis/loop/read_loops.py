"""A Python loop that reads each launch's result back before the next launch: which jit call it launches.

Such a loop decides on the device's result at every iteration (``while float(change) > tol``): each launch waits
for the read of the last one's result, so the launches' dispatch and the reads are one cost, which running the loop
on the device (``lax.while_loop``) removes whole. It is told from the host's copies off the device and its jit
calls per step.
"""

from __future__ import annotations

from mldiag.analysis.host_evidence import HostActivity, HostEvidence
from mldiag.analysis.profile.trace_names import transfer_direction

MANY_COPIES = 20  # copies between host and device per step that cost more in calls than in bytes
EACH_READ = 0.8  # launches of one function per copy off the device from which each launch's result is read
LOOPED_READS = 4  # reads a step, each after a launch of one function, that make a loop rather than a sync a step
LOOP_LAUNCHES = 0.5  # share of the step's launches that one function's make, for a loop of launch and read alone


def read_after_each_launch(host: HostEvidence) -> HostActivity | None:
    """The jit call whose every launch the training thread reads back before the next (a Python loop that decides
    on the device's result at each iteration): one launched at least ``EACH_READ`` times per copy off the device,
    where there are ``MANY_COPIES`` of those a step or more, or ``LOOPED_READS`` when that call's launches are
    most of the step's (the loop does little else)."""
    reads = next((copy for copy in host.transfers if copy.count_per_step >= LOOPED_READS
                  and transfer_direction(copy.name) == "device to host"), None)
    return None if reads is None else next(
        (call for call in host.dispatched if call.count_per_step >= EACH_READ * reads.count_per_step and (
            reads.count_per_step >= MANY_COPIES or call.count_per_step >= LOOP_LAUNCHES * host.dispatches_per_step)),
        None)
