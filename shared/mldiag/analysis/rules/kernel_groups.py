"""Groups of kernels one cause runs, and the host where they cost the loop the most.

Several rules name a cause by the kernels it runs on the device (heads narrower than
the matrix unit, a lookup's gradient applied to the whole table, a matrix
decomposition, an input copied as windows side by side): each finds its group on
every host and costs it as a share of the loop; the finding speaks of the host where
that share is largest, at the priority it ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.domain.resources import Priority

Work = TypeVar("Work")  # what the rule knows of each kernel (its HLO's work, a custom call's target)
Detail = TypeVar("Detail")  # what the rule knows of the whole group (a width, a table's shape)


@dataclass
class KernelGroup(Generic[Work, Detail]):
    host: HostEvidence
    share_of_loop: float  # what the rule costs the group at
    kernels: list[tuple[OpTime, Work]]  # longest first
    detail: Detail

    @property
    def ms_per_step(self) -> float:
        return sum(op.self_ms_per_step for op, _ in self.kernels)

    @property
    def share_of_device(self) -> float:
        return min(1.0, sum(op.share_of_busy for op, _ in self.kernels))

    @property
    def names(self) -> list[str]:
        return [op.name for op, _ in self.kernels]


def costliest(hosts: list[HostEvidence],
              find: Callable[[HostEvidence], tuple[list[tuple[OpTime, Work]], float, Detail] | None],
              priorities: tuple[tuple[float, Priority], ...]) -> tuple[KernelGroup[Work, Detail], Priority] | None:
    """The group ``find`` gives (its kernels, its share of the loop, its detail) on the host where that share is
    largest, with the first of ``priorities`` (share thresholds, highest first) it reaches; None where no host
    has one, or the largest reaches none."""
    worst: KernelGroup[Work, Detail] | None = None
    for host in hosts:
        found = find(host)
        if found is not None and found[0] and (worst is None or found[1] > worst.share_of_loop):
            worst = KernelGroup(host, found[1], found[0], found[2])
    if worst is None:
        return None
    priority = next((p for threshold, p in priorities if worst.share_of_loop >= threshold), None)
    if priority is None:
        return None
    worst.kernels.sort(key=lambda kernel: -kernel[0].self_ms_per_step)
    return worst, priority
