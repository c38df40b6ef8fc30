"""How a loop's steps fall into groups: the warm-up, slow steps, and the iteration of several programs.

Pure array rules on per-step and per-launch values, used by the raw-event read
(:mod:`mldiag.analysis.loop.raw_events`):

* **warm-up**: the leading steps that each hold a first compilation (a program
  compiled for the first time in the capture, on its first call);
* **slow steps**: iterations well above the median, in a group clearly apart
  from the others (:func:`slow_split`);
* **iteration**: without step markers, the shortest sequence of program
  launches that the loop repeats (a train and an eval program; micro-batches
  then an apply), found as the period of the launch sequence; programs the
  loop runs now and then for little device time (a copy of the parameters for
  a save every tenth step) are occasional work inside an iteration, not part
  of what defines it (:func:`occasional`).
"""

from __future__ import annotations

import numpy as np

SLOW_STEP = 1.5  # an iteration above this many times the median may be slow
SLOW_APART = 1.25  # and the slow group's fastest is this many times the normal group's slowest
MIN_GROUPED = 5  # iterations needed to tell slow from normal
MIN_SLOW_EXTRA_NS = 1_000_000  # and a slow one is this much longer than the median: shorter stalls are host noise
PERIOD_MATCH = 0.9  # share of launches that repeat the one a period earlier, for a sequence to be the iteration
MAX_PERIOD = 64
MIN_REPEATS = 2  # calls of a program for it to be in the sequence (one-off programs aside)
MIN_PERIODS = 3  # periods the sequence holds for it to be the loop's iteration
MAX_MICRO_BATCHES = 8  # runs of the main program per repeated sequence that still make one iteration
OCCASIONAL_SHARE = 0.05  # device time share below which a program run less often than the main one is occasional


def leading_warmup(holds_first_compile: np.ndarray) -> int:
    """How many leading steps each hold a first compilation."""
    misses = np.flatnonzero(~holds_first_compile)
    return int(misses[0]) if len(misses) else len(holds_first_compile)


def slow_split(durations: np.ndarray) -> np.ndarray | None:
    """Which iterations (durations in nanoseconds) are slow, or None when they do not split in two groups.

    Sorted, the iterations split where the ratio between neighbours is largest,
    among the splits whose slow side is above ``SLOW_STEP`` times the median (and
    ``MIN_SLOW_EXTRA_NS`` above it);
    the split counts when that ratio is at least ``SLOW_APART`` (a clear step
    up, not a spread of noise). The slow group is the minority by construction
    (it lies above the median).
    """
    if len(durations) < MIN_GROUPED:
        return None
    median = float(np.median(durations))
    ordered = np.sort(durations)
    candidates = [k for k in range(1, len(ordered)) if ordered[k] > max(SLOW_STEP * median, median + MIN_SLOW_EXTRA_NS)
                  and ordered[k - 1] > 0]
    if not candidates or median <= 0:
        return None
    split = max(candidates, key=lambda k: ordered[k] / ordered[k - 1])
    if ordered[split] / ordered[split - 1] < SLOW_APART:
        return None
    return durations >= ordered[split]


def repeating_period(sequence: np.ndarray) -> int | None:
    """The shortest period (above one) of a sequence of program ids, or None when it repeats none.

    A period ``p`` holds when at least ``PERIOD_MATCH`` of the launches are the
    program launched ``p`` launches earlier, the sequence holds it at least
    ``MIN_PERIODS`` times, one period holds more than one program, and each of
    them is launched as often in the whole sequence as the period says (a
    program run a few times and then never again makes no period with the one
    run every time after it).
    """
    names, counts = np.unique(sequence, return_counts=True)
    launched = dict(zip(names.tolist(), counts.tolist()))
    for period in range(2, min(MAX_PERIOD, len(sequence) // MIN_PERIODS) + 1):
        cycle = sequence[:period]
        in_cycle, per_cycle = np.unique(cycle, return_counts=True)
        if len(in_cycle) < 2 or np.mean(sequence[period:] == sequence[:-period]) < PERIOD_MATCH:
            continue
        repeats = len(sequence) // period
        if all(launched[name] >= count * (repeats - 1) for name, count in zip(in_cycle.tolist(), per_cycle.tolist())):
            return period
    return None


def whole_programs(cycle: np.ndarray) -> bool:
    """Whether one iteration launches each of its programs in one run (micro-batches then apply, train then
    eval), as a loop of whole programs does; code run op by op interleaves the same few primitives."""
    runs = 1 + np.count_nonzero(cycle[1:] != cycle[:-1])
    return runs == len(np.unique(cycle))


def iteration_start(cycle: np.ndarray) -> int:
    """Where in one period of launches an iteration starts: where the longest run of one program starts (the
    micro-batches before their apply), else at the first launch."""
    period = len(cycle)
    best, best_run = 0, 0
    for start in range(period):
        if cycle[start] == cycle[start - 1]:
            continue  # inside a run, not at its start
        run = 1
        while run < period and cycle[(start + run) % period] == cycle[start]:
            run += 1
        if run > best_run:
            best, best_run = start, run
    return best


def occasional(sequence: np.ndarray, device_ns: dict[int, float]) -> set[int]:
    """The programs of a launch sequence that are occasional work inside iterations rather than part of them.

    The main program is the one with the most device work (``device_ns``, per program id). A program is
    occasional when it is launched less often than the main one and holds under ``OCCASIONAL_SHARE`` of the
    device time, unless it is an apply: launched once per period of the sequence, after at most
    ``MAX_MICRO_BATCHES`` runs of the main program (micro-batches, then their apply, however cheap). A
    sequence whose period is not one of whole programs is code run op by op (a benchmark's inputs made
    between its calls), with nothing occasional in it; nor is anything occasional where no device work is
    recorded.
    """
    names, counts = np.unique(sequence, return_counts=True)
    total = sum(device_ns.get(name, 0.0) for name in names.tolist())
    if len(names) < 2 or total <= 0:
        return set()
    launched = dict(zip(names.tolist(), counts.tolist()))
    main = max(launched, key=lambda name: (device_ns.get(name, 0.0), launched[name]))
    period = repeating_period(sequence)
    cycle = sequence[:period] if period is not None else sequence[:0]
    if period is not None and not whole_programs(np.roll(cycle, -iteration_start(cycle))):
        return set()
    micro_batches = period is not None and np.count_nonzero(cycle == main) <= MAX_MICRO_BATCHES
    return {name for name, count in launched.items()
            if count < launched[main] and device_ns.get(name, 0.0) < OCCASIONAL_SHARE * total
            and not (micro_batches and np.count_nonzero(cycle == name) == 1)}
