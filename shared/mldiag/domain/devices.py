"""What a profile ran on, in words, and whether two profiles being compared ran on the same kind of device.

A step time measured on one kind of accelerator says nothing about another (or about a CPU), so a
comparison names both sides' devices and says when their kinds differ. The counts are shown, not
judged: a change may well be a change of scale.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


class HostDevices(Protocol):
    """One host of a profile, as its analysis describes it."""

    device_type: str
    devices: int


def ran_on(hosts: Iterable[HostDevices]) -> str:
    """``8 x Tesla V100-SXM2-16GB`` from each host's devices; kinds joined by ``" + "``; "" without hosts."""
    counts: dict[str, int] = {}
    for host in hosts:
        counts[host.device_type] = counts.get(host.device_type, 0) + max(host.devices, 1)
    return " + ".join(f"{count} x {device_type}" if count > 1 else device_type
                      for device_type, count in sorted(counts.items()))


@dataclass(frozen=True)
class ComparedHardware:
    """The two sides' devices (:func:`ran_on`), and whether they are of the same kinds (unknown counts as same)."""

    baseline: str
    candidate: str
    same: bool


def compared_hardware(baseline: Iterable[HostDevices], candidate: Iterable[HostDevices]) -> ComparedHardware:
    baseline, candidate = list(baseline), list(candidate)
    kinds = {host.device_type for host in baseline}, {host.device_type for host in candidate}
    return ComparedHardware(ran_on(baseline), ran_on(candidate), not all(kinds) or kinds[0] == kinds[1])
