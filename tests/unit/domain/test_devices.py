"""What a profile ran on, in words, and when two sides of a comparison ran on different kinds of device."""

from __future__ import annotations

from dataclasses import dataclass

from mldiag.domain.devices import ComparedHardware, compared_hardware, ran_on


@dataclass
class Host:
    device_type: str
    devices: int


def test_hosts_are_summed_by_kind_and_a_cpu_is_one():
    hosts = [Host("Tesla V100", 8), Host("Tesla V100", 8), Host("CPU", 0)]
    assert ran_on(hosts) == "CPU + 16 x Tesla V100"
    assert ran_on([]) == ""


def test_kinds_decide_counts_do_not_and_unknown_is_no_difference():
    assert compared_hardware([Host("CPU", 1)], [Host("Tesla V100", 8)]) == ComparedHardware("CPU", "8 x Tesla V100",
                                                                                         False)
    assert compared_hardware([Host("Tesla V100", 4)], [Host("Tesla V100", 8)]).same
    assert compared_hardware([], [Host("Tesla V100", 8)]).same
