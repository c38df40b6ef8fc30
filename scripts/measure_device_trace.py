#!/usr/bin/env python3
"""Measure a GPU or TPU profile by hand: the ground truth the quality harness checks the analysis against.

Reads the ``.xplane.pb`` with JAX's own reader (``jax.profiler.ProfileData``),
never with ``mldiag.analysis``, and prints for every device plane that has op
events:

* the op lines (GPU ``Stream #N`` lines, TPU ``XLA Ops``), the span from the
  first op's start to the last op's end, and the busy fraction: the union of
  the op events over that span (and over each ``Steps`` window, where the
  plane has one);
* the device time of the ops by name, largest first, and the share of each
  ``--group LABEL=REGEX`` (op names matching the regular expression) in the
  plane's op time;
* the runs of each program (``XLA Modules`` on TPU, ``<module>:XLA GPU module``
  events on the host) with their mean start-to-start period;
* the plane's own stats (memory size, compute capability).

Usage::

    python scripts/measure_device_trace.py PROFILE.xplane.pb [--group 'TE=ck_tile|te_'] [--top 8]
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field


def covered_ns(intervals: list[tuple[int, int]]) -> int:
    """The length of the union of ``intervals``."""
    covered, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered


def clipped(intervals: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    return [(max(a, start), min(b, end)) for a, b in intervals if b > start and a < end]


def is_op_line(plane: str, line: str) -> bool:
    if plane.startswith("/device:TPU"):
        return line == "XLA Ops"
    return line.startswith("Stream #")


def program_runs(profile) -> dict[str, list[int]]:
    """Start times of each program's runs: TPU ``XLA Modules`` (device 0) or the host's ``XLA GPU module`` events."""
    runs: dict[str, list[int]] = defaultdict(list)
    for plane in profile.planes:
        for line in plane.lines:
            if (plane.name == "/device:TPU:0" and line.name == "XLA Modules") or plane.name == "/host:CPU":
                for event in line.events:
                    if plane.name == "/host:CPU" and not event.name.endswith(":XLA GPU module"):
                        continue
                    runs[event.name.split(":XLA GPU module")[0]].append(event.start_ns)
    return runs


@dataclass
class PlaneMeasurement:
    """One device plane's op events, measured."""

    name: str
    lines: list[str]  # "<line> (<events>)"
    stats: dict
    events: int
    span_ns: int  # first op's start to last op's end
    op_ns: int  # the op lines' time: on each line the union of its events (a loop op holds its body's ops)
    busy: float  # union of the op events over the span
    steps: list[tuple[float, float]] = field(default_factory=list)  # (ms, busy) per Steps window
    by_name: Counter = field(default_factory=Counter)  # op name -> ns
    count_by_name: Counter = field(default_factory=Counter)  # op name -> events
    groups: dict[str, float] = field(default_factory=dict)  # label -> share of op_ns


def measure(path: str, groups: dict[str, re.Pattern[str]]) -> tuple[list[PlaneMeasurement], dict[str, list[int]]]:
    """Every device plane with op events, and each program's run start times."""
    from jax.profiler import ProfileData

    profile = ProfileData.from_file(path)
    planes = []
    for plane in profile.planes:
        if not plane.name.startswith("/device:"):
            continue
        ops: list[tuple[int, int]] = []
        by_name: Counter[str] = Counter()
        count_by_name: Counter[str] = Counter()
        steps: list[tuple[int, int]] = []
        lines = []
        op_ns = 0
        for line in plane.lines:
            events = list(line.events)
            if line.name == "Steps":
                steps = [(e.start_ns, e.end_ns) for e in events]
            if not events or not is_op_line(plane.name, line.name):
                continue
            lines.append(f"{line.name} ({len(events)})")
            op_ns += covered_ns([(event.start_ns, event.end_ns) for event in events])
            for event in events:
                ops.append((event.start_ns, event.end_ns))
                by_name[event.name] += event.duration_ns
                count_by_name[event.name] += 1
        if not ops:
            continue
        first, last = min(a for a, _ in ops), max(b for _, b in ops)
        total = sum(by_name.values())
        planes.append(PlaneMeasurement(
            name=plane.name, lines=lines, stats=dict(plane.stats), events=len(ops), span_ns=last - first,
            op_ns=op_ns, busy=covered_ns(ops) / (last - first),
            steps=[((end - start) / 1e6, covered_ns(clipped(ops, start, end)) / (end - start)) for start, end in steps],
            by_name=by_name, count_by_name=count_by_name,
            groups={label: sum(v for n, v in by_name.items() if pattern.search(n)) / total
                    for label, pattern in groups.items()},
        ))
    runs = program_runs(profile)
    for starts in runs.values():
        starts.sort()
    return planes, runs


def mean_period_ms(starts: list[int]) -> float | None:
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    return statistics.mean(gaps) / 1e6 if gaps else None


def report(path: str, groups: dict[str, re.Pattern[str]], top: int) -> None:
    planes, runs = measure(path, groups)
    for plane in planes:
        print(f"{plane.name}: {plane.events} op events on {', '.join(plane.lines)}")
        print(f"  stats: {plane.stats}")
        print(f"  span {plane.span_ns / 1e6:.3f} ms, op time {plane.op_ns / 1e6:.3f} ms, "
              f"busy {plane.busy:.3f} of the span")
        for index, (ms, busy) in enumerate(plane.steps):
            print(f"  step {index}: {ms:.3f} ms, busy {busy:.3f}")
        for name, ns in plane.by_name.most_common(top):
            print(f"  {ns / plane.op_ns:6.1%} {ns / 1e6:9.3f} ms  {name[:120]}")
        for label, share in plane.groups.items():
            print(f"  group {label}: {share:.1%} of op time ({share * plane.op_ns / 1e6:.3f} ms)")
    for program, starts in sorted(runs.items(), key=lambda item: -len(item[1])):
        period = mean_period_ms(starts)
        print(f"program {program}: {len(starts)} runs" + (f", mean period {period:.3f} ms" if period else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile")
    parser.add_argument("--group", action="append", default=[], metavar="LABEL=REGEX",
                        help="report the share of the op time of ops whose name matches REGEX")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    groups = {}
    for spec in args.group:
        label, sep, pattern = spec.partition("=")
        if not sep:
            parser.error(f"--group {spec!r}: expected LABEL=REGEX")
        try:
            groups[label] = re.compile(pattern)
        except re.error as error:
            parser.error(f"--group {spec!r}: {error}")
    report(args.profile, groups, args.top)


if __name__ == "__main__":
    main()
