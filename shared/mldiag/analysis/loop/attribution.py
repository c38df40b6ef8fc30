"""Where the loop's wall time went: every instant of the loop given to exactly one named cause.

The loop runs from the first step's start to the last step's end, the gaps
between steps included (without steps, from the first launch to the end of the
last one's work). Each instant of it is decided so:

* **a device is busy**: the ops running on it then. Each of its lanes (XLA CPU
  thread, GPU stream, TPU ops line) runs its innermost event; compute ops win
  over collectives, collectives over host<->device transfers, and those over
  the runtime's own events (an executor waiting for its ops), and the instant is
  split equally among the lanes running the winning kind: compute by op family
  (``device_compute``), ``collectives``, ``transfers`` (a host callback's send and
  receive too: the device waits on Python there, it does no model work).
* **every device is idle**: what the stepping thread (the one with the step
  markers, else the one that dispatches) does then. Time inside a compilation
  is ``compilation``, else inside a host<->device transfer call ``transfers``
  (unless a call the step makes copies as a lesser part of its own work: a
  save's copy of the state off the device is the save's), else inside a jit
  dispatch ``dispatch`` (each named by its outermost call; the dispatch of a
  function whose every launch is read back before the next is the thread's
  copies: each launch waits for that read, one cost with it).
  Right after a call that copies arrays of known shapes to the device, until
  the copy is done (a device runs again, the runtime's threads end their work
  on it, or a copy of that size must be done), the thread's quiet time (no
  event but the step marker, a wait on the device such as
  ``block_until_ready``, or the own time of the code that made the call) is
  that copy in flight (``transfers``: the call returns before the copy lands,
  and the wait for it often has no event of its own), where the thread or a
  device resumes when the copy is done (it waited for the copy rather than
  working untraced meanwhile). Else inside a wait (a queue ``get``,
  ``block_until_ready``) it is what the other host threads did meanwhile
  (their innermost events, split equally), else ``waiting``. Where the
  thread needs the Python interpreter (inside its own Python code, a jit
  dispatch, or no event at all: back from a call that let go of the
  interpreter) while another thread runs Python code of its own (its innermost
  event a Python function's frame, not a builtin, a wait or a runtime call),
  it is ``interpreter``: CPython runs one thread's Python at a time, and the
  thread waits its turn (named by the other thread's function, split
  equally). Else inside any other event it is ``host_work`` of the innermost
  function or scope (a Python builtin's time stays with the Python function
  that called it); with no event but the step marker it is a host<->device
  transfer that another thread runs then (the runtime's copy and relayout
  threads), else ``untraced``.

The parts are merged by cause, name and thread, except a host thread's copies,
which are one part: its calls in both directions (a round trip), the runtime's
relayout on its behalf, the copies in flight and the launches each read back
before the next, named by its calls; and the
same work on several threads other than the training thread (a pool of readers),
which is one part of those threads.

With several devices each device's timeline is attributed on its own and the
parts are averaged over the devices, so that they still sum to the loop: a
device idle while another computes counts half busy, half host. (The XLA CPU
client runs all its devices on one plane: each device is the thread its program
runs on, the client's pool lending a hand to all.) Everything is a sweep over
sorted interval boundaries in numpy: no loop over events.

The same sweep, cut at each step's start, gives each part its time in each step
(a step with the gap after it), so that a part says both its share of the loop
(time-weighted) and how its share of a step is spread over the steps: a save
every tenth step is a tenth of the steps taken whole, not a tenth of each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from mldiag.analysis.host_evidence import Attribution, Distribution, TimeCause, TimePart
from mldiag.analysis.loop import host_time
from mldiag.analysis.profile.trace_names import (
    ASYNC_COPY,
    COMMUNICATION,
    COMPILE,
    DISPATCH,
    HOST_CALLBACK,
    HOST_CALLBACK_PART,
    HOST_MEMORY_SPACE,
    NOT_AN_OP,
    PYTHON_BUILTIN,
    PYTHON_FUNCTION,
    THREAD_WAITING,
    TRANSFER,
    TRANSFER_WORK,
    WAITING,
    collective,
    shape_bytes,
    transfer_direction,
)

TOP_PARTS = 12
COPY_PART = 0.5  # a call from the step whose copies to or from the device take less of its time owns them
MAX_COPY_NAMES = 3  # a host thread's copies part is named by its costliest calls, this many
MAX_THREAD_NAMES = 3  # a part of several threads' work names this many of them
# The slowest a copy from host to device memory runs (PCIe 3.0 x16 carries 16 GB/s; a pageable copy with a TPU's
# relayout on the host about 10 GB/s): the longest that a copy of a given size can keep the thread waiting for it.
MIN_COPY_BYTES_PER_NS = 1.0
RESUMES_WITHIN_NS = 1_000_000  # a thread or device that resumes this soon after a copy is done was waiting for it
BETWEEN_COPIES_NS = 250_000  # an untraced gap between two copy calls this short is the next call's own overhead
ROWS_AT_ONCE = 1 << 16  # the sweep's (piece, step) rows timed at once: a block's columns are a few MB
OTHER = "(other)"  # the name of a cause's parts beyond the top ones, summed
UNNAMED_THREAD = "(unnamed thread)"  # a host line without a name (a Python thread the tracer did not name)
LOADER_ROLE = "loader thread"  # a line that puts into a queue and launches nothing: it feeds another thread its input
LOADER_THREAD = f"(unnamed {LOADER_ROLE})"
# A line that takes from a queue, puts into none and launches nothing: it takes another thread's output (a writer,
# a metrics sender).
CONSUMER_ROLE = "consumer thread"
CONSUMER_THREAD = f"(unnamed {CONSUMER_ROLE})"
# A line that launches nothing and runs a function that saves state (a checkpoint): the work another thread may
# wait on is a save.
SAVER_ROLE = "saver thread"
SAVER_THREAD = f"(unnamed {SAVER_ROLE})"

# Op families by name, first match wins: TPU's dots are convolutions, XLA CPU's YNNPACK fusions are built around a
# dot, ROCm's Tensile GEMMs are "Cijk_...". Look-ups and scatters by index before data movement: "copy_gather_fusion"
# spends its time on the look-up. Data movement before elementwise so that "copy_bitcast_fusion" moves data.
OP_FAMILIES = (
    ("matmul/convolution", re.compile(
        r"\bdot|dot[_.-]|gemm|matmul|conv(?!ert)|cublas|cudnn|cutlass|xmma|Cijk_|Im\dd?2Col|einsum|ynn_fusion|"
        r"output fusion", re.IGNORECASE)),
    ("attention", re.compile(r"attention|fmha|flash|sdpa|mha_", re.IGNORECASE)),
    ("reduce", re.compile(r"reduc|argmax|argmin|softmax|\bsum\b|input fusion|scan", re.IGNORECASE)),
    ("gather/scatter", re.compile(r"(?<!all[-_])gather|(?<!reduce[-_])scatter", re.IGNORECASE)),
    ("copy/convert", re.compile(
        r"copy|convert|transpose|reshape|concatenate|\bslice|_slice|dynamic[-_]update|\bpad\b|"
        r"data formatting|bitcast", re.IGNORECASE)),
    ("elementwise", re.compile(
        r"elementwise|add|subtract|multiply|divide|maximum|minimum|tanh|exp|log|compare|select|negate|abs|sqrt|"
        r"power|sine|cosine|logistic|clamp|broadcast|iota|EigenMetaKernel|loop fusion", re.IGNORECASE)),
    ("fusion", re.compile(r"fusion", re.IGNORECASE)),
)
OTHER_OPS = "other ops"
# A device inside a program with no op recorded: the XLA CPU executor waiting for its thunks, thread hand-offs.
RUNTIME = "program, no op recorded"
# Device tiers: at an instant, the lowest tier running on a device takes it.
_COMPUTE, _COLLECTIVE, _TRANSFER, _RUNTIME = range(4)
# What a host event is, by its name: the classes from _COMPILE on own all the time of the events they enclose.
_WORK, _BUILTIN, _COMPILE, _HOST_TRANSFER, _DISPATCH, _WAIT = range(6)


class LineLike(Protocol):
    """A trace line as the raw-event reader holds it: events in (start, -end) order and how they nest."""

    name: str
    starts: np.ndarray
    ends: np.ndarray
    ids: np.ndarray
    parents: np.ndarray


class CoverLike(Protocol):
    """Disjoint busy intervals (``starts`` sorted) that say how much of each window they cover."""

    starts: np.ndarray

    def covered(self, windows: np.ndarray) -> np.ndarray: ...


@dataclass
class Device:
    """One device's compute lanes, and the union of their busy events (what "busy" means everywhere else).

    ``helpers``: lanes the device shares with others (the XLA CPU client's thread pool, which lends a hand to
    every CPU device of the process): their ops name what runs while the device is busy, never make it busy.
    """

    lanes: list[LineLike]
    busy: CoverLike
    helpers: list[LineLike] = field(default_factory=list)


class _Labels:
    """Distinct (cause, name, thread) labels, numbered as they come."""

    def __init__(self) -> None:
        self.keys: list[tuple[TimeCause, str, str]] = []
        self.index: dict[tuple[TimeCause, str, str], int] = {}

    def of(self, cause: TimeCause, name: str = "", thread: str = "") -> int:
        key = (cause, name, thread)
        if key not in self.index:
            self.index[key] = len(self.keys)
            self.keys.append(key)
        return self.index[key]


# --- names -------------------------------------------------------------------------------------


def op_family(text: str) -> str:
    """The op family an op's name (with its HLO op or category, where the trace has them) belongs to."""
    return next((family for family, pattern in OP_FAMILIES if pattern.search(text)), OTHER_OPS)


def _device_labels(names: Sequence[str], present: np.ndarray, hints: dict[int, str], labels: _Labels,
                   runtime: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per name id (of those ``present`` on the lanes): the label and tier of a device event of that name.
    ``hints``: the HLO op or category the trace gives a name; ``runtime``: names of the runtime's scopes."""
    label = np.zeros(len(names), dtype=np.int64)
    tier = np.full(len(names), _RUNTIME, dtype=np.int64)
    for index in present.tolist():
        name = names[index]
        # A TPU op's name is its HLO text: "%fusion.3 = f32[...] fusion(...)"; only the op's own name counts.
        subject = name.lstrip("%").split(" ", 1)[0] if name.startswith("%") else name
        text = f"{subject} {hints.get(index, '')}"
        if ASYNC_COPY.match(subject):
            result = name.split(" copy-", 1)[0]
            is_transfer = HOST_MEMORY_SPACE in name
            direction = "device to host" if HOST_MEMORY_SPACE in result else "host to device"
        else:
            is_transfer = bool(TRANSFER.search(subject)) and not COMMUNICATION.search(subject)
            direction = transfer_direction(subject)
        if HOST_CALLBACK.search(name):
            label[index], tier[index] = labels.of(TimeCause.TRANSFERS, HOST_CALLBACK_PART), _TRANSFER
        elif is_transfer:
            label[index], tier[index] = labels.of(TimeCause.TRANSFERS, direction), _TRANSFER
        elif kind := collective(text):
            label[index] = labels.of(TimeCause.COLLECTIVES, kind.group(0).lower().replace("_", "-"))
            tier[index] = _COLLECTIVE
        elif name.startswith(NOT_AN_OP) or runtime[index]:
            label[index], tier[index] = labels.of(TimeCause.DEVICE_COMPUTE, RUNTIME), _RUNTIME
        else:
            label[index], tier[index] = labels.of(TimeCause.DEVICE_COMPUTE, op_family(text)), _COMPUTE
    return label, tier


def _host_classes(names: Sequence[str], markers: set[int]) -> np.ndarray:
    """Per name id, what a host event of that name is (markers are marked apart, by the caller)."""
    classes = np.full(len(names), _WORK, dtype=np.int64)
    for index, name in enumerate(names):
        if index in markers:
            continue
        if COMPILE.match(name):
            classes[index] = _COMPILE
        elif TRANSFER.search(name) or TRANSFER_WORK.match(name):
            classes[index] = _HOST_TRANSFER
        elif DISPATCH.search(name):
            classes[index] = _DISPATCH
        elif WAITING.search(name) or THREAD_WAITING.search(name):
            classes[index] = _WAIT
        elif PYTHON_BUILTIN.match(name):
            classes[index] = _BUILTIN
    return classes


# --- nesting -----------------------------------------------------------------------------------


def subtree_ends(line: LineLike) -> np.ndarray:
    """For each event, one past the last index of the events it encloses: events are in (start, -end) order, so
    its descendants follow it up to the first event that starts once it has ended."""
    index = np.arange(len(line.starts))
    return np.maximum(np.searchsorted(line.starts, line.ends, side="left"), index + 1)


def self_pieces(line: LineLike, of: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals where each event (each that ``of`` flags, when given) is the innermost one open:
    ``(starts, ends, event)``.

    Events are in (start, -end) order, so an event's first child, if any, comes
    right after it. An event owns the time from its start to its first child,
    and from each child's end to the next child's start (or its own end). A
    child that overlaps the next one without nesting (a Python-tracer frame that
    ends a microsecond after a TraceMe scope begins) owns no time after its end:
    the next child holds it.
    """
    starts, ends, parents = line.starts, line.ends, line.parents
    count = len(starts)
    if count == 0:
        return starts, ends, np.zeros(0, dtype=np.int64)
    # A line holds up to millions of events: each array is let go once used, and pieces that take no time are
    # dropped before the heads and tails are joined.
    head_end = ends.copy()
    has_child = np.flatnonzero(parents[1:] == np.arange(count - 1))
    head_end[has_child] = starts[has_child + 1]
    del has_child
    nested = np.flatnonzero(parents >= 0)
    owner = parents[nested]
    # The next child of the same parent: children sorted by (parent, index), the following one where it shares it.
    by_parent = nested[np.argsort(owner, kind="stable")]
    following = np.full(count, -1, dtype=np.int64)
    same = parents[by_parent[1:]] == parents[by_parent[:-1]]
    following[by_parent[:-1][same]] = by_parent[1:][same]
    del by_parent, same
    sibling = following[nested]
    del following
    tail_end = ends[owner]  # the parent's end, or the next sibling's start
    has_sibling = np.flatnonzero(sibling >= 0)
    tail_end[has_sibling] = starts[sibling[has_sibling]]
    del sibling, has_sibling
    tail_start = ends[nested]
    del nested
    head, tail = head_end > starts, tail_end > tail_start
    if of is not None:
        head &= of
        tail &= of[owner]
    return (np.concatenate((starts[head], tail_start[tail])), np.concatenate((head_end[head], tail_end[tail])),
            np.concatenate((np.flatnonzero(head), owner[tail])))


# --- the sweep ---------------------------------------------------------------------------------


def _distinct(values: np.ndarray, *, in_place: bool = False) -> np.ndarray:
    """The distinct values, sorted (a sort beats ``np.unique``'s hashing on millions of timestamps); ``in_place``
    sorts ``values`` itself, an array the caller made for it."""
    ordered = values if in_place else np.sort(values)
    if in_place:
        ordered.sort()
    keep = np.ones(len(ordered), dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


@dataclass
class _Sweep:
    """Pieces cut at every boundary of the loop and of its steps: the elementary intervals and how many pieces
    of each tier cover each one (tiers no piece has stay all zero, and cost nothing)."""

    bounds: np.ndarray
    counts: np.ndarray  # [tier, interval]
    present: list[int]  # the tiers some piece has
    first: np.ndarray  # per piece: its first interval
    last: np.ndarray  # per piece: one past its last interval
    step_at: np.ndarray  # per step: its first interval, and after them the number of intervals

    @classmethod
    def of(cls, starts: list[np.ndarray], ends: list[np.ndarray], tiers: np.ndarray, n_tiers: int,
           window: Window) -> _Sweep:
        """The sweep of the pieces whose starts and ends are ``starts`` and ``ends`` joined (the pieces are up to
        millions: joined here, each column's copy is clipped in place and let go once its intervals are found)."""
        loop = window.loop
        joined_starts, joined_ends = np.concatenate(starts), np.concatenate(ends)
        np.clip(joined_starts, *loop, out=joined_starts)
        np.clip(joined_ends, *loop, out=joined_ends)
        step_starts = np.clip(window.step_starts, *loop)
        bounds = _distinct(np.concatenate((joined_starts, joined_ends, step_starts, np.array(loop, dtype=np.int64))),
                           in_place=True)
        # Interval numbers fit in int32: half the memory of searchsorted's int64, for each piece.
        first = np.searchsorted(bounds, joined_starts).astype(np.int32)
        del joined_starts
        last = np.searchsorted(bounds, joined_ends).astype(np.int32)
        del joined_ends
        intervals = len(bounds) - 1
        present = [int(t) for t in np.flatnonzero(np.bincount(tiers, minlength=n_tiers))]
        counts = np.zeros((n_tiers, intervals), dtype=np.int32)  # a row is as long as the intervals
        for tier in present:  # a row at a time, summed into it: the intervals are up to millions, each row as long
            of_tier = tiers == tier
            opened = np.bincount(first[of_tier], minlength=intervals + 1)
            opened -= np.bincount(last[of_tier], minlength=intervals + 1)
            np.cumsum(opened[:intervals], out=counts[tier])
            del opened
        step_at = np.append(np.searchsorted(bounds, step_starts), intervals)
        return cls(bounds, counts, present, first, last, step_at)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.bounds).astype(np.float64)

    @property
    def interval_steps(self) -> np.ndarray:
        """Per interval, the step it lies in."""
        return np.searchsorted(self.step_at[:-1], np.arange(len(self.bounds) - 1), side="right") - 1

    def per_piece_and_step(self, lengths: np.ndarray, order: Sequence[int], tiers: np.ndarray,
                           count: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The time of each of the first ``count`` pieces (all by default) in each step it lies in, as (piece,
        step, time) rows, and the time of each interval no tier covers.

        Each interval's ``lengths`` goes to the first tier of ``order`` that covers it, split equally among its
        pieces (:meth:`_shares`); a piece's time in a step is the sum of its shares over its intervals there.
        """
        first, last = self.first[:count], self.last[:count]
        intervals = len(self.bounds) - 1
        free = lengths.copy()
        if not intervals:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0), free
        steps = self.interval_steps
        step_first = steps[np.minimum(first, intervals - 1)]
        spans = np.where(last > first, steps[np.maximum(last - 1, 0)] - step_first + 1, 0)
        del steps
        piece = np.repeat(np.arange(len(first)), spans)
        # A piece's rows are its steps in turn: the first, then one more each row.
        step = np.repeat(step_first - (np.cumsum(spans) - spans), spans)
        del step_first, spans
        step += np.arange(len(step))
        # The prefix sums of one tier's shares at a time, for its pieces (a row is as long as the intervals); a piece
        # of a tier outside ``order`` gets none. Its rows are timed a block at a time: they are up to millions.
        tier, time = tiers.astype(np.int8)[piece], np.zeros(len(piece))
        prefix = np.zeros(intervals + 1)
        for present in (tier for tier in order if tier in self.present):
            of_tier = np.flatnonzero(tier == present)
            np.cumsum(self._shares(present, free), out=prefix[1:])
            for at in range(0, len(of_tier), ROWS_AT_ONCE):
                rows = of_tier[at: at + ROWS_AT_ONCE]
                pieces, in_step = piece[rows], step[rows]
                time[rows] = (prefix[np.minimum(last[pieces], self.step_at[in_step + 1])]
                              - prefix[np.maximum(first[pieces], self.step_at[in_step])])
        return piece, step, time, free

    def _shares(self, tier: int, free: np.ndarray) -> np.ndarray:
        """Per interval, the time each piece of ``tier`` gets of the time still ``free``, which it takes."""
        shares = np.zeros(len(free))
        takes = (self.counts[tier] > 0) & (free > 0)
        shares[takes] = free[takes] / self.counts[tier, takes]
        free[takes] = 0.0
        return shares


# --- the attribution ---------------------------------------------------------------------------


def _lane_pieces(lane: LineLike, device_label: np.ndarray, busy_name: np.ndarray) -> tuple[np.ndarray, ...]:
    """A lane's innermost busy events, as (starts, ends, labels) in time order."""
    owner = host_time.nearest(lane.parents, busy_name[lane.ids])
    piece_starts, piece_ends, events = self_pieces(lane, owner >= 0)
    return _merged(piece_starts, piece_ends, device_label[lane.ids[owner[events]]])


@dataclass
class _Times:
    """Time given to labels in steps: rows of (label, step, nanoseconds), a label in a step on several rows."""

    labels: np.ndarray
    steps: np.ndarray
    ns: np.ndarray

    def scaled(self, weight: float) -> _Times:
        """These times, each multiplied by ``weight`` in place."""
        self.ns *= weight
        return self

    @classmethod
    def joined(cls, times: list[_Times]) -> _Times:
        return cls(*(np.concatenate(column) for column in zip(*((t.labels, t.steps, t.ns) for t in times))))


def _device_time(device: Device, device_label: np.ndarray, label_tier: np.ndarray, busy_name: np.ndarray,
                 window: Window) -> _Times:
    """The time one device's busy instants of the window give each label, in each step."""
    pieces = [_lane_pieces(lane, device_label, busy_name) for lane in [*device.lanes, *device.helpers]]
    if not pieces:
        empty = np.zeros(0, dtype=np.int64)
        return _Times(empty, empty, np.zeros(0))
    starts, ends = [p[0] for p in pieces], [p[1] for p in pieces]
    labels = np.concatenate([p[2] for p in pieces])
    if not device.helpers:
        sweep = _Sweep.of(starts, ends, label_tier[labels], 4, window)
        busy = sweep.lengths
    else:  # the device's own lanes, again as tier 4, say when it is busy
        own = len(device.lanes)
        sweep = _Sweep.of(starts + starts[:own], ends + ends[:own],
                          np.concatenate((label_tier[labels], np.full(sum(len(p[0]) for p in pieces[:own]), 4))),
                          5, window)
        busy = np.where(sweep.counts[4] > 0, sweep.lengths, 0.0)
    piece, step, time, _ = sweep.per_piece_and_step(busy, (_COMPUTE, _COLLECTIVE, _TRANSFER, _RUNTIME),
                                                    label_tier[labels], len(labels))
    return _Times(labels[piece], step, time)


@dataclass
class _HostPieces:
    """A host line's labelled pieces: int64 times, int32 labels and int8 tiers (a line holds up to millions)."""

    starts: np.ndarray
    ends: np.ndarray
    labels: np.ndarray
    tiers: np.ndarray  # _HOST_TIER of the piece's cause

    @classmethod
    def empty(cls) -> _HostPieces:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int8))


# Host tiers, first wins: the stepping thread's compile and transfer; another thread's Python where the stepping
# thread needs the interpreter; its dispatch; its copies to the device in flight (its quiet instants while it waits
# for them, its callers' own time among them); its other work; then, while it waits, what other threads do; then
# its waits themselves.
_HOST_TIER = {_COMPILE: 0, _HOST_TRANSFER: 1, _DISPATCH: 3, _WORK: 5, _WAIT: 7}
_INTERPRETER = 2
_IN_FLIGHT = 4
_OTHER_THREADS = 6
_OTHER_TRANSFERS = 8  # other threads' transfers, for the stepping thread's instants that nothing else explains
# The stepping thread inside a builtin or C function (a sleep, a read, numpy), which may let go of the interpreter:
# no other thread's Python keeps it waiting then. Never a cause: it only masks ``_INTERPRETER``.
_RELEASED = 9
_AS_CAUSE = {_COMPILE: TimeCause.COMPILATION, _HOST_TRANSFER: TimeCause.TRANSFERS, _DISPATCH: TimeCause.DISPATCH,
             _WAIT: TimeCause.WAITING, _WORK: TimeCause.HOST_WORK}


@dataclass
class _Events:
    """Some of a line's events, closed under "the event that encloses it", renumbered."""

    name: str
    starts: np.ndarray
    ends: np.ndarray
    ids: np.ndarray
    parents: np.ndarray

    @classmethod
    def of(cls, line: LineLike, kept: np.ndarray) -> _Events:
        renumbered = np.full(len(line.starts), -1)
        renumbered[kept] = np.arange(len(kept))
        parents = line.parents[kept]
        parents = np.where(parents >= 0, renumbered[np.maximum(parents, 0)], -1)
        return cls(line.name, line.starts[kept], line.ends[kept], line.ids[kept], parents)


def enclosed(subtree_end: np.ndarray, flagged: np.ndarray) -> np.ndarray:
    """For each event, how many ``flagged`` events enclose it (itself not counted)."""
    count = len(flagged)
    chosen = np.flatnonzero(flagged)
    return np.cumsum(np.bincount(chosen + 1, minlength=count + 1)
                     - np.bincount(subtree_end[chosen], minlength=count + 1))[:count]


def _host_pieces(line: LineLike, names: Sequence[str], classes: np.ndarray, markers: np.ndarray,
                 labels: _Labels, loop: tuple[int, int], launches_callbacks: np.ndarray,
                 launches_read_back: np.ndarray, *, nested_calls: bool) -> _HostPieces:
    """A host line's time by cause, as labelled pieces with their host tier.

    An event of a class (compile, transfer, dispatch, wait) owns the time of all it encloses, named by itself, the
    outermost such: a jit dispatch nests the runtime's execute calls. With ``nested_calls``, the outermost compile
    and transfer calls inside them are pieces too, which their higher tiers let win (a first call compiles inside
    its dispatch). Outside them each event owns its self time, a Python builtin's going to its caller; markers
    own nothing. The code that runs the step (the events around its jit dispatches) calls the loop's work: each
    such call that launches nothing itself (``make_batch``, ``save_checkpoint``) owns the time of every function
    it calls in turn (numpy's, the zip writer's), as the work a person wrote and can move, and of its copies to
    or from the device where they are the lesser part of its time (:func:`_copies_are_a_part`). A builtin it calls
    directly (``gc.collect``) is named by itself, as the step's own code names nothing but the step. The dispatch of
    a launch that calls back to the host is the callbacks' (``launches_callbacks``), and of one whose result is read
    back before the next launch the thread's copies' (``launches_read_back``), each named by the launch.
    """
    event_class = classes[line.ids]
    subtree_end = subtree_ends(line)
    decided = event_class >= _COMPILE
    inside = enclosed(subtree_end, decided) > 0
    # The events outside every classed one, which are leaves among them, hold every piece but nested calls.
    kept = np.flatnonzero(~inside)
    outside = _Events.of(line, kept)
    outside_class = event_class[~inside]
    is_marker = markers[outside.ids]
    piece_starts, piece_ends, events = self_pieces(outside, ~is_marker)
    in_loop = (piece_ends > loop[0]) & (piece_starts < loop[1])
    piece_starts, piece_ends, events = piece_starts[in_loop], piece_ends[in_loop], events[in_loop]
    work = outside_class <= _BUILTIN
    named = ~is_marker & (outside_class != _BUILTIN)
    dispatches = np.concatenate(([0], np.cumsum(event_class == _DISPATCH)))
    drives = (dispatches[subtree_end] - dispatches[np.arange(len(subtree_end)) + 1] > 0)[kept]
    # A builtin the stepping code calls itself (gc.collect, time.sleep) is such a call too: its caller runs the step.
    called = ~is_marker & work
    calls_from_step = called & ~drives & (outside.parents >= 0) & drives[np.maximum(outside.parents, 0)]
    owner = np.where((body := host_time.nearest(outside.parents, calls_from_step)) >= 0, body,
                     host_time.nearest(outside.parents, named))
    owns_copies = _copies_are_a_part(outside, outside_class == _HOST_TRANSFER)
    work = work | ((outside_class == _HOST_TRANSFER) & (body >= 0) & owns_copies[np.maximum(body, 0)])
    deciding = np.where(work & (owner >= 0), owner, np.arange(len(owner)))
    stride = len(names) + 1
    keys = np.where(work, _WORK, outside_class)[events] * stride + outside.ids[deciding[events]]
    piece_starts, piece_ends, keys = _merged(piece_starts, piece_ends, keys)
    if nested_calls:
        for chosen in (_COMPILE, _HOST_TRANSFER):
            flagged = event_class == chosen
            calls = np.flatnonzero(flagged & inside & (enclosed(subtree_end, flagged) == 0)
                                   & (line.ends > loop[0]) & (line.starts < loop[1]))
            piece_starts = np.concatenate((piece_starts, line.starts[calls]))
            piece_ends = np.concatenate((piece_ends, line.ends[calls]))
            keys = np.concatenate((keys, chosen * stride + line.ids[calls]))
        piece_starts, piece_ends, keys = _bridged_copies(line, event_class, inside, piece_starts, piece_ends, keys,
                                                         stride)
    distinct = _distinct(keys)
    thread = line.name or UNNAMED_THREAD
    key_label = np.array([labels.of(TimeCause.TRANSFERS, HOST_CALLBACK_PART)
                          if key // stride == _DISPATCH and launches_callbacks[key % stride] else
                          labels.of(TimeCause.TRANSFERS, names[key % stride], thread)
                          if key // stride == _DISPATCH and launches_read_back[key % stride] else
                          labels.of(_AS_CAUSE[key // stride], "" if key // stride == _WAIT else names[key % stride],
                                    thread) for key in distinct.tolist()], dtype=np.int32)
    key_tier = np.array([_HOST_TIER[key // stride] for key in distinct.tolist()], dtype=np.int8)
    found = np.searchsorted(distinct, keys)
    return _HostPieces(piece_starts, piece_ends, key_label[found], key_tier[found])


def _python_pieces(line: LineLike, names: Sequence[str], classes: np.ndarray, python: np.ndarray,
                   markers: np.ndarray, labels: _Labels, loop: tuple[int, int]) -> _HostPieces:
    """A thread's instants in its own Python code, where it holds the interpreter: its innermost event a Python
    function's frame (the Python tracer's; not a builtin or C function, a wait or a runtime call, which may let go
    of it), named by that function."""
    starts, ends, events = self_pieces(line, (classes[line.ids] == _WORK) & ~markers[line.ids] & python[line.ids])
    ids = line.ids[events]
    kept = (ends > loop[0]) & (starts < loop[1])
    starts, ends, ids = _merged(starts[kept], ends[kept], ids[kept])
    thread = line.name or UNNAMED_THREAD
    named = {int(i): labels.of(TimeCause.INTERPRETER, names[i], thread) for i in np.unique(ids).tolist()}
    label = np.array([named[int(i)] for i in ids.tolist()], dtype=np.int32)
    return _HostPieces(starts, ends, label, np.full(len(starts), _INTERPRETER, dtype=np.int8))


def _released_pieces(line: LineLike, classes: np.ndarray, loop: tuple[int, int]) -> _HostPieces:
    """The stepping thread's instants inside a builtin or C function, or a wait: a call that may let go of the
    interpreter. They mask the interpreter's tier and are never a cause (their label is unused)."""
    kind = classes[line.ids]
    starts, ends, _ = self_pieces(line, (kind == _BUILTIN) | (kind == _WAIT))
    kept = (ends > loop[0]) & (starts < loop[1])
    starts, ends, _ = _merged(starts[kept], ends[kept], np.zeros(int(kept.sum()), dtype=np.int64))
    return _HostPieces(starts, ends, np.zeros(len(starts), dtype=np.int32),
                       np.full(len(starts), _RELEASED, dtype=np.int8))


def _bridged_copies(line: LineLike, event_class: np.ndarray, inside: np.ndarray, starts: np.ndarray,
                    ends: np.ndarray, keys: np.ndarray, stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces with the untraced gaps between back-to-back copies added to the copies: a loop that copies
    array after array spends the time between two calls on the next call (its Python, its arguments), which no
    event records without the Python tracer."""
    copies = np.flatnonzero((event_class == _HOST_TRANSFER) & ~inside)
    if len(copies) < 2:
        return starts, ends, keys
    gap_starts, gap_ends = line.ends[copies[:-1]], line.starts[copies[1:]]
    # Nothing else begins between the two calls, and the gap is as short as a call's own overhead.
    nothing_between = np.searchsorted(line.starts, gap_ends, side="left") - np.searchsorted(
        line.starts, gap_starts, side="left") == 0
    bridged = nothing_between & (gap_ends > gap_starts) & (gap_ends - gap_starts <= BETWEEN_COPIES_NS)
    return (np.concatenate((starts, gap_starts[bridged])), np.concatenate((ends, gap_ends[bridged])),
            np.concatenate((keys, _HOST_TRANSFER * stride + line.ids[copies[1:]][bridged])))


def _copies_are_a_part(line: LineLike, copies: np.ndarray) -> np.ndarray:
    """Per event, whether the copies between host and device it makes (the ``copies`` among the events it
    encloses, itself included) take less than ``COPY_PART`` of its time: a save that copies the state off the
    device and then writes it is the save, its copy one part of it; a call that mostly copies is the copy."""
    length = (line.ends - line.starts).astype(np.float64)
    copied = np.concatenate(([0.0], np.cumsum(np.where(copies, length, 0.0))))
    inside = copied[subtree_ends(line)] - copied[np.arange(len(length))]
    return inside < COPY_PART * length


def _copies_to_device(line: LineLike, names: Sequence[str], classes: np.ndarray,
                      subtree_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The line's calls that copy arrays of known shapes to the device (the outermost, outside every other classed
    call but a jit dispatch, which copies the host arrays it is handed itself; none that also copies to the host),
    the bytes their events name (``BufferFromHostBuffer(f32[65536,1024])``), and which of the line's events wait on
    the device (``block_until_ready``, not another thread)."""
    event_class = classes[line.ids]
    enclosing = (event_class >= _COMPILE) & (event_class != _DISPATCH)
    calls = np.flatnonzero((event_class == _HOST_TRANSFER) & (enclosed(subtree_end, enclosing) == 0))
    name_bytes = np.zeros(len(names))
    to_device, to_host, device_wait = (np.zeros(len(names), dtype=bool) for _ in range(3))
    for index in _distinct(line.ids).tolist():
        name = names[index]
        name_bytes[index] = shape_bytes(name)
        direction = transfer_direction(name)
        to_device[index], to_host[index] = direction == "host to device", direction == "device to host"
        device_wait[index] = bool(WAITING.search(name)) and not THREAD_WAITING.search(name)
    # Over each call and the events it encloses (the indices up to its subtree's end): bytes, and directions.
    running = [np.concatenate(([0], np.cumsum(values[line.ids]))) for values in (name_bytes, to_device, to_host)]
    copied, device_bound, host_bound = (total[subtree_end[calls]] - total[calls] for total in running)
    one_way = (copied > 0) & (device_bound > 0) & (host_bound == 0)
    return calls[one_way], copied[one_way], device_wait[line.ids]


def _in_flight(line: LineLike, names: Sequence[str], classes: np.ndarray, markers: np.ndarray, labels: _Labels,
               busy_starts: np.ndarray, runtime_copies: tuple[np.ndarray, np.ndarray]) -> _HostPieces:
    """The stepping thread's copies to the device in flight: its quiet instants (no event but the step marker, a
    wait on the device such as ``block_until_ready``, or the own time of the code that made the call) after each
    call that copies to the device, up to when the copy is done, labelled as the call.

    The copy is done at the first of: a device busy again (one of ``busy_starts``: it has landed and a program
    runs); as long after the call's start as its arrays take at the slowest rate a copy runs (with the calls just
    before it, the other arrays of one batch, from the first one's start); and, where the runtime's threads record
    their work on it (``runtime_copies``: their transfer events that begin before the thread's next copy), when
    the last of that work ends. Such a copy holds the thread's quiet instants only where the thread or a device
    resumes when it is done (the thread waited for it, rather than working untraced while it ran); without such
    records, only up to the thread's next event that is neither a jit dispatch (the step launched on the copy)
    nor a wait on the device.
    """
    subtree_end = subtree_ends(line)
    calls, copied, waiting = _copies_to_device(line, names, classes, subtree_end)
    empty = _HostPieces.empty()
    if not len(calls):
        return empty
    # Quiet: the marker, waits on the device and what they enclose, and the code around the calls (their callers).
    quiet = markers[line.ids] | waiting | (enclosed(subtree_end, waiting) > 0)
    callers = line.parents[calls]
    while len(callers := callers[callers >= 0]):
        quiet[callers] = True
        callers = line.parents[callers]
    piece_starts, piece_ends, _ = self_pieces(line, ~quiet)
    order = np.argsort(piece_starts, kind="stable")
    loud_starts, loud_ends = piece_starts[order], np.maximum.accumulate(piece_ends[order])
    starts, call_ends = line.starts[calls], line.ends[calls]
    next_call = np.append(starts[1:], np.iinfo(np.int64).max)
    # Calls in a burst (each within a moment of the last: the arrays of one batch) are in flight together: a call
    # may wait for all the burst has copied so far, from the burst's first call.
    burst = np.cumsum(np.concatenate(([True], starts[1:] - call_ends[:-1] > RESUMES_WITHIN_NS))) - 1
    first_call = np.flatnonzero(np.concatenate(([True], burst[1:] != burst[:-1])))
    so_far = np.cumsum(copied) - np.concatenate(([0], np.cumsum(copied)))[first_call][burst]
    done = np.minimum(_next(busy_starts, call_ends),
                      starts[first_call][burst] + (so_far / MIN_COPY_BYTES_PER_NS).astype(np.int64))
    runtime_starts, runtime_ends = runtime_copies
    first, last = np.searchsorted(runtime_starts, starts), np.searchsorted(runtime_starts, next_call)
    recorded = last > first
    landed = np.zeros(len(calls), dtype=np.int64)
    if recorded.any():
        latest = np.maximum.accumulate(runtime_ends)  # runtime_ends in start order: the latest end so far
        landed[recorded] = latest[last[recorded] - 1]
    passing = waiting | (classes[line.ids] == _DISPATCH)
    moved_on = _next(line.starts[~markers[line.ids] & ~passing & (enclosed(subtree_end, passing) == 0)], call_ends)
    done = np.where(recorded, np.minimum(done, landed), np.minimum(done, moved_on))
    # Where the runtime records the copy: the thread's next loud instant from when it is done, or a device busy.
    next_loud = np.append(loud_starts, np.iinfo(np.int64).max)[np.searchsorted(loud_ends, done, side="right")]
    resumes = np.minimum(np.maximum(next_loud, done), _next(busy_starts, done))
    waited = ~recorded | (resumes - done <= RESUMES_WITHIN_NS)
    ends = np.minimum(done, next_call)
    kept = waited & (ends > call_ends)
    if not kept.any():
        return empty
    windows_starts, windows_ends = call_ends[kept], ends[kept]
    quiet_starts = np.concatenate(([windows_starts[0]], loud_ends))
    quiet_ends = np.concatenate((loud_starts, [windows_ends[-1]]))
    open_ = quiet_ends > quiet_starts
    held_starts, held_ends = host_time.intersection(windows_starts, windows_ends, quiet_starts[open_],
                                                    quiet_ends[open_])
    window = np.searchsorted(windows_starts, held_starts, side="right") - 1
    thread = line.name or UNNAMED_THREAD
    call_labels = np.array([labels.of(TimeCause.TRANSFERS, names[line.ids[call]], thread)
                            for call in calls[kept].tolist()], dtype=np.int32)
    return _HostPieces(held_starts, held_ends, call_labels[window],
                       np.full(len(held_starts), _IN_FLIGHT, dtype=np.int8))


def _runtime_copies(others: list[_HostPieces]) -> tuple[np.ndarray, np.ndarray]:
    """Other threads' work on copies between host and device (the runtime's relayout and transfers), in start order:
    (starts, ends)."""
    chosen = [p.tiers == _HOST_TIER[_HOST_TRANSFER] for p in others]
    starts = np.concatenate([p.starts[c] for p, c in zip(others, chosen)] or [np.zeros(0, np.int64)])
    ends = np.concatenate([p.ends[c] for p, c in zip(others, chosen)] or [np.zeros(0, np.int64)])
    order = np.argsort(starts, kind="stable")
    return starts[order], ends[order]


def _next(times: np.ndarray, since: np.ndarray) -> np.ndarray:
    """For each of ``since``, the first of the sorted ``times`` at or after it (the largest int64 where none is)."""
    after = np.searchsorted(times, since, side="left")
    found = after < len(times)
    return np.where(found, times[np.minimum(after, len(times) - 1)] if found.any() else 0, np.iinfo(np.int64).max)


def _merged(starts: np.ndarray, ends: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One line's pieces in time order, each run of touching pieces with the same label made one (a dispatch's
    dozen runtime calls are one piece of dispatch), so that the sweep has fewer boundaries."""
    order = np.argsort(starts, kind="stable")
    starts, ends, labels = starts[order], ends[order], labels[order]
    opens = np.ones(len(starts), dtype=bool)
    opens[1:] = (labels[1:] != labels[:-1]) | (starts[1:] != ends[:-1])
    run = np.cumsum(opens) - 1
    run_ends = np.zeros(int(opens.sum()), dtype=ends.dtype)
    np.maximum.at(run_ends, run, ends)
    return starts[opens], run_ends, labels[opens]


@dataclass
class Window:
    """A loop window, the devices whose loop it is (devices with steps of their own have loops of their own), and
    where its steps start: each step runs to the next one's start (the gap after it included), the last to the
    window's end."""

    loop: tuple[int, int]
    devices: list[Device]
    step_starts: np.ndarray

    @property
    def step_ns(self) -> np.ndarray:
        return np.diff(np.append(np.clip(self.step_starts, *self.loop), self.loop[1])).astype(np.float64)


@dataclass
class _Host:
    """The host's pieces, labelled: the stepping thread's and, for its waits, the other threads'; the other threads'
    own Python code, for its need of the interpreter, and where it needs none."""

    stepping: _HostPieces
    in_flight: _HostPieces
    others: list[_HostPieces]
    python: list[_HostPieces]
    released: _HostPieces
    untraced: int  # the label of the loop time no host piece explains


def attribute(*, names: Sequence[str], windows: list[Window], steps: int, busy_name: np.ndarray,
              runtime_name: np.ndarray, hints: dict[int, str], stepping: LineLike | None,
              other_threads: list[LineLike], markers: set[int],
              launches_callbacks: np.ndarray | None = None,
              launches_read_back: np.ndarray | None = None) -> Attribution:
    """The loop's wall time by cause (see the module's docstring); ``busy_name`` and ``runtime_name`` are masks
    over name ids: what counts as a device being busy, and which busy events are the runtime's rather than ops.
    ``launches_callbacks`` marks the jit dispatches of programs that call back to the host: their launch time is the
    callbacks' (such a launch takes milliseconds where one without callbacks takes tens of microseconds, and goes
    with them). ``launches_read_back`` marks the jit dispatches of a function whose every launch the thread reads
    back before the next (:mod:`~mldiag.analysis.loop.read_loops`): their time is that thread's copies', one cost
    with the reads (each launch waits for the read of the last one's result, and running the loop on the device
    removes both).

    Each device is attributed over its own window and the parts averaged over the devices (a window without
    devices counts as one), so that they sum to the mean window.
    """
    labels = _Labels()
    devices = [device for window in windows for device in window.devices]
    present = _distinct(np.concatenate([lane.ids for device in devices for lane in device.lanes]
                                       or [np.zeros(0, np.int64)]))
    device_label, device_tier = _device_labels(names, present, hints, labels, runtime_name)
    label_tier = np.zeros(len(labels.keys), dtype=np.int64)
    label_tier[device_label[present]] = device_tier[present]
    classes = _host_classes(names, markers)
    is_marker = np.zeros(len(names), dtype=bool)
    is_marker[list(markers)] = True
    python = np.array([bool(PYTHON_FUNCTION.match(name)) for name in names], dtype=bool)
    span = (min(w.loop[0] for w in windows), max(w.loop[1] for w in windows))
    empty = _HostPieces.empty()
    unmarked = np.zeros(len(names), dtype=bool)
    callbacks = unmarked if launches_callbacks is None else launches_callbacks
    read_back = unmarked if launches_read_back is None else launches_read_back
    of_others = [_host_pieces(line, names, classes, is_marker, labels, span, callbacks, read_back,
                              nested_calls=False) for line in other_threads]
    runtime_copies = _runtime_copies(of_others)
    others = [_HostPieces(p.starts[chosen], p.ends[chosen], p.labels[chosen],
                          np.full(int(chosen.sum()), tier, dtype=np.int8))
              for p in of_others
              for chosen, tier in ((p.tiers != _HOST_TIER[_WAIT], _OTHER_THREADS),  # a thread waiting explains nothing
                                   (p.tiers == _HOST_TIER[_HOST_TRANSFER], _OTHER_TRANSFERS))]
    del of_others  # the other threads' pieces are held once, as the tiers they take
    thread = stepping.name if stepping else ""
    host = _Host(
        stepping=_host_pieces(stepping, names, classes, is_marker, labels, span, callbacks, read_back,
                              nested_calls=True)
        if stepping else empty,
        in_flight=_in_flight(stepping, names, classes, is_marker, labels,
                             _distinct(np.concatenate([d.busy.starts for d in devices] or [np.zeros(0, np.int64)])),
                             runtime_copies) if stepping else empty,
        others=others,
        python=[_python_pieces(line, names, classes, python, is_marker, labels, span) for line in other_threads],
        released=_released_pieces(stepping, classes, span) if stepping else empty,
        untraced=labels.of(TimeCause.UNTRACED, "", thread))
    loop_ns = 0.0
    step_ns = np.zeros(max(len(window.step_starts) for window in windows))
    rows = []
    weight_of = 1.0 / sum(max(1, len(w.devices)) for w in windows)
    for window in windows:
        weight = max(1, len(window.devices)) * weight_of
        loop_ns += weight * (window.loop[1] - window.loop[0])
        step_ns[: len(window.step_starts)] += weight * window.step_ns
        rows.append(_host_time(host, window).scaled(weight))
        rows += [_device_time(device, device_label, label_tier, busy_name, window).scaled(weight_of)
                 for device in window.devices]
    # The pieces and each window's rows, up to millions apiece, go before the parts are made of the rows joined.
    del host
    times = _Times.joined(rows)
    rows.clear()
    return Attribution(loop_ms=loop_ns / 1e6, steps=steps,
                       parts=_parts(labels.keys, times, loop_ns, step_ns,
                                    (thread or UNNAMED_THREAD) if stepping else ""))


def _host_time(host: _Host, window: Window) -> _Times:
    """The time the host's causes take of the window's instants when its devices idle (their mean), per label and
    step."""
    pieces = [host.stepping, host.in_flight, *host.others, *host.python, host.released]
    tiers = np.concatenate([p.tiers for p in pieces])
    sweep = _Sweep.of([p.starts for p in pieces], [p.ends for p in pieces], tiers, _RELEASED + 1, window)
    idle = sweep.lengths
    if window.devices:
        intervals = np.column_stack((sweep.bounds[:-1], sweep.bounds[1:]))
        idle = idle - np.mean([device.busy.covered(intervals) for device in window.devices], axis=0)
        del intervals
    waiting = sweep.counts[_HOST_TIER[_WAIT]] > 0
    # Other threads explain only the stepping waits; waiting on something else, or in a call that may let go of
    # the interpreter, the thread needs none (the row of a tier no piece has is zero, and left untouched).
    if _OTHER_THREADS in sweep.present:
        sweep.counts[_OTHER_THREADS, ~waiting] = 0
    if _INTERPRETER in sweep.present:
        sweep.counts[_INTERPRETER, waiting | (sweep.counts[_RELEASED] > 0) | (sweep.counts[_IN_FLIGHT] > 0)] = 0
    piece, step, time, unexplained = sweep.per_piece_and_step(idle, range(_RELEASED), tiers)
    steps = len(window.step_starts)
    untraced = np.bincount(sweep.interval_steps, weights=unexplained, minlength=steps)
    return _Times(np.concatenate((np.concatenate([p.labels for p in pieces])[piece], np.full(steps, host.untraced))),
                  np.concatenate((step, np.arange(steps))), np.concatenate((time, untraced)))


def _labels_merged(keys: list[tuple[TimeCause, str, str]], totals: np.ndarray,
                   stepping: str) -> tuple[list[tuple[TimeCause, str, str]], np.ndarray]:
    """Each host thread's copies as one label, named by its costliest calls (a round trip's two directions and
    a copy's wait in flight are one cost, of one thread), and one function's work on several threads other than
    ``stepping`` (a pool's) as one label of those threads: the merged labels, and each label's merged one."""
    merged: list[tuple[TimeCause, str, str]] = []
    merged_of = np.zeros(len(keys), dtype=np.int64)
    index: dict[tuple[TimeCause, str, str], int] = {}
    calls: dict[int, list[tuple[float, str]]] = {}
    threads: dict[int, list[tuple[float, str]]] = {}
    for label, ((cause, name, thread), total) in enumerate(zip(keys, totals[: len(keys)].tolist())):
        copies = cause is TimeCause.TRANSFERS and bool(thread)
        pooled = cause in (TimeCause.HOST_WORK, TimeCause.INTERPRETER) and bool(thread) and thread != stepping
        key = (cause, "", thread) if copies else (cause, name, "") if pooled else (cause, name, thread)
        if key not in index:
            index[key] = len(merged)
            merged.append(key)
        merged_of[label] = index[key]
        if copies and total > 0:
            calls.setdefault(index[key], []).append((total, name))
        if pooled and total > 0:
            threads.setdefault(index[key], []).append((total, thread))
    for at, named in calls.items():
        cause, _, thread = merged[at]
        merged[at] = (cause, " + ".join(name for _, name in sorted(named, key=lambda c: -c[0])[:MAX_COPY_NAMES]),
                      thread)
    for at, working in threads.items():
        cause, name, _ = merged[at]
        ranked = [thread for _, thread in sorted(working, key=lambda w: -w[0])]
        more = f" and {len(ranked) - MAX_THREAD_NAMES} more" if len(ranked) > MAX_THREAD_NAMES else ""
        merged[at] = (cause, name, ", ".join(ranked[:MAX_THREAD_NAMES]) + more)
    return merged, merged_of


def _parts(keys: list[tuple[TimeCause, str, str]], times: _Times, loop_ns: float, step_ns: np.ndarray,
           stepping: str) -> list[TimePart]:
    """Parts merged by (cause, name, thread), a host thread's copies by thread and other threads' same work as one
    (:func:`_labels_merged`), largest first: the top ones, and
    the rest of each cause as one; each with its share of the loop and the distribution of its share of each step
    (``step_ns``: their lengths)."""
    keys, merged_of = _labels_merged(keys, np.bincount(times.labels, weights=times.ns, minlength=len(keys)),
                                     stepping)
    labels = merged_of[times.labels]
    totals = np.bincount(labels, weights=times.ns, minlength=len(keys))
    order = [int(i) for i in np.argsort(-totals[: len(keys)], kind="stable") if totals[i] > 0]
    top, rest = order[:TOP_PARTS], order[TOP_PARTS:]
    groups = [(keys[i], [i]) for i in top]
    rest_by_cause: dict[TimeCause, list[int]] = {}
    for index in rest:
        rest_by_cause.setdefault(keys[index][0], []).append(index)
    groups += [((cause, OTHER, ""), members) for cause, members in rest_by_cause.items()]
    groups.sort(key=lambda group: -float(totals[group[1]].sum()))
    part_of = np.full(len(keys), -1, dtype=np.int64)
    for index, (_, members) in enumerate(groups):
        part_of[members] = index
    kept = part_of[labels] >= 0
    steps = len(step_ns)
    by_step = np.bincount(part_of[labels[kept]] * steps + times.steps[kept], weights=times.ns[kept],
                          minlength=len(groups) * steps).reshape(len(groups), steps)
    timed = step_ns > 0
    step_shares = np.clip(by_step[:, timed] / step_ns[timed], 0.0, 1.0)
    scale = max(loop_ns, 1)
    return [TimePart(cause=cause, name=name, thread=thread, ms=float(totals[members].sum()) / 1e6,
                     share=min(1.0, float(totals[members].sum()) / scale), useful=cause is TimeCause.DEVICE_COMPUTE,
                     step_share=Distribution.of(shares.tolist()))
            for ((cause, name, thread), members), shares in zip(groups, step_shares)]
