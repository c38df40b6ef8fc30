"""Signals from the raw trace events of one ``<host>.xplane.pb``.

XProf's device tools are empty on CPU profiles (XLA ops there are host events on
``tf_XLA*`` threads) and its bottleneck text cannot tell an input-starved loop
from a busy one, so the basic facts are read from the events themselves, on
every kind of profile:

* **steps**: the host's step markers (``StepTraceAnnotation``), else each
  device's own ``Steps`` line, else one step per iteration of the sequence of
  whole programs the loop repeats (train then eval, micro-batches then their
  apply), else one step per call of the program the loop calls again and again
  (start to start), else no steps: one window from the first program launch,
  with each program's calls and device work;
* **warm-up and slow steps**: the leading steps that compile programs for their
  first call, the compilations that are recompiles, and the group of steps well
  above the median with what the stepping thread runs longer in them
  (:mod:`mldiag.analysis.loop.step_groups`);
* **busy**: per step, the union of the compute lanes' events (XLA CPU threads,
  TPU ``XLA Ops`` lines, GPU streams), each device in its own steps, averaged
  over devices; and over the whole loop, the gaps between steps included;
* **host**: gaps between steps and the work that fills them, what the host does
  inside steps (each function's own time while the devices idle and the function
  inside that owns it, :mod:`~mldiag.analysis.loop.host_time`), jit dispatches
  (``PjitFunction``, the outermost per call), compilation, copies between host and
  device, what other threads do while the stepping thread waits, and the loop
  time nothing on the host records;
* **ops**: self time of each XLA op per device, the time of collectives, and the
  converts, copies and reshapes.

A large profile has millions of events, so each line is read once into numpy
arrays (start, end, name id; :func:`~mldiag.analysis.profile.xspace.read_planes` decodes
them without an object per event) and every signal is an array operation;
anything that depends on an event's name is decided once per distinct name.

``python -m mldiag.analysis.loop.raw_events FILE [TIMELINE]`` prints the evidence as
JSON (exit 3 with the reason for a file that is not a profile) and saves every
event of the file in TIMELINE for the follow-up aggregation: the engine reads
each host in a process of its own, whose memory is gone the moment it is done.
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from mldiag.analysis.host_evidence import (
    Attribution,
    DeviceKind,
    Distribution,
    HostActivity,
    HostEvidence,
    OpFamily,
    OpTime,
    OwnTime,
    ProgramCalls,
    RecompileCost,
    SlowSteps,
    StepDifference,
    StepSeries,
    StepSource,
    Warmup,
)
from mldiag.analysis.loop import host_time
from mldiag.analysis.loop.attribution import (
    CONSUMER_ROLE,
    CONSUMER_THREAD,
    LOADER_ROLE,
    LOADER_THREAD,
    SAVER_ROLE,
    SAVER_THREAD,
    UNNAMED_THREAD,
    Device,
    Window,
    attribute,
)
from mldiag.analysis.loop.read_loops import read_after_each_launch
from mldiag.analysis.loop.step_groups import (
    MAX_MICRO_BATCHES,
    MIN_REPEATS,
    iteration_start,
    leading_warmup,
    occasional,
    repeating_period,
    slow_split,
    whole_programs,
)
from mldiag.analysis.profile.profiles import UNREADABLE_EXIT, UnreadableProfile, host_of
from mldiag.analysis.profile.timeline import Timeline, TimelineLine
from mldiag.analysis.profile.trace_names import (
    ALLOCATOR_EVENTS,
    COMPILE,
    CPU_DEVICE_EXECUTION,
    CPU_RUNTIME_SCOPE,
    DEVICE_READ,
    DISPATCH_PREFIX,
    FAMILIES,
    HOST_CALLBACK,
    NOT_AN_OP,
    NOT_BUSY,
    PROGRAM_DONE,
    QUEUE_GET,
    QUEUE_PUT,
    SAVING,
    THREAD_WAITING,
    TRANSFER,
    TRANSFER_WORK,
    WAITING,
    collective,
    program_base,
)
from mldiag.analysis.profile.xspace import Line, MalformedXSpace, Plane, read_planes

MAX_SERIES = 1000
TOP_OPS = 60
TOP_ACTIVITIES = 10
TOP_PROGRAMS = 10
MAX_OWNERS = 5  # functions named as holding a host activity's own time
OWNER_FLOOR = 0.05  # share of the activity's own time below which a holder is not named
STEP_PROGRAM_REPEATS = 4  # a step program is called at least this many times as often as any other
NAMED_DIFFERENCE = 0.5  # slow-step differences named: those of at least this share of the largest
CAUSE_DIFFERENCE = 0.9  # the cause: the innermost event of at least this share of the largest difference
MAX_DIFFERENCES = 5
# The XLA CPU client's run of a program's thunks; on a host thread that is not one of its own, the program runs
# inline there (a short program, or a host callback's wait), and that thread computes meanwhile.
INLINE_PROGRAM = "ThunkExecutor::Execute"
RESUMES_WITHIN_WAIT = 0.1  # a thread that resumes this share of its wait after a program completes waited for it
FirstSeen = Callable[[int, dict[str, Any]], None]  # told each new name's id and the stats of its first event
_HLO_NAME = re.compile(r"^%?([^\s=]+)\s+=")
_EVENTS_AT_ONCE = 1 << 16  # events worked on together where each needs columns of its own (:func:`_idle_within`)


@dataclass
class _Line:
    """One trace line: events in start order, and how they nest."""

    name: str
    starts: np.ndarray
    ends: np.ndarray
    ids: np.ndarray  # index into _Trace.names, int32 (as ``parents``: a line holds up to millions of events)
    # A compute lane's: the program each event runs, as an index into _Trace.modules (-1 where unknown).
    modules: np.ndarray | None = None
    parents: np.ndarray = field(init=False)  # index of the enclosing event, -1 at the top

    def __post_init__(self) -> None:
        if not _in_order(self.starts, self.ends):
            order = np.lexsort((-self.ends, self.starts))
            self.starts, self.ends, self.ids = self.starts[order], self.ends[order], self.ids[order]
            if self.modules is not None:
                self.modules = self.modules[order]
        self.parents = _parents(self.starts, self.ends)

    def __len__(self) -> int:
        return len(self.starts)

    def self_ns(self) -> np.ndarray:
        """Each event's duration minus that of its direct children."""
        own = self.ends - self.starts
        nested = self.parents >= 0
        np.subtract.at(own, self.parents[nested], (self.ends - self.starts)[nested])
        return own


def _in_order(starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether events are in (start, -end) order already, as a stable sort would leave them."""
    later = starts[1:] > starts[:-1]
    return bool((later | ((starts[1:] == starts[:-1]) & (ends[1:] <= ends[:-1]))).all())


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The enclosing event of each event of one thread, events in (start, -end) order.

    An event's parent is the nearest earlier-starting event that is still open
    when it ends. Events that overlap without nesting (a Python-tracer event that
    ends a microsecond after the next scope begins) are siblings: neither is the
    other's parent. Each event points at the event before it and jumps, while
    that one ends too early, to where that one points (everything skipped ends
    earlier still), so a pass costs one array operation and the passes needed
    grow with the nesting depth and the logarithm of the count.
    """
    count = len(starts)
    parents = np.arange(-1, count - 1, dtype=np.int32)
    # An instant event needs a parent open past its time; one that closes at that moment is not.
    needed = ends + (ends == starts)
    pending = np.arange(count, dtype=np.int64)
    while len(pending):
        candidate = parents[pending]
        too_early = candidate >= 0
        too_early[too_early] = ends[candidate[too_early]] < needed[pending[too_early]]
        pending = pending[too_early]
        parents[pending] = parents[candidate[too_early]]
    return parents


@dataclass
class _Trace:
    """A profile's lines by role, and its distinct event names."""

    names: list[str] = field(default_factory=list)
    device_kind: DeviceKind = DeviceKind.CPU
    device_type: str = "CPU"
    idle_accelerator: str = ""  # an accelerator the process had while XLA computed on the host's CPU
    lanes: dict[str, list[_Line]] = field(default_factory=dict)  # device -> its compute lines
    host_lines: list[_Line] = field(default_factory=list)
    device_steps: dict[str, _Line] = field(default_factory=dict)  # device -> its own "Steps" line
    program_runs: dict[str, _Line] = field(default_factory=dict)  # device -> its "XLA Modules" line (TPU)
    markers: set[int] = field(default_factory=set)  # name ids of step markers
    cpu_devices: set[int] = field(default_factory=set)  # devices the XLA CPU client executed programs on
    modules: list[str] = field(default_factory=list)  # programs the compute lanes' events name, as program_base
    xla_ops: set[int] = field(default_factory=set)  # name ids of the XLA CPU client's ops (events with an hlo_op)
    hlo_op_of: dict[int, str] = field(default_factory=dict)  # GPU kernel -> the HLO op it runs
    hlo_category_of: dict[int, str] = field(default_factory=dict)  # TPU op -> its HLO category ("convolution", ...)

    @property
    def events(self) -> int:
        return sum(len(line) for lines in self.lanes.values() for line in lines) + sum(
            len(line) for line in self.host_lines
        )

    def mask(self, predicate: Any) -> np.ndarray:
        """A boolean per name id: does ``predicate(name)`` hold."""
        return np.fromiter((bool(predicate(name)) for name in self.names), dtype=bool, count=len(self.names))


class _Reader:
    """Reads lines into arrays, numbering names and noticing each name's first event.

    With ``keeps_timeline``, every event of every line it reads, instant ones
    included, is also kept for the :class:`~mldiag.analysis.profile.timeline.Timeline`;
    names that only such events carry are numbered apart (negative ids), so that
    the evidence's numbering stays that of the events it reads.
    """

    def __init__(self, trace: _Trace, *, keeps_timeline: bool):
        self.trace = trace
        self.ids: dict[str, int] = {}
        self.timeline_ids: dict[str, int] = {}  # names of events only the timeline keeps -> -1, -2, ...
        self.keeps_timeline = keeps_timeline
        # id(line) -> every event's name id, and its duration as the timeline keeps it (:meth:`timeline`)
        self.kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def line(self, line: Line, first_seen: FirstSeen | None = None, *, timed_only: bool = False,
             with_modules: bool = False) -> _Line:
        """The line's events as arrays; ``timed_only`` drops instant events (markers that take no time), and
        ``with_modules`` reads the program each event runs (:meth:`_runs_modules`)."""
        every_id = self._events(line, first_seen, timed_only=timed_only)
        # Each of the line's file columns goes as soon as it is read, and none is copied where a view serves: a
        # line holds up to millions of events.
        line.release("metadata_ids")
        is_evidence = every_id >= 0
        evidence: slice | np.ndarray = slice(None) if is_evidence.all() else np.flatnonzero(is_evidence)
        del is_evidence
        begin = line.starts_ns[evidence]
        end = line.durations_ps[evidence]
        end = end // 1000 if isinstance(evidence, slice) else np.floor_divide(end, 1000, out=end)
        end += begin
        line.release("starts_ns", "durations_ps")
        positions: slice | np.ndarray = evidence  # the line's positions in the order read
        if not _in_order(begin, end):  # sorted here, as _Line sorts its events, each column replaced at once
            order = np.lexsort((-end, begin))
            begin, end = begin[order], end[order]
            positions = order if isinstance(evidence, slice) else evidence[order]
            del order
        del evidence
        ids = every_id[positions]
        del every_id
        if not with_modules:
            del positions
            line.release()  # read: its events' places in the file go before the _Line finds how its events nest
            return _Line(line.name, begin, end, ids)
        read = _Line(line.name, begin, end, ids)
        if isinstance(positions, slice):
            positions = np.arange(len(line))
        read.modules = self._runs_modules(line, read, positions)
        line.release()
        return _with_modules(read)

    def _runs_modules(self, line: Line, read: _Line, positions: np.ndarray) -> np.ndarray:
        """The program of each outermost event of ``read`` (a run of a program's thunks, or an op run alone), from
        its own ``hlo_module`` stat or else from its first child's, -1 elsewhere: everything a run encloses
        belongs to its program (:func:`_with_modules`), so a line of millions of ops is read a few events per
        run, not an event at a time."""
        modules = np.full(len(read), -1, dtype=np.int64)
        outermost = np.flatnonzero(read.parents < 0)
        modules[outermost] = self._modules(line, positions[outermost])
        unnamed = outermost[modules[outermost] < 0]
        first_child = unnamed + 1  # events sorted by start, the longest first: a child follows its parent
        inside = first_child < len(read)
        inside[inside] = read.parents[first_child[inside]] == unnamed[inside]
        modules[first_child[inside]] = self._modules(line, positions[first_child[inside]])
        return modules

    def _modules(self, line: Line, positions: np.ndarray) -> np.ndarray:
        """The program each event at ``positions`` runs, by its ``hlo_module`` stat, as an index into the
        trace's modules (-1 where the event names none)."""
        index: dict[str, int] = {name: i for i, name in enumerate(self.trace.modules)}
        of_stat: dict[Any, int] = {}  # each stat value's index: a program runs its ops again and again
        modules = np.full(len(positions), -1, dtype=np.int64)
        for row, module in enumerate(line.own_stat("hlo_module", positions)):
            if not module:
                continue
            if module not in of_stat:
                base = program_base(str(module))
                if base not in index:
                    index[base] = len(self.trace.modules)
                    self.trace.modules.append(base)
                of_stat[module] = index[base]
            modules[row] = of_stat[module]
        return modules

    def _events(self, line: Line, first_seen: FirstSeen | None = None, *, timed_only: bool = False,
                timeline_only: bool = False) -> np.ndarray:
        """Each event's name id (negative for events only the timeline keeps)."""
        if timeline_only:
            apart = np.ones(len(line), dtype=bool)
        elif timed_only:  # under a whole nanosecond, without a nanosecond column
            apart = (0 <= line.durations_ps) & (line.durations_ps < 1000)
        else:
            apart = np.zeros(len(line), dtype=bool)
        every_id = np.empty(len(line), dtype=np.int32)
        for chosen, numbered in ((~apart, self._numbered), (apart, self._numbered_apart)):
            # Mostly every event of the line is chosen (a host thread's millions): then taken whole, not copied.
            positions: slice | np.ndarray = slice(None) if chosen.all() else np.flatnonzero(chosen)
            metadata_ids, first, inverse = np.unique(line.metadata_ids[positions], return_index=True,
                                                     return_inverse=True)
            ids = np.empty(len(metadata_ids), dtype=np.int32)
            for distinct in np.argsort(first):  # names are numbered in the order their first events come
                name = line.plane.event_names.get(int(metadata_ids[distinct]), "")
                position = int(first[distinct]) if isinstance(positions, slice) else int(positions[first[distinct]])
                ids[distinct] = numbered(name, line, position, first_seen)
            every_id[positions] = ids[inverse]
        if self.keeps_timeline:
            # As XProf computes it: its reader's nanoseconds (picoseconds / 1000.0) times 1000, truncated.
            self.kept[id(line)] = (every_id, _as_xprof_times(line.durations_ps))
        return every_id

    def _numbered(self, name: str, line: Line, position: int, first_seen: FirstSeen | None) -> int:
        index = self.ids.get(name)
        if index is None:
            index = self.ids[name] = len(self.trace.names)
            self.trace.names.append(name)
            if first_seen is not None:
                first_seen(index, line.stats(position))
        return index

    def _numbered_apart(self, name: str, *_: Any) -> int:
        index = self.timeline_ids.get(name)
        if index is None:
            index = self.timeline_ids[name] = -1 - len(self.timeline_ids)
        return index

    def timeline(self, planes: list[Plane]) -> Timeline:
        """Every event of ``planes``, lines the evidence skipped included; the planes' lines are let go on the
        way (:meth:`_every_line`)."""
        kept = self._every_line(planes)
        names = list(self.trace.names)
        index_of = dict(self.ids)
        for name in self.timeline_ids:
            if name not in index_of:
                index_of[name] = len(names)
                names.append(name)
        apart = np.array([index_of[name] for name in self.timeline_ids] or [0], dtype=np.int32)
        for _, _, ids, _ in kept:
            numbered_apart = ids < 0
            ids[numbered_apart] = apart[-1 - ids[numbered_apart]]
        return Timeline(names, [TimelineLine(*line) for line in kept])

    def _every_line(self, planes: list[Plane]) -> list[tuple[str, str, np.ndarray, np.ndarray]]:
        """What the timeline keeps of each line of ``planes``, in file order: (plane, line, name ids, durations);
        each plane's lines unlinked once kept."""
        kept = []
        for plane in planes:
            for line in plane.lines:
                if id(line) not in self.kept:
                    self._events(line, timeline_only=True)
                    line.release()
                kept.append((plane.name, line.name, *self.kept.pop(id(line))))
            plane.lines.clear()
        return kept


def _as_xprof_times(durations_ps: np.ndarray) -> np.ndarray:
    """Durations as XProf computes them: its reader's nanoseconds (picoseconds / 1000.0) times 1000, truncated;
    a block of events at a time, so that no float column of a whole line is held."""
    times = np.empty(len(durations_ps), dtype=np.int64)
    for first in range(0, len(durations_ps), _EVENTS_AT_ONCE):
        block = slice(first, first + _EVENTS_AT_ONCE)
        times[block] = durations_ps[block] / 1000.0 * 1000
    return times


def _read(path: Path, timeline: Path | None = None) -> _Trace:
    try:
        planes = read_planes(path)
    except MalformedXSpace as error:
        raise UnreadableProfile(f"{path.name}: not a readable XSpace protobuf ({error})") from error
    trace = _Trace()
    reader = _Reader(trace, keeps_timeline=timeline is not None)
    _read_lines(planes, trace, reader)
    if trace.events == 0:
        raise UnreadableProfile(f"{path.name}: the profile has no trace events")
    if timeline is not None:
        reader.timeline(planes).save(timeline)
    for plane in planes:  # a line and its plane refer to each other: unlinked, the file's columns go on return
        plane.lines.clear()
    return trace


def _read_lines(planes: list[Plane], trace: _Trace, reader: _Reader) -> None:
    """The lines the evidence reads, by role: each device's compute lanes, steps and program runs, then the
    host's threads (and its compute lanes, where XLA runs on the host's CPU)."""

    def note_hlo_op(index: int, stats: dict[str, Any]) -> None:
        if stats.get("hlo_op"):
            trace.hlo_op_of[index] = str(stats["hlo_op"])
        if stats.get("hlo_category"):
            trace.hlo_category_of[index] = str(stats["hlo_category"])

    for plane in planes:
        if not plane.name.startswith(("/device:TPU:", "/device:GPU:")):
            continue
        lines = {line.name: line for line in plane.lines}
        op_lines = [lines["XLA Ops"]] if "XLA Ops" in lines else [
            line for name, line in lines.items() if name.startswith("Stream #")
        ]
        # Compute lanes carry time only; their instant markers (half the events on XLA CPU threads) add none.
        lanes = [lane for lane in (reader.line(line, note_hlo_op, timed_only=True) for line in op_lines) if len(lane)]
        if all("Memcpy" in lane.name for lane in lanes):  # no lanes, or a device that only receives copies
            continue
        for lane in lanes:
            lane.name = f"{plane.name}/{lane.name}"
        trace.lanes[plane.name] = lanes
        for by_device, line_name in ((trace.device_steps, "Steps"), (trace.program_runs, "XLA Modules")):
            if line_name in lines and len(found := reader.line(lines[line_name])):
                by_device[plane.name] = found
        if trace.device_kind is DeviceKind.CPU:
            is_gpu = plane.name.startswith("/device:GPU:")
            trace.device_kind = DeviceKind.GPU if is_gpu else DeviceKind.TPU
            trace.device_type = _device_type(trace.device_kind, plane.stats)

    def note_marker(index: int, stats: dict[str, Any]) -> None:
        if "step_num" in stats:
            trace.markers.add(index)
        if (device := CPU_DEVICE_EXECUTION.match(trace.names[index])) is not None:
            trace.cpu_devices.add(int(device.group(1)))
        if stats.get("hlo_op"):
            trace.xla_ops.add(index)

    xla_runs_on_host = not trace.lanes
    if xla_runs_on_host:
        trace.idle_accelerator = _idle_accelerator(planes)
    host_lines = next((plane.lines for plane in planes if plane.name == "/host:CPU"), [])
    for line in host_lines:
        is_lane = xla_runs_on_host and line.name.startswith("tf_XLA")
        events = reader.line(line, note_marker, timed_only=is_lane, with_modules=is_lane)
        if is_lane:
            events.name = f"/host:CPU/{line.name}"
            trace.lanes.setdefault("/host:CPU", []).append(events)
        else:
            trace.host_lines.append(events)
            if xla_runs_on_host and len(inline := _inline_program(trace, events)):
                trace.lanes.setdefault("/host:CPU", []).append(inline)


def _idle_accelerator(planes: list[Plane]) -> str:
    """The accelerator of a profile whose programs all ran on the host's CPU: a device plane without compute
    lanes, or a chip's own plane (a TPU's "#Chip0 ..." counters) naming its type; "" for a machine without one."""
    for plane in planes:
        if plane.name.startswith(("/device:TPU:", "/device:GPU:")) or "device_type_string" in plane.stats:
            kind = DeviceKind.GPU if plane.name.startswith("/device:GPU:") else DeviceKind.TPU
            return _device_type(kind, plane.stats)
    return ""


def _inline_program(trace: _Trace, line: _Line) -> _Line:
    """The programs the XLA CPU client runs inline on a host thread (the thread that launched them, rather than
    one of its own): each :data:`INLINE_PROGRAM` run, or op run outside one, with what it encloses, as a compute
    lane of its own, each event's program the one its enclosing jit dispatch launched."""
    names = np.array([name == INLINE_PROGRAM for name in trace.names], dtype=bool)
    names[list(trace.xla_ops)] = True
    root = names[line.ids]
    keep = (root | _has_ancestor(line, root)) & (line.ends > line.starts)
    dispatch = _nearest_ancestor(line, np.array([name.startswith(DISPATCH_PREFIX) for name in trace.names],
                                                dtype=bool)[line.ids])[keep]
    launched = np.unique(line.ids[dispatch[dispatch >= 0]])
    index = {name: i for i, name in enumerate(trace.modules)}
    module_of = np.full(len(trace.names), -1, dtype=np.int64)
    for launch in launched.tolist():
        base = program_base(trace.names[launch])
        if base not in index:
            index[base] = len(trace.modules)
            trace.modules.append(base)
        module_of[launch] = index[base]
    modules = np.where(dispatch >= 0, module_of[line.ids[np.maximum(dispatch, 0)]], -1)
    return _Line(f"/host:CPU/{line.name} (inline)", line.starts[keep], line.ends[keep], line.ids[keep], modules)


def _with_modules(line: _Line) -> _Line:
    """``line`` with its events' programs completed: an event that names none runs the program of the event
    enclosing it, or, enclosing events of one program (the thunk executor's run), that program."""
    assert line.modules is not None
    modules = line.modules
    nested = np.flatnonzero(line.parents >= 0)
    while True:
        up = nested[(modules[nested] >= 0) & (modules[line.parents[nested]] < 0)]
        down = nested[(modules[nested] < 0) & (modules[line.parents[nested]] >= 0)]
        if not len(up) and not len(down):
            return line
        modules[line.parents[up]] = modules[up]
        modules[down] = modules[line.parents[down]]


def _name_threads_apart(trace: _Trace, is_dispatch: np.ndarray) -> None:
    """Name apart the host lines the trace does not: it leaves some Python threads unnamed and calls every Python
    tracer line ``python``. A line that puts into a queue and launches no program is a loader, feeding another
    thread its input; one that runs a function that saves state is a saver; one that only takes from a queue is a
    consumer of another thread's output; lines still sharing a name are numbered apart, those that launch programs
    first."""
    puts, gets, saving = trace.mask(QUEUE_PUT.search), trace.mask(QUEUE_GET.search), trace.mask(SAVING.search)

    def launches(line: _Line) -> bool:
        return bool(is_dispatch[line.ids].any())

    by_name: dict[str, list[_Line]] = defaultdict(list)
    for line in trace.host_lines:
        by_name[line.name].append(line)
    for name, lines in by_name.items():
        if name and len(lines) == 1:
            continue
        for line in lines:
            idle = not launches(line)
            loads = bool(puts[line.ids].any()) and idle
            saves = not loads and bool(saving[line.ids].any()) and idle
            consumes = not loads and not saves and bool(gets[line.ids].any()) and idle
            role = LOADER_ROLE if loads else SAVER_ROLE if saves else CONSUMER_ROLE if consumes else ""
            if not name:
                line.name = {LOADER_ROLE: LOADER_THREAD, SAVER_ROLE: SAVER_THREAD,
                             CONSUMER_ROLE: CONSUMER_THREAD}.get(role, UNNAMED_THREAD)
            elif role:
                line.name = f"{name}: {role}"
        for role in {line.name for line in lines}:
            alike = sorted((line for line in lines if line.name == role), key=lambda line: not launches(line))
            for number, line in enumerate(alike[1:], start=2):
                line.name = f"{role} {number}"


def _device_type(kind: DeviceKind, stats: dict[str, Any]) -> str:
    if kind is DeviceKind.TPU:
        return str(stats.get("device_type_string") or "TPU")
    vendor = str(stats.get("device_vendor") or "NVIDIA")
    major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor")
    return f"{vendor} GPU" + (f" (compute capability {major}.{minor})" if major is not None else "")


# --- intervals ---------------------------------------------------------------------------------


class _Union:
    """Intervals merged into disjoint ones, to ask how much of each window they cover."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        # The intervals are up to a host's millions of events: each column is replaced by its sorted copy at once,
        # and a block's end is the running maximum of the ends at its last interval.
        order = np.argsort(starts, kind="stable")
        starts = starts[order]
        ends = ends[order]
        del order
        if len(ends):
            np.maximum.accumulate(ends, out=ends)
        opens_block = np.ones(len(starts), dtype=bool)
        opens_block[1:] = starts[1:] > ends[:-1]
        closes_block = np.ones(len(starts), dtype=bool)
        closes_block[:-1] = opens_block[1:]
        self.starts = starts[opens_block]
        self.ends = ends[closes_block]
        self.covered_before = np.concatenate(([0], np.cumsum(self.ends - self.starts)))

    def covered(self, windows: np.ndarray) -> np.ndarray:
        """For each ``[start, end)`` row of ``windows``, the nanoseconds the intervals cover."""
        if len(self.starts) == 0:
            return np.zeros(len(windows), dtype=np.int64)
        start, end = windows[:, 0], windows[:, 1]
        # Windows are up to a line's millions of events: each array is worked in place and let go once used.
        first = np.searchsorted(self.ends, start, side="right")
        last = np.searchsorted(self.starts, end, side="left")
        total = self.covered_before[last] - self.covered_before[first]
        none = first >= last
        clip = self.starts[np.minimum(first, len(self.starts) - 1, out=first)]
        del first
        total -= np.maximum(np.subtract(start, clip, out=clip), 0, out=clip)
        clip = self.ends[np.maximum(np.subtract(last, 1, out=last), 0, out=last)]
        del last
        total -= np.maximum(np.subtract(clip, end, out=clip), 0, out=clip)
        total[none] = 0
        return total


def _union_of(lines: list[_Line], keep: np.ndarray) -> _Union:
    # Handed over without a name here, so that the union lets go of each column once sorted.
    return _Union(np.concatenate([line.starts[keep[line.ids]] for line in lines] or [np.zeros(0, np.int64)]),
                  np.concatenate([line.ends[keep[line.ids]] for line in lines] or [np.zeros(0, np.int64)]))


def _devices_on_plane(trace: _Trace) -> int:
    """How many devices share one plane's lines: the XLA CPU client runs every CPU device's program on the
    host plane's threads; an accelerator has a plane of its own."""
    return max(1, len(trace.cpu_devices)) if trace.device_kind is DeviceKind.CPU else 1


def _per_device_covered(lines: list[_Line], keep: np.ndarray, windows: np.ndarray, devices: int) -> np.ndarray:
    """For each window, the nanoseconds the kept events cover on one of the ``devices`` whose programs run on
    ``lines``. Each device's program runs on a thread of its own (the XLA CPU client's), where the kept events
    cover the most; the other threads are a shared pool that lends a hand. So: the cover of the ``devices``
    most covered lines, shared among the devices, at most the lines' union."""
    union = _union_of(lines, keep).covered(windows)
    if devices == 1:
        return union
    each = np.array([_union_of([line], keep).covered(windows) for line in lines])
    own = each[np.argsort(-each.sum(axis=1), kind="stable")[:devices]]
    return np.minimum(union, own.sum(axis=0) / devices)


# --- steps -------------------------------------------------------------------------------------


@dataclass
class _Launches:
    """Program launches in start order: the host's outermost jit dispatches, or a device's module runs."""

    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, ids: list[np.ndarray], starts: list[np.ndarray], ends: list[np.ndarray]) -> _Launches:
        starts_at = np.concatenate(starts or [np.zeros(0, np.int64)])
        order = np.argsort(starts_at, kind="stable")
        return cls(np.concatenate(ids or [np.zeros(0, np.int64)])[order], starts_at[order],
                   np.concatenate(ends or [np.zeros(0, np.int64)])[order])

    def __len__(self) -> int:
        return len(self.starts)


@dataclass
class _Steps:
    """Where the steps are: the host's windows, and each measured device's own."""

    source: StepSource
    marker: str
    windows: np.ndarray  # [start, end) rows in start order, for what the host does
    device_windows: dict[str, np.ndarray]  # device -> its windows (the host's, unless the device has its own steps)
    iteration: list[str] = field(default_factory=list)  # program runs: one iteration's launches, in order


@dataclass
class _Iteration:
    """What the loop repeats without step markers: ``first`` launched right after ``before`` starts an iteration,
    among the launches of the programs in ``defining``; ``programs`` is one iteration's launches in order, and
    ``occasional`` whether other programs run now and then inside iterations."""

    first: int
    before: int
    programs: list[int]
    defining: np.ndarray
    occasional: bool


def _outermost(line: _Line, flagged: np.ndarray) -> np.ndarray:
    """Which events are ``flagged`` by name with no flagged event around them (JAX nests a duplicate dispatch)."""
    chosen = flagged[line.ids]
    return chosen & ~_has_ancestor(line, chosen)


def _launches(trace: _Trace, is_dispatch: np.ndarray) -> dict[str, _Launches]:
    """Each device's program launches: its module runs where the device records them (TPU), else the host's
    jit dispatches, which launch on every device at once (key ``""``)."""
    if trace.program_runs:
        return {device: _Launches.of([runs.ids], [runs.starts], [runs.ends])
                for device, runs in trace.program_runs.items() if device in trace.lanes}
    chosen = [(line, _outermost(line, is_dispatch)) for line in trace.host_lines]
    return {"": _Launches.of([line.ids[keep] for line, keep in chosen], [line.starts[keep] for line, keep in chosen],
                             [line.ends[keep] for line, keep in chosen])}


def _last_lane_end(lines: list[_Line], since: int) -> int:
    """When the device work that starts at or after ``since`` ends (``since`` itself when there is none)."""
    ends = [int(line.ends[line.starts >= since].max()) for line in lines if (line.starts >= since).any()]
    return max(ends, default=since)


def _steps(trace: _Trace, launches: dict[str, _Launches], busy_name: np.ndarray) -> _Steps:
    """The step windows, most trustworthy source first.

    With step markers the step is the marker; with a device ``Steps`` line each
    device has its own, unless that line only numbers the runs of a sequence of
    several programs that the loop repeats; without either, the program the host
    calls again and again makes one step per call (its period, start to start),
    and a repeated sequence of several programs one step per sequence; several programs
    called alike (op by op, or a benchmark of several) make no steps at all, and
    one window covers the capture from the first launch.
    """
    devices = list(trace.lanes)
    if trace.markers:
        counts = np.bincount(np.concatenate([line.ids for line in trace.host_lines]), minlength=len(trace.names))
        marker = max(trace.markers, key=lambda index: counts[index])
        is_marker = np.zeros(len(trace.names), dtype=bool)
        is_marker[marker] = True
        chosen = [(line, _outermost(line, is_marker)) for line in trace.host_lines]
        windows = np.concatenate([np.column_stack((line.starts[keep], line.ends[keep])) for line, keep in chosen])
        windows = windows[np.argsort(windows[:, 0], kind="stable")]
        return _Steps(StepSource.STEP_MARKERS, trace.names[marker], windows, dict.fromkeys(devices, windows))
    reference = launches.get("") or next(iter(launches.values()), None)
    all_lanes = [line for lines in trace.lanes.values() for line in lines]
    iteration = _iteration(reference, _device_ns_by_program(trace, reference, all_lanes, busy_name)) if (
        reference is not None) else None
    own = {device: np.column_stack((steps.starts, steps.ends))
           for device, steps in trace.device_steps.items() if device in trace.lanes}
    several = iteration is not None and (len(iteration.programs) > 1 or iteration.occasional)
    if own and not (several and _step_per_run(trace)):
        return _Steps(StepSource.DEVICE_STEPS, "", next(iter(own.values())), own)
    if iteration is not None:
        by_device = {}
        for device in devices:
            if "" in launches or device in launches:
                runs = launches.get("") or launches[device]
                by_device[device] = _period_windows(runs, _iteration_starts(runs, iteration), trace.lanes[device])
        host = _period_windows(reference, _iteration_starts(reference, iteration), all_lanes)
        cycle = iteration.programs
        return _Steps(StepSource.PROGRAM_RUNS, trace.names[iteration.first], host, by_device,
                      [trace.names[index] for index in cycle] if len(cycle) > 1 else [])
    active = [line for lines in trace.lanes.values() for line in lines if len(line)] or [
        line for line in trace.host_lines if len(line)]
    begin = min(int(line.starts.min()) for line in active)
    if reference is not None and len(reference):
        begin = int(reference.starts[0])
    end = max(int(line.ends.max()) for line in active)
    window = np.array([[begin, max(begin + 1, end)]], dtype=np.int64)
    return _Steps(StepSource.PROFILE_WINDOW, "", window, dict.fromkeys(devices, window))


def _step_per_run(trace: _Trace) -> bool:
    """Whether each device's ``Steps`` line numbers every program run as a step of its own, as a TPU does for
    a loop without step markers: such steps say no more than the runs (an iteration of several programs is
    several of them, and so is a step with an occasional copy)."""
    return all(device in trace.program_runs and len(steps) == len(trace.program_runs[device])
               for device, steps in trace.device_steps.items())


def _iteration(launches: _Launches, device_ns: dict[int, float]) -> _Iteration | None:
    """What starts an iteration: the program called again and again, or the first program of the sequence of
    several that the loop repeats; None when the launches repeat neither.

    A sequence of whole programs (:func:`whole_programs`) is the iteration when the single program's rule does
    not hold, or when the step program runs at most ``MAX_MICRO_BATCHES`` times per period of the sequence
    (micro-batches before an apply); beyond that the others are occasional work between steps (an eval every
    hundred steps), and one call of the step program is one step. One-off programs (initialisation) and
    programs run now and then for little device work (:func:`~mldiag.analysis.loop.step_groups.occasional`,
    given each program's device work in ``device_ns``) are left out of the sequence.
    """
    if not len(launches):
        return None
    names, calls = np.unique(launches.ids, return_counts=True)
    repeated = names[calls >= MIN_REPEATS]
    extra = np.array(sorted(occasional(launches.ids[np.isin(launches.ids, repeated)], device_ns)), dtype=np.int64)
    defining = np.setdiff1d(repeated, extra)
    program = _step_program(launches.ids[~np.isin(launches.ids, extra)])
    sequence = launches.ids[np.isin(launches.ids, defining)]
    period = repeating_period(sequence)
    if period is not None:
        cycle = sequence[:period]
        if program is None or np.count_nonzero(cycle == program) <= MAX_MICRO_BATCHES:
            ordered = np.roll(cycle, -iteration_start(cycle))
            if whole_programs(ordered):
                return _Iteration(int(ordered[0]), int(ordered[-1]), ordered.tolist(), defining, bool(len(extra)))
    if program is None:
        return None
    return _Iteration(program, program, [program], defining, bool(len(extra)))


def _iteration_starts(launches: _Launches, iteration: _Iteration) -> np.ndarray:
    """Which launches start an iteration: each of its first program right after its last one, among the
    launches of the programs that define it, or every launch of its program when it is the only one."""
    first, before = iteration.first, iteration.before
    if first == before:
        return launches.ids == first
    defining = np.flatnonzero(np.isin(launches.ids, iteration.defining))
    ids = launches.ids[defining]
    previous = np.concatenate(([before], ids[:-1]))
    chosen = np.zeros(len(launches), dtype=bool)
    chosen[defining[(ids == first) & (previous == before)]] = True
    return chosen


def _step_program(ids: np.ndarray) -> int | None:
    """The program of ``ids`` (launches in order) called again and again, each other program at most a quarter
    as often (one-off calls, such as initialisation, aside); None when there is no such program."""
    if not len(ids):
        return None
    names, calls = np.unique(ids, return_counts=True)
    order = np.argsort(-calls, kind="stable")
    most = int(calls[order[0]])
    others = calls[order[1:]]
    if most < 2 or (others > max(1, most // STEP_PROGRAM_REPEATS)).any():
        return None
    return int(names[order[0]])


def _launch_windows(launches: _Launches, lanes: list[_Line]) -> np.ndarray:
    """One window per launch, from its start to the next launch's; the last ends with its device work."""
    last_end = max(int(launches.ends.max()), _last_lane_end(lanes, int(launches.starts[-1])))
    windows = np.column_stack((launches.starts, np.append(launches.starts[1:], last_end)))
    windows[:, 1] = np.maximum(windows[:, 1], windows[:, 0])
    return windows


def _device_ns_by_program(trace: _Trace, launches: _Launches, lanes: list[_Line],
                          busy_name: np.ndarray) -> dict[int, float]:
    """Per program id: the device work of its launches (:func:`_work_by_program`)."""
    if not len(launches):
        return {}
    names = np.unique(launches.ids)
    return dict(zip(names.tolist(), _work_by_program(trace, launches, names, [lanes], busy_name).tolist()))


def _work_by_program(trace: _Trace, launches: _Launches, names: np.ndarray, devices: list[list[_Line]],
                     busy_name: np.ndarray) -> np.ndarray:
    """For each program id of ``names``, its device work over the launches, averaged over ``devices`` (each
    device's compute lanes).

    Where the lanes name the program each event runs (the XLA CPU client's), a program's work is the cover of
    its own events: dispatch runs ahead of the device, so the next launch often comes while the previous
    program still runs. Elsewhere the work from each launch to the next is the launched program's.
    """
    every = [line for lanes in devices for line in lanes]
    if any(line.modules is not None and (line.modules >= 0).any() for line in every):
        module_of = {name: index for index, name in enumerate(trace.modules)}
        span = np.array([[int(launches.starts[0]), _last_lane_end(every, int(launches.starts[0]))]], dtype=np.int64)
        work = np.zeros(len(names))
        for row, program in enumerate(names.tolist()):
            module = module_of.get(program_base(trace.names[program]), -2)
            for lanes in devices:
                own = [_Line(line.name, *(column[chosen] for column in (line.starts, line.ends, line.ids)))
                       for line in lanes if line.modules is not None
                       and (chosen := (line.modules == module) & busy_name[line.ids]).any()]
                work[row] += _union_of(own, busy_name).covered(span)[0] / len(devices)
        return work
    windows = _launch_windows(launches, every)
    covered = np.mean([_union_of(lanes, busy_name).covered(windows) for lanes in devices], axis=0)
    inverse = np.searchsorted(names, launches.ids)
    return np.bincount(inverse, weights=covered, minlength=len(names))


def _period_windows(launches: _Launches, runs: np.ndarray, lanes: list[_Line]) -> np.ndarray:
    """One window per launch that ``runs`` selects, from its start to the next one's; the last ends with its
    device work.

    Runs launched after the devices' last recorded work are left out: a device trace that stops before the
    host's last launches (a tracer whose buffer filled) says nothing of them, not that the devices idled.
    """
    starts, ends = launches.starts[runs], launches.ends[runs]
    last_work = max((int(line.starts.max()) for line in lanes if len(line)), default=None)
    if last_work is not None and starts[-1] > last_work:
        recorded = max(1, int(np.count_nonzero(starts <= last_work)))
        return np.column_stack((starts[:recorded], starts[1:recorded + 1]))
    last_end = max(int(ends[-1]), _last_lane_end(lanes, int(starts[-1])))
    return np.column_stack((starts, np.append(starts[1:], last_end)))


def _closed(trace: _Trace, steps: _Steps, is_dispatch: np.ndarray) -> _Steps:
    """The steps, the last one closed by the host work that follows its run on the stepping thread.

    Without step markers a step ends with its program's run, so the host work the loop does after a run (a
    save every tenth step, its bookkeeping) lies in the next step; after the last run there is no next step,
    and that work would fall outside the loop. The last step (each device's) is extended to the end of what
    the stepping thread does after the last run while it repeats what it did in the loop
    (:func:`_repeated_tail`).
    """
    if steps.source not in (StepSource.DEVICE_STEPS, StepSource.PROGRAM_RUNS):
        return steps
    stepping = _stepping_lines(trace, np.zeros(len(trace.names), dtype=bool), is_dispatch)
    if not stepping:
        return steps
    end = _repeated_tail(stepping[0], (int(steps.windows[0, 0]), int(steps.windows[-1, 1])), is_dispatch)

    def extended(windows: np.ndarray) -> np.ndarray:
        windows = windows.copy()
        windows[-1, 1] = max(int(windows[-1, 1]), end)
        return windows

    return _Steps(steps.source, steps.marker, extended(steps.windows),
                  {device: extended(windows) for device, windows in steps.device_windows.items()}, steps.iteration)


def _repeated_tail(line: _Line, loop: tuple[int, int], is_dispatch: np.ndarray) -> int:
    """Where the host work on ``line`` that follows the loop's end stops repeating the loop's: the end of the
    leading run of the events begun after ``loop`` ends (the outermost of them, in time order) that each repeat
    an event of the loop and launch no program, ``loop[1]`` when the first does not.

    An event repeats one of the loop when an event of its name began inside the loop and called, between them,
    every function it calls: the save after the last run repeats the saves between earlier runs, while the
    ``__exit__`` that stops the profiler is not the ``__exit__`` of the loop's ``with`` blocks. A launch after
    the loop's end is a run the steps do not hold (one the device trace stopped before), not work between runs.
    """
    begun_after = line.starts >= loop[1]
    parent_begun_after = begun_after[np.maximum(line.parents, 0)] & (line.parents >= 0)
    tail = np.flatnonzero(begun_after & ~parent_begun_after)
    if not len(tail):
        return loop[1]
    in_loop = (line.starts >= loop[0]) & ~begun_after
    nested = np.flatnonzero(line.parents >= 0)
    callers = line.ids[line.parents[nested]]
    calls = callers.astype(np.int64) * (int(line.ids.max()) + 1) + line.ids[nested]  # (caller's name, callee's name) of each call
    from_tail = np.isin(line.parents[nested], tail)
    unseen_call = np.zeros(len(line), dtype=bool)
    unseen_call[line.parents[nested[from_tail & ~np.isin(calls, calls[in_loop[line.parents[nested]]])]]] = True
    dispatch = is_dispatch[line.ids]
    launches = dispatch | _has_descendant(line, dispatch)
    repeats = np.isin(line.ids[tail], line.ids[in_loop]) & ~unseen_call[tail] & ~launches[tail]
    leading = int(np.argmin(repeats)) if not repeats.all() else len(tail)
    return max(loop[1], int(line.ends[tail[:leading]].max(initial=loop[1])))


def _step_of(windows: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The index of the step each time falls in, -1 outside every step."""
    # Worked in place: the times are up to a line's millions of events.
    index = np.searchsorted(windows[:, 0], times, side="right")
    index -= 1
    outside = index < 0
    index[outside] = 0
    outside |= times >= windows[index, 1]
    index[outside] = -1
    return index


def _time_weighted(part_ns: np.ndarray, whole_ns: np.ndarray) -> float:
    """The share of the whole's time the part takes, over every step (not the mean of each step's share)."""
    known = ~np.isnan(part_ns) & ~np.isnan(whole_ns)
    return float(np.clip(part_ns[known].sum() / max(1.0, float(whole_ns[known].sum())), 0.0, 1.0))


def _iterations(windows: np.ndarray) -> np.ndarray:
    """Each step with the gap after it, from its start to the next step's; the last step, whose gap the
    capture cannot show, only when it is the only one."""
    if len(windows) < 2:
        return windows
    return np.column_stack((windows[:-1, 0], np.maximum(windows[1:, 0], windows[:-1, 0])))


def _ends_partial(steps: _Steps) -> bool:
    """Whether the last step is only part of a step: a program's last run ends with its device work (and the
    host work that follows it), not at a next run."""
    return steps.source is StepSource.PROGRAM_RUNS and len(steps.windows) > 1


def _complete(steps: _Steps, per_step: np.ndarray) -> np.ndarray:
    """Per-step values of the steps whose length is a whole step."""
    return per_step[:-1] if _ends_partial(steps) else per_step


def _by_step(per_device: list[np.ndarray], steps: int) -> np.ndarray:
    """Per-step values averaged over the devices that have that step."""
    if not per_device:
        return np.full(steps, np.nan)
    padded = np.full((len(per_device), steps), np.nan)
    for row, values in zip(padded, per_device):
        row[: min(steps, len(values))] = values[:steps]
    with np.errstate(invalid="ignore"):
        return np.nanmean(padded, axis=0)


# --- the evidence ------------------------------------------------------------------------------


def _op_label(trace: _Trace, index: int) -> tuple[str, str]:
    """A short op name and, when the trace carries it, the HLO it came from."""
    name = trace.names[index]
    if trace.device_kind is DeviceKind.TPU:
        match = _HLO_NAME.match(name)
        return (match.group(1) if match else name[:120]), name[:300]
    return name, trace.hlo_op_of.get(index, "")


def _per_name(trace: _Trace, lines: list[_Line], values: list[np.ndarray], keep: np.ndarray) -> np.ndarray:
    """Sum ``values`` (one array per line) by event name, over the events ``keep`` selects."""
    total = np.zeros(len(trace.names), dtype=np.float64)
    for line, line_values, line_keep in zip(lines, values, keep):
        np.add.at(total, line.ids[line_keep], line_values[line_keep])
    return total


def read_host_evidence(path: Path, timeline: Path | None = None) -> HostEvidence:
    """Read one profile file and compute its signals; :class:`UnreadableProfile` if it is not one.

    With ``timeline``, every event of the file is also saved there (:class:`~mldiag.analysis.profile.timeline.Timeline`).
    """
    return _evidence(path, _read(path, timeline))


def _evidence(path: Path, trace: _Trace) -> HostEvidence:
    is_dispatch = trace.mask(lambda name: name.startswith(DISPATCH_PREFIX))
    _name_threads_apart(trace, is_dispatch)
    launches = _launches(trace, is_dispatch)
    busy_name = ~trace.mask(lambda name: name.startswith(NOT_BUSY))
    steps = _closed(trace, _steps(trace, launches, busy_name), is_dispatch)
    windows = steps.windows
    count = len(windows)
    measured = {device: trace.lanes[device] for device in steps.device_windows}
    device_windows = list(steps.device_windows.values())
    busy_unions = [_union_of(lines, busy_name) for lines in measured.values()]
    is_collective = busy_name & trace.mask(lambda name: bool(collective(name)))
    step_ns = _by_step([w[:, 1] - w[:, 0] for w in device_windows], count) if device_windows else (
        (windows[:, 1] - windows[:, 0]).astype(np.float64))
    busy_ns = _by_step([union.covered(w) for union, w in zip(busy_unions, device_windows)], count)
    busy = np.clip(busy_ns / np.maximum(step_ns, 1), 0.0, 1.0)
    communication_ns = _by_step([_per_device_covered(lines, is_collective, w, _devices_on_plane(trace))
                                 for lines, w in zip(measured.values(), device_windows)], count)
    # Fractions are of time, not means of per-step ratios: a long idle step weighs what it lasts. Over the loop,
    # from the first step's start to the last one's end, as the attribution of its time.
    loops = [np.array([[w[0, 0], w[-1, 1]]]) for w in device_windows]
    loop_busy = [float(union.covered(loop)[0] / max(1, loop[0, 1] - loop[0, 0]))
                 for union, loop in zip(busy_unions, loops)]
    gaps = np.maximum(windows[1:, 0] - windows[:-1, 1], 0)
    mean_step_ns = float(step_ns.mean())
    mean_iteration_ns = mean_step_ns + (float(gaps.mean()) if len(gaps) else 0.0)

    ops = _ops(trace, measured, steps.device_windows, count)
    host = _host_side(trace, steps, is_dispatch, count, busy_unions)
    programs, distinct_programs, launch_count, launch_idle = _programs(trace, launches, measured, busy_unions,
                                                                       busy_name)
    launched = _launched(trace, steps, is_dispatch)
    compiles = _compiles(trace, launched, is_dispatch)
    is_marker = _marker_mask(trace, steps)
    slow_steps = _slow_steps(trace, steps, _stepping_lines(trace, is_marker, is_dispatch), is_marker, busy_unions,
                             compiles.warmup_steps)
    awaited = _awaited_launches(trace, steps, _stepping_lines(trace, is_marker, is_dispatch), is_marker, is_dispatch)
    families = {}
    for family, pattern in FAMILIES.items():
        members = [label for label in ops.labelled if pattern.search(label)]
        dispatch_count = sum(host.dispatched[i] for i in np.flatnonzero(host.dispatched)
                             if pattern.search(trace.names[i][len(DISPATCH_PREFIX):]))
        if members or dispatch_count:
            families[family] = OpFamily(
                ops_per_step=sum(ops.labelled[m][1] for m in members) / ops.per_device_step,
                ms_per_step=sum(ops.labelled[m][0] for m in members) / ops.per_device_step / 1e6,
                dispatches_per_step=float(dispatch_count) / count,
                examples=sorted(members, key=lambda m: -ops.labelled[m][0])[:5],
            )
    has_lanes = bool(measured)
    evidence = HostEvidence(
        host=host_of(path),
        file=path.name,
        bytes=path.stat().st_size,
        events=trace.events,
        device_kind=trace.device_kind,
        device_type=trace.device_type,
        idle_accelerator=trace.idle_accelerator,
        devices=ops.devices,
        compute_lanes=[line.name for lines in measured.values() for line in lines],
        step_source=steps.source,
        step_marker=steps.marker,
        steps=count,
        step_ms=Distribution.of((_complete(steps, step_ns) / 1e6).tolist()),
        busy_fraction=_time_weighted(_complete(steps, busy * step_ns), _complete(steps, step_ns))
        if has_lanes else None,
        idle_ms_per_step=float(_complete(steps, (1 - busy) * step_ns).mean() / 1e6) if has_lanes else None,
        loop_busy_fraction=float(np.clip(np.mean(loop_busy), 0.0, 1.0)) if has_lanes else None,
        busy_by_device={device: float(np.clip(fraction, 0.0, 1.0)) for device, fraction in zip(measured, loop_busy)},
        gap_ms_per_step=float(gaps.mean() / 1e6) if len(gaps) else None,
        untraced_host_ms_per_step=host.untraced_ns / count / 1e6,
        waiting_idle_ms_per_step=host.waiting_idle_ns / count / 1e6,
        dispatches_per_step=float(host.dispatches.sum()) / count,
        dispatch_ms_per_step=float(host.dispatched_ns.sum()) / count / 1e6,
        compile_ms_per_step=float(host.compile_ns.sum()) / count / 1e6,
        compiles_in_steps=host.compiles_in_steps,
        communication_ms_per_step=float(np.nan_to_num(communication_ns).mean()) / 1e6 if has_lanes else 0.0,
        memory_allocator_events=host.allocator_events,
        top_ops=[
            OpTime(name=label, count_per_step=n / ops.per_device_step, self_ms_per_step=ns / ops.per_device_step / 1e6,
                   share_of_busy=ns / ops.busy_ns, expression=ops.expressions.get(label, ""))
            for label, (ns, n) in sorted(ops.labelled.items(), key=lambda item: -item[1][0])[:TOP_OPS]
        ],
        host_activities=_activities(trace, host.activity_ns, host.activity_count, count, mean_step_ns,
                                    host.dispatching, host.activity_own, host.thread),
        between_steps=_activities(trace, host.between_ns, host.between_count, max(1, len(gaps)), mean_iteration_ns,
                                  host.dispatching, host.between_own, host.thread),
        dispatched=_activities(trace, host.dispatched_ns, host.dispatched, count, mean_step_ns, host.dispatching,
                               reads=host.dispatch_reads),
        dispatch_origins=_activities(trace, host.origin_ns, host.origin_count, count, mean_step_ns, host.dispatching,
                                     thread=host.thread),
        thread_wait_ms_per_step=host.thread_wait_idle_ns / count / 1e6,
        while_waiting=[HostActivity(name=name, thread=thread, count_per_step=0.0, ms_per_step=ns / count / 1e6,
                                    self_ms_per_step=ns / count / 1e6, share_of_step=ns / count / mean_iteration_ns)
                       for thread, name, ns in host.while_waiting],
        device_reads=_activities(trace, host.read_ns, host.read_count, count, mean_step_ns,
                                 np.zeros(len(trace.names), dtype=bool), thread=host.thread),
        transfers=_activities(trace, host.transfer_ns, host.transfer_count, count, mean_step_ns,
                              np.zeros(len(trace.names), dtype=bool), _Own(host.transfer_idle_ns), host.thread),
        awaited_launches=awaited.share,
        launch_wait_ms_per_step=awaited.wait_ns / count / 1e6,
        transfer_ms_per_step=host.moving_idle_ns / count / 1e6,
        launches=launch_count,
        distinct_programs=distinct_programs,
        launch_idle_fraction=launch_idle,
        programs=programs,
        op_families=families,
        warmup=_warmup(compiles, steps, launched, step_ns),
        recompiles_in_steps=compiles.recompiles,
        recompile_ms_per_step=float(compiles.recompile_ns.sum()) / count / 1e6,
        recompile_cost=_recompile_cost(compiles, steps, launched),
        slow_steps=slow_steps,
        iteration_programs=steps.iteration,
        series=StepSeries(
            step_ms=np.round(step_ns[:MAX_SERIES] / 1e6, 4).tolist(),
            busy_fraction=np.round(busy[:MAX_SERIES], 4).tolist() if has_lanes else [],
            dispatches=host.dispatches[:MAX_SERIES].tolist(),
            compile_ms=np.round(host.compile_ns[:MAX_SERIES] / 1e6, 4).tolist(),
            gap_before_ms=[0.0, *np.round(gaps[: MAX_SERIES - 1] / 1e6, 4).tolist()],
            truncated=count > MAX_SERIES,
            last_partial=_ends_partial(steps),
        ),
    )
    looping = read_after_each_launch(evidence)
    evidence.attribution = _attribution(
        trace, steps, is_dispatch, busy_name, measured, busy_unions, compiles.warmup_steps,
        is_dispatch & trace.mask(lambda name: name == looping.name) if looping is not None else None)
    return evidence


@dataclass
class _Ops:
    labelled: dict[str, list[float]]  # op label -> [self ns, count] over every device and step
    expressions: dict[str, str]
    busy_ns: float  # all ops' self time
    devices: int
    per_device_step: int  # the divisor that makes a total per step on one device


def _ops(trace: _Trace, measured: dict[str, list[_Line]], device_windows: dict[str, np.ndarray],
         steps: int) -> _Ops:
    """Each op's self time within the steps, the same op on several devices or lanes counted as one."""
    runtime = trace.mask(CPU_RUNTIME_SCOPE.match) if trace.device_kind is DeviceKind.CPU else np.zeros(
        len(trace.names), dtype=bool)
    is_op = ~trace.mask(lambda name: name.startswith(NOT_AN_OP)) & ~runtime
    lanes, keep = [], []
    for device, lines in measured.items():
        begin, end = device_windows[device][0, 0], device_windows[device][-1, 1]
        for line in lines:
            lanes.append(line)
            keep.append(is_op[line.ids] & (line.starts >= begin) & (line.starts < end))
    op_ns = _per_name(trace, lanes, [line.self_ns() for line in lanes], keep)
    op_count = _per_name(trace, lanes, [np.ones(len(line)) for line in lanes], keep)
    labelled: dict[str, list[float]] = {}
    expressions: dict[str, str] = {}
    for index in np.flatnonzero(op_count):
        label, expression = _op_label(trace, int(index))
        totals = labelled.setdefault(label, [0.0, 0.0])
        totals[0] += op_ns[index]
        totals[1] += op_count[index]
        if expression:
            expressions.setdefault(label, expression)
    devices = _devices_on_plane(trace) if trace.device_kind is DeviceKind.CPU else max(1, len(measured))
    return _Ops(labelled, expressions, sum(ns for ns, _ in labelled.values()) or 1.0, devices, steps * devices)


@dataclass
class _ByName:
    """Time and count by event name, summed a line at a time."""

    ns: np.ndarray
    count: np.ndarray

    @classmethod
    def zeros(cls, names: int) -> _ByName:
        return cls(np.zeros(names), np.zeros(names))

    def add(self, ids: np.ndarray, keep: np.ndarray, ns: np.ndarray) -> None:
        """The events ``keep`` selects, each name id of ``ids`` with its ``ns``."""
        np.add.at(self.ns, ids[keep], ns[keep])
        self.count += np.bincount(ids[keep], minlength=len(self.count))


@dataclass
class _HostSide:
    dispatches: np.ndarray  # per step
    dispatched: np.ndarray  # per name: outermost dispatches within steps
    dispatched_ns: np.ndarray
    compile_ns: np.ndarray  # per step
    compiles_in_steps: int
    allocator_events: int
    activity_ns: np.ndarray  # per name: what the stepping thread does inside steps
    activity_count: np.ndarray
    between_ns: np.ndarray  # per name: what it does between steps
    between_count: np.ndarray
    dispatching: np.ndarray  # per name: its events enclose jit dispatches (the function that runs the step)
    dispatch_reads: np.ndarray  # per name: jit dispatches that read device values back inside the call
    untraced_ns: float  # loop time with no event but the step marker on the stepping thread and no device busy
    waiting_idle_ns: float  # loop time the stepping thread waits on the devices while they idle (mean over devices)
    activity_own: _Own  # the own idle time of the activities inside steps, and who owns it
    between_own: _Own
    thread_wait_idle_ns: float  # loop time the stepping thread waits on other threads while the devices idle
    while_waiting: list[tuple[str, str, float]]  # (thread, function, ns) on other threads during those waits
    transfer_ns: np.ndarray  # per name: outermost host-device copies of the stepping thread within steps
    transfer_count: np.ndarray
    transfer_idle_ns: np.ndarray  # the devices idle meanwhile
    read_ns: np.ndarray  # per name: calls from the step's code that read device values back, within steps
    read_count: np.ndarray
    origin_count: np.ndarray  # per name: the stepping thread's outermost dispatches within steps that its events
    # make (:func:`_dispatch_origins`)
    origin_ns: np.ndarray  # and those dispatches' time
    thread: str  # the stepping thread's line
    moving_idle_ns: float  # loop time any host thread copies between host and device while the devices idle


@dataclass
class _Own:
    """Per name of a top-level activity: its own idle time, the functions that hold it, and whether it reads
    device values back."""

    ns: np.ndarray
    parts: dict[int, list[tuple[int, float, bool]]] = field(default_factory=dict)  # name id -> (holder's name id,
    # its own ns, it reads the device), most first
    reads: np.ndarray | None = None

    @classmethod
    def of(cls, names: int, tops: np.ndarray, own: np.ndarray, reads: np.ndarray, holders: list[np.ndarray]) -> _Own:
        """From the top-level events (name ids, own ns, reads) and the holders' rows (top's name id, name id, ns,
        reads)."""
        top_ids, holder_ids, holder_ns, holder_reads = holders
        pairs, inverse = np.unique(top_ids.astype(np.int64) * names + holder_ids, return_inverse=True)
        ns = np.bincount(inverse, weights=holder_ns, minlength=len(pairs))
        read = np.bincount(inverse, weights=holder_reads, minlength=len(pairs)) > 0
        parts: dict[int, list[tuple[int, float, bool]]] = {}
        for pair in np.argsort(-ns, kind="stable"):
            parts.setdefault(int(pairs[pair] // names), []).append(
                (int(pairs[pair] % names), float(ns[pair]), bool(read[pair])))
        return cls(np.bincount(tops, weights=own, minlength=names), parts,
                   np.bincount(tops, weights=reads, minlength=names) > 0)


@dataclass
class _Calls:
    """Per event of a host line: the device calls and waits (dispatch, compile, copies, waits) and what they
    enclose, the outermost of them, and the events that name work (frames and scopes, outside those calls)."""

    inside: np.ndarray
    outermost: np.ndarray
    named: np.ndarray

    @classmethod
    def of(cls, line: _Line, is_call: np.ndarray, is_named: np.ndarray) -> _Calls:
        calls = is_call[line.ids]
        enclosed = _has_ancestor(line, calls)
        return cls(calls | enclosed, calls & ~enclosed, is_named[line.ids] & ~(calls | enclosed))


def _idle_cover(unions: list[_Union], spans: np.ndarray) -> np.ndarray:
    """For each ``[start, end)`` row, the nanoseconds the devices idle (mean over devices; all of it without any)."""
    if not unions:
        return np.maximum((spans[:, 1] - spans[:, 0]) - 0.0, 0.0)
    busy = unions[0].covered(spans).astype(np.float64)  # their mean, summed a device at a time
    for union in unions[1:]:
        busy += union.covered(spans)
    busy /= len(unions)
    np.subtract(spans[:, 1] - spans[:, 0], busy, out=busy)
    return np.maximum(busy, 0.0, out=busy)


def _idle_within(unions: list[_Union], line: _Line, loop: tuple[int, int]) -> np.ndarray:
    """For each event of ``line``, the nanoseconds the devices idle (:func:`_idle_cover`) while it runs within
    ``loop``; a block of events at a time, as each needs a few columns of its own and a line holds millions."""
    idle = np.empty(len(line))
    for first in range(0, len(line), _EVENTS_AT_ONCE):
        block = slice(first, first + _EVENTS_AT_ONCE)
        starts = np.clip(line.starts[block], *loop)
        idle[block] = _idle_cover(unions, np.column_stack((starts, np.clip(line.ends[block], starts, loop[1]))))
    return idle


def _stepping_own(trace: _Trace, line: _Line, calls: _Calls, busy_unions: list[_Union], is_read: np.ndarray,
                  keeps: list[np.ndarray], loop: tuple[int, int]) -> list[list[np.ndarray]]:
    """For each selection of top-level events: their name ids, own idle time within the loop and whether they read
    device values back, and the rows of the functions that hold that time (top's name id, name id, own ns, reads)."""
    own = host_time.own_idle(line.parents, _idle_within(busy_unions, line, loop), calls.outermost, calls.inside)
    reads = is_read[line.ids]
    inclusive_reads = reads | _has_descendant(line, reads)
    found = []
    for keep in keeps:
        held = host_time.owners(line.parents, line.ids, len(trace.names), own, calls.named, keep, reads)
        rows = np.flatnonzero(held.holder)
        found.append([line.ids[keep], own[keep], inclusive_reads[keep], line.ids[held.top[rows]], line.ids[rows],
                      held.exclusive[rows], held.reads[rows]])
        del held  # a column per event of the line: gone before the next selection's are made
    return found


def _other_threads(trace: _Trace, stepping: list[_Line], waits: _Union, busy_unions: list[_Union],
                   is_call: np.ndarray, is_named: np.ndarray) -> list[tuple[str, str, float]]:
    """What the other host threads' innermost functions do while the stepping thread waits and the devices
    idle: (thread, function, ns), most first."""
    if not len(waits.starts):
        return []
    waiting_busy = [_Union(*host_time.intersection(waits.starts, waits.ends, union.starts, union.ends))
                    for union in busy_unions]
    found = []
    for index, line in enumerate(trace.host_lines):
        if any(line is chosen for chosen in stepping) or not len(line):
            continue
        spans = np.column_stack((line.starts, line.ends))
        overlap = waits.covered(spans).astype(np.float64)
        if waiting_busy:
            overlap -= np.mean([union.covered(spans) for union in waiting_busy], axis=0)
        calls = _Calls.of(line, is_call, is_named)
        own = np.where(calls.inside, 0.0, host_time.self_of(line.parents, np.maximum(overlap, 0.0)))
        owned = host_time.to_innermost_named(line.parents, own, calls.named)
        by_name = np.bincount(line.ids, weights=owned, minlength=len(trace.names))
        thread = line.name or UNNAMED_THREAD
        found += [(thread, trace.names[i], float(by_name[i])) for i in np.flatnonzero(by_name > 0)]
    return sorted(found, key=lambda item: -item[2])[:TOP_ACTIVITIES]


def _marker_mask(trace: _Trace, steps: _Steps) -> np.ndarray:
    return trace.mask(lambda name: steps.source is StepSource.STEP_MARKERS and name == steps.marker)


def _host_side(trace: _Trace, steps: _Steps, is_dispatch: np.ndarray, count: int,
               busy_unions: list[_Union]) -> _HostSide:
    """What the host does in and between steps: dispatches, compilation, named work and untraced time."""
    windows = steps.windows
    gap_windows = np.column_stack((windows[:-1, 1], windows[1:, 0]))
    gap_windows = gap_windows[gap_windows[:, 1] > gap_windows[:, 0]]
    is_compile = trace.mask(COMPILE.match)
    is_backend_compile = trace.mask(lambda name: name.startswith("backend_compile"))
    is_allocator = trace.mask(ALLOCATOR_EVENTS.__contains__)
    is_marker = _marker_mask(trace, steps)
    is_transfer = trace.mask(TRANSFER.search)
    is_thread_wait = trace.mask(THREAD_WAITING.search)
    is_waiting = trace.mask(WAITING.search)
    is_call = is_dispatch | is_compile | is_transfer | is_thread_wait | is_waiting
    is_named = trace.mask(host_time.is_named_work)
    is_read = trace.mask(DEVICE_READ.search)
    # A host function waiting for a copy that other threads carry out is not doing work of its own.
    moving = _union_of(trace.host_lines, is_transfer | trace.mask(TRANSFER_WORK.match))
    busy_or_moving = [_Union(np.concatenate((union.starts, moving.starts)), np.concatenate((union.ends, moving.ends)))
                      for union in busy_unions] or [moving]
    stepping = _stepping_lines(trace, is_marker, is_dispatch)
    names = len(trace.names)
    dispatches = np.zeros(count, dtype=np.int64)
    compile_starts, compile_ends = [], []
    compiles_in_steps = allocator_events = 0
    dispatched, activity, between, transfers, reads = (_ByName.zeros(names) for _ in range(5))
    transfer_idle_ns = np.zeros(names)
    dispatching, dispatch_reads = np.zeros(names, dtype=bool), np.zeros(names, dtype=bool)
    owned: dict[str, list[list[np.ndarray]]] = {"activity": [], "between": []}
    origin_count, origin_ns = np.zeros(names), np.zeros(names)
    # A line holds up to millions of events: what is summed by name from its per-event arrays is summed at once,
    # and an array is let go once used, so that few of them are held together (a line's are gone once it is read).
    def read_line(line: _Line) -> None:
        nonlocal dispatches, compiles_in_steps, allocator_events, dispatching, dispatch_reads, origin_count, origin_ns
        step = _step_of(windows, line.starts)
        in_step = step >= 0
        calls = _outermost(line, is_dispatch)
        outermost = calls & in_step
        dispatches += np.bincount(step[outermost], minlength=count)
        del step
        compiling = is_compile[line.ids] & in_step
        compile_starts.append(line.starts[compiling])
        compile_ends.append(line.ends[compiling])
        compiles_in_steps += int(is_backend_compile[line.ids[compiling]].sum())
        allocator_events += int(is_allocator[line.ids].sum())
        # What an event spends in the loop: a call begun in the last step may go on after the loop's end.
        starts = np.clip(line.starts, windows[0, 0], windows[-1, 1])
        durations = (np.clip(line.ends, starts, windows[-1, 1]) - starts).astype(np.float64)
        del starts
        dispatched.add(line.ids, outermost, durations)
        driving = _has_descendant(line, calls)
        dispatching |= np.bincount(line.ids[driving], minlength=names) > 0
        reading_calls = outermost & _has_descendant(line, is_read[line.ids])
        dispatch_reads |= np.bincount(line.ids[reading_calls], minlength=names) > 0
        del reading_calls
        if not any(line is chosen for chosen in stepping):
            return
        parent_ids = np.where(line.parents >= 0, line.ids[np.maximum(line.parents, 0)], -1)
        top_level = (line.parents < 0) | ((parent_ids >= 0) & is_marker[np.maximum(parent_ids, 0)])
        del parent_ids
        activity_keep = top_level & ~is_marker[line.ids] & in_step
        reads.add(line.ids, _calls_that_read(line, driving, is_named, is_read) & in_step, durations)
        gap = _step_of(gap_windows, line.starts) if len(gap_windows) else np.full(len(line), -1)
        within_gap = (gap >= 0) & (gap == _step_of(gap_windows, np.maximum(line.ends - 1, line.starts))) \
            if len(gap_windows) else gap >= 0
        del gap
        between_keep = within_gap & ~_has_ancestor(line, within_gap)
        transfer_keep = _outermost(line, is_transfer) & in_step
        transfers.add(line.ids, transfer_keep, durations)
        np.add.at(transfer_idle_ns, line.ids[transfer_keep],
                  _idle_cover(busy_unions, np.column_stack((line.starts[transfer_keep], line.ends[transfer_keep]))))
        activity.add(line.ids, activity_keep, durations)
        between.add(line.ids, between_keep, durations)
        found_activity, found_between = _stepping_own(trace, line, _Calls.of(line, is_call, is_named), busy_or_moving,
                                                      is_read, [activity_keep, between_keep],
                                                      (int(windows[0, 0]), int(windows[-1, 1])))
        owned["activity"].append(found_activity)
        owned["between"].append(found_between)
        origin = _dispatch_origins(line, outermost, is_marker)
        made = outermost & (origin >= 0)
        origin_count += np.bincount(line.ids[origin[made]], minlength=names)
        origin_ns += np.bincount(line.ids[origin[made]], weights=durations[made], minlength=names)

    for line in trace.host_lines:
        read_line(line)
    compile_ns = _Union(np.concatenate(compile_starts or [np.zeros(0, np.int64)]),
                        np.concatenate(compile_ends or [np.zeros(0, np.int64)])).covered(windows)
    loop = np.array([[windows[0, 0], windows[-1, 1]]])
    # A step marker spans its whole step, so it records nothing about what the host does inside it.
    traced = _union_of(stepping + [line for lines in trace.lanes.values() for line in lines], ~is_marker)
    waiting = _union_of(stepping, is_waiting)
    waits = np.column_stack((np.maximum(waiting.starts, loop[0, 0]), np.minimum(waiting.ends, loop[0, 1])))
    waits = waits[waits[:, 1] > waits[:, 0]]
    waited_ns = float((waits[:, 1] - waits[:, 0]).sum())
    busy_while_waiting = [float(union.covered(waits).sum()) for union in busy_unions] or [waited_ns]
    thread_waiting = _union_of(stepping, is_thread_wait)
    thread_waits = np.column_stack((np.maximum(thread_waiting.starts, loop[0, 0]),
                                    np.minimum(thread_waiting.ends, loop[0, 1])))
    thread_waits = thread_waits[thread_waits[:, 1] > thread_waits[:, 0]]
    any_wait = _union_of(stepping, is_thread_wait | is_waiting)
    in_loop = _Union(*host_time.intersection(any_wait.starts, any_wait.ends, loop[:, 0], loop[:, 1]))
    return _HostSide(
        dispatches=dispatches,
        dispatched=dispatched.count,
        dispatched_ns=dispatched.ns,
        compile_ns=compile_ns,
        compiles_in_steps=compiles_in_steps,
        allocator_events=allocator_events,
        activity_ns=activity.ns,
        activity_count=activity.count,
        between_ns=between.ns,
        between_count=between.count,
        dispatching=dispatching,
        dispatch_reads=dispatch_reads,
        untraced_ns=float(loop[0, 1] - loop[0, 0] - traced.covered(loop)[0]) if stepping else 0.0,
        waiting_idle_ns=waited_ns - float(np.mean(busy_while_waiting)),
        activity_own=_own_of(names, owned["activity"]),
        between_own=_own_of(names, owned["between"]),
        thread_wait_idle_ns=float(_idle_cover(busy_unions, thread_waits).sum()),
        while_waiting=_other_threads(trace, stepping, in_loop, busy_unions, is_call, is_named),
        transfer_ns=transfers.ns,
        transfer_count=transfers.count,
        transfer_idle_ns=transfer_idle_ns,
        read_ns=reads.ns,
        origin_count=origin_count,
        origin_ns=origin_ns,
        read_count=reads.count,
        thread=stepping[0].name if stepping else "",
        moving_idle_ns=float(_idle_cover(busy_unions, np.column_stack(
            host_time.intersection(moving.starts, moving.ends, loop[:, 0], loop[:, 1]))).sum()),
    )


def _dispatch_origins(line: _Line, dispatches: np.ndarray, is_excluded: np.ndarray) -> np.ndarray:
    """For each event of ``line``, where the jit dispatch it is (``dispatches`` flags them) comes from: the
    innermost event enclosing it that encloses dispatches of more than one program, and is not ``is_excluded``
    by name (a step marker); -1 for other events and where none does.

    Code that runs op by op makes its dispatches through one wrapper per operation (``__mul__``, a ufunc's
    ``__call__``, each enclosing one program's dispatch), whatever the file it is in; the function that
    calls those operations one after the other (an optimizer's update run eagerly) is the first to enclose
    several programs.
    """
    flagged = np.flatnonzero(dispatches)
    rows, ancestors = [], []
    row, up = np.arange(len(flagged)), line.parents[flagged]
    while len(row):
        inside = up >= 0
        row, up = row[inside], up[inside]
        rows.append(row)
        ancestors.append(up)
        up = line.parents[up]
    origin = np.full(len(line), -1, dtype=np.int64)
    if not rows:
        return origin
    row, ancestor = np.concatenate(rows), np.concatenate(ancestors)  # each dispatch's ancestors, innermost first
    programs = line.ids[flagged[row]]
    pairs = np.unique(ancestor.astype(np.int64) * (int(line.ids.max()) + 1) + programs)
    kinds = np.bincount(pairs // (int(line.ids.max()) + 1), minlength=len(line))
    candidate = (kinds[ancestor] > 1) & ~is_excluded[line.ids[ancestor]]
    found, first = np.unique(row[candidate], return_index=True)
    origin[flagged[found]] = ancestor[candidate][first]
    return origin


def _calls_that_read(line: _Line, drives: np.ndarray, is_named: np.ndarray, is_read: np.ndarray) -> np.ndarray:
    """The calls the step's code makes (named events that launch nothing, inside one that does) that read device
    values back, themselves or in what they call."""
    parents = np.maximum(line.parents, 0)
    calls = is_named[line.ids] & ~drives & (line.parents >= 0) & drives[parents]
    reads = is_read[line.ids]
    return calls & (reads | _has_descendant(line, reads))


def _stepping_lines(trace: _Trace, is_marker: np.ndarray, is_dispatch: np.ndarray) -> list[_Line]:
    """The step's own threads: those with the step markers, else those that dispatch, most such events first."""
    for flagged in (is_marker, is_dispatch):
        counts = [int(np.count_nonzero(flagged[line.ids])) for line in trace.host_lines]
        if any(counts):
            return [trace.host_lines[i] for i in np.argsort(counts, kind="stable")[::-1] if counts[i]]
    return []


def _devices_of(lanes: list[_Line], busy: _Union, busy_name: np.ndarray, loop: tuple[int, int],
                devices: int) -> list[Device]:
    """The devices whose programs run on one plane's lanes: the plane itself, or the XLA CPU client's devices,
    each on the thread where its program runs (the lane busiest over the loop) with the client's pool lending a
    hand to all (as :func:`_per_device_covered` counts them)."""
    if devices == 1:
        return [Device(lanes, busy)]
    window = np.array([loop])
    unions = [_union_of([lane], busy_name) for lane in lanes]
    order = np.argsort([-union.covered(window)[0] for union in unions], kind="stable")
    own, pool = order[:devices], order[devices:]
    return [Device([lanes[i]], unions[i], helpers=[lanes[j] for j in pool]) for i in own]


def _launches_with_callbacks(trace: _Trace, is_dispatch: np.ndarray) -> np.ndarray:
    """Per name id, whether it is a jit dispatch of a program that calls back to the host: a device runs a host
    callback op inside a run of that program (its ``XLA Modules`` event)."""
    is_callback = trace.mask(HOST_CALLBACK.search)
    programs: set[str] = set()
    for device, lanes in trace.lanes.items():
        runs = trace.program_runs.get(device)
        if runs is None or not len(runs):
            continue
        for lane in lanes:
            calls = lane.starts[is_callback[lane.ids]]
            run = np.searchsorted(runs.starts, calls, side="right") - 1
            inside = (run >= 0) & (calls < runs.ends[np.maximum(run, 0)])
            programs |= {program_base(trace.names[i]) for i in runs.ids[run[inside]].tolist()}
    return is_dispatch & trace.mask(lambda name: program_base(name) in programs)


def _attribution(trace: _Trace, steps: _Steps, is_dispatch: np.ndarray, busy_name: np.ndarray,
                 measured: dict[str, list[_Line]], busy_unions: list[_Union], warmup_steps: int,
                 launches_read_back: np.ndarray | None) -> Attribution:
    """The steady loop's wall time by cause (:mod:`~mldiag.analysis.loop.attribution`), on the stepping thread's
    timeline: from the first step after the warm-up (whose cost the evidence states apart) to the last step's end.
    ``launches_read_back``: the dispatches of a function whose every launch is read back before the next."""
    is_marker = _marker_mask(trace, steps)
    stepping = _stepping_lines(trace, is_marker, is_dispatch)
    first = warmup_steps if warmup_steps < len(steps.windows) else 0
    runtime = trace.mask(CPU_RUNTIME_SCOPE.match) if trace.device_kind is DeviceKind.CPU else np.zeros(
        len(trace.names), dtype=bool)
    windows: dict[tuple[int, int], Window] = {}
    for (device, lanes), busy in zip(measured.items(), busy_unions):
        own = steps.device_windows[device]
        loop = (int(own[min(first, len(own) - 1), 0]), int(own[-1, 1]))
        windows.setdefault(loop, Window(loop, [], own[first:, 0])).devices.extend(
            _devices_of(lanes, busy, busy_name, loop, _devices_on_plane(trace)))
    host_loop = (int(steps.windows[first, 0]), int(steps.windows[-1, 1]))
    return attribute(
        names=trace.names, windows=list(windows.values()) or [Window(host_loop, [], steps.windows[first:, 0])],
        steps=len(steps.windows) - first,
        busy_name=busy_name, runtime_name=runtime, hints={**trace.hlo_op_of, **trace.hlo_category_of},
        launches_callbacks=_launches_with_callbacks(trace, is_dispatch) if trace.program_runs else None,
        launches_read_back=launches_read_back,
        stepping=stepping[0] if stepping else None,
        other_threads=[line for line in trace.host_lines if not (stepping and line is stepping[0])],
        markers={int(i) for i in np.flatnonzero(is_marker)},
    )


def _own_of(names: int, parts: list[list[np.ndarray]]) -> _Own:
    """The top-level events' own time by name and who holds it, from each stepping line's columns."""
    if not parts:
        return _Own(np.zeros(names))
    tops, own, reads, *holders = (np.concatenate(column) for column in zip(*parts))
    return _Own.of(names, tops, own, reads, holders)


def _programs(trace: _Trace, launches: dict[str, _Launches], measured: dict[str, list[_Line]],
              busy_unions: list[_Union], busy_name: np.ndarray) -> tuple[list[ProgramCalls], int, int, float | None]:
    """Per program: its launches, their mean time, and their device work (:func:`_work_by_program`);
    with the count of launches and the devices' idle share between the first launch and the last work."""
    reference = launches.get("") or next(iter(launches.values()), None)
    if reference is None or not len(reference):
        return [], 0, 0, None
    windows = _launch_windows(reference, [line for lines in measured.values() for line in lines])
    busy = np.mean([union.covered(windows) for union in busy_unions], axis=0) if busy_unions else np.zeros(
        len(windows))
    names, inverse, calls = np.unique(reference.ids, return_inverse=True, return_counts=True)
    launch_ns = np.bincount(inverse, weights=reference.ends - reference.starts)
    device_ns = _work_by_program(trace, reference, names, list(measured.values()), busy_name) if measured else (
        np.zeros(len(names)))
    total_device = float(device_ns.sum()) or 1.0
    programs = [
        ProgramCalls(name=trace.names[int(names[i])], calls=int(calls[i]), ms_per_call=launch_ns[i] / calls[i] / 1e6,
                     device_ms_per_call=device_ns[i] / calls[i] / 1e6, share_of_device=device_ns[i] / total_device)
        for i in np.lexsort((-calls, -device_ns))[:TOP_PROGRAMS]
    ]
    span = float((windows[:, 1] - windows[:, 0]).sum())
    idle = float(np.clip(1 - busy.sum() / span, 0.0, 1.0)) if busy_unions and span > 0 else None
    return programs, len(names), len(reference), idle


# --- warm-up and slow steps --------------------------------------------------------------------


@dataclass
class _Compiles:
    """The compilations inside steps, told apart: a program's first compilation in the warm-up, or a recompile."""

    warmup_steps: int  # leading steps that each hold a first compilation (0 when every step does: no steady state)
    warmup_ns: float  # compilation time in them
    warmup_compiles: int  # backend compilations in them
    recompile_ns: np.ndarray  # per step: compilation time of recompiles (a program that compiled before, or
    # any compilation after the warm-up)
    recompiles: int  # backend compilations that are recompiles
    # Per step with the gap after it: whether it holds a compilation, and a recompile.
    compiling: np.ndarray
    recompiling: np.ndarray
    recompile_calls: _Union  # the jit calls that recompile (outermost, tracing included), else the compilations


@dataclass
class _AwaitedLaunches:
    share: float  # of the stepping thread's launches in steps
    wait_ns: float  # from those launches' ends to their programs' completions, over the steps


def _awaited_launches(trace: _Trace, steps: _Steps, stepping: list[_Line], is_marker: np.ndarray,
                      is_dispatch: np.ndarray) -> _AwaitedLaunches:
    """The stepping thread's launches it waits on (:attr:`HostEvidence.awaited_launches`).

    A launch is awaited when the runtime's first completion notice after it (:data:`PROGRAM_DONE`, on any host
    thread) comes before the thread's next event other than the step marker, and the thread resumes (that event,
    or the end of the step's marker) within :data:`RESUMES_WITHIN_WAIT` of the time it waited.
    """
    is_done = trace.mask(PROGRAM_DONE.search)
    done = np.sort(np.concatenate([line.ends[is_done[line.ids]] for line in trace.host_lines]
                                  or [np.zeros(0, np.int64)]))
    if not stepping or not len(done):
        return _AwaitedLaunches(0.0, 0.0)
    line = stepping[0]
    launch = _outermost(line, is_dispatch) & (_step_of(steps.windows, line.starts) >= 0)
    if not launch.any():
        return _AwaitedLaunches(0.0, 0.0)
    ends = line.ends[launch]
    completes = done[np.minimum(np.searchsorted(done, ends, side="left"), len(done) - 1)]
    notified = completes >= ends
    # The thread's next event after each launch that is neither the step's marker nor inside the launch.
    others = line.starts[~is_marker[line.ids]]
    nexts = np.append(others, np.iinfo(np.int64).max)[np.searchsorted(others, ends, side="left")]
    marker_starts = np.append(line.starts[is_marker[line.ids]], np.iinfo(np.int64).max)
    marker_ends = np.append(line.ends[is_marker[line.ids]], np.iinfo(np.int64).max)
    enclosing = np.searchsorted(marker_starts, ends, side="right") - 1
    step_end = np.where(enclosing >= 0, marker_ends[np.maximum(enclosing, 0)], np.iinfo(np.int64).max)
    resumes = np.minimum(nexts, np.where(step_end >= ends, step_end, np.iinfo(np.int64).max))
    waited = (completes - ends).astype(np.float64)
    awaited = notified & (completes <= resumes) & (resumes - completes <= RESUMES_WITHIN_WAIT * waited)
    return _AwaitedLaunches(float(awaited.mean()), float(waited[awaited].sum()))


def _compiles(trace: _Trace, windows: np.ndarray, is_dispatch: np.ndarray) -> _Compiles:
    """Each compilation event by the function it compiles: the outermost jit dispatch around it, else itself.

    A compilation is a first one when its function (``PjitFunction(train_step)``) did not compile in an earlier
    step (or before the steps); in the same step a function may compile for several call sites (``jnp.zeros``
    and ``jnp.ones`` are both ``broadcast_in_dim``), all first calls. The warm-up is the leading steps that
    hold a first compilation; every compilation in a step after it, and one of a function that compiled in an
    earlier step, is a recompile.
    """
    is_compile = trace.mask(COMPILE.match)
    is_backend = trace.mask(lambda name: name.startswith("backend_compile"))
    functions, starts, ends, backend, calls = [], [], [], [], []
    for line in trace.host_lines:
        for index in np.flatnonzero(is_compile[line.ids]):
            function, call, up = int(line.ids[index]), int(index), int(line.parents[index])
            while up >= 0:
                if is_dispatch[line.ids[up]]:
                    function, call = int(line.ids[up]), up
                up = int(line.parents[up])
            functions.append(function)
            starts.append(int(line.starts[index]))
            ends.append(int(line.ends[index]))
            backend.append(bool(is_backend[line.ids[index]]))
            calls.append((int(line.starts[call]), int(line.ends[call])))
    at = np.array(starts, dtype=np.int64)
    since = np.searchsorted(windows[:, 0], at, side="right") - 1  # the step it is in or after, -1 before the first
    first_step: dict[int, int] = {}
    for function, step_since in zip(functions, since.tolist()):
        first_step[function] = min(first_step.get(function, step_since), step_since)
    first = np.array([first_step[function] == s for function, s in zip(functions, since.tolist())], dtype=bool)
    step = _step_of(windows, at)
    holds_first = np.zeros(len(windows), dtype=bool)
    holds_first[step[first & (step >= 0)]] = True
    warmup = leading_warmup(holds_first)
    if warmup == len(windows):
        warmup = 0
    starts_at, ends_at, backend_at = (np.array(values, dtype=kind) for values, kind in (
        (starts, np.int64), (ends, np.int64), (backend, bool)))
    in_warmup = first & (step >= 0) & (step < warmup)
    recompile = (~first | (step >= warmup)) & (step >= 0)
    # By the step each is in or after (a compilation in the gap after a step is that step's).
    compiling, recompiling = np.zeros(len(windows), dtype=bool), np.zeros(len(windows), dtype=bool)
    compiling[since[since >= 0]] = True
    recompiling[since[(~first | (since >= warmup)) & (since >= 0)]] = True
    call_at = np.array(calls, dtype=np.int64).reshape(-1, 2)[recompile]
    return _Compiles(
        warmup_steps=warmup,
        warmup_ns=float(_Union(starts_at[in_warmup], ends_at[in_warmup]).covered(windows[:warmup]).sum()),
        warmup_compiles=int((in_warmup & backend_at).sum()),
        recompile_ns=_Union(starts_at[recompile], ends_at[recompile]).covered(windows),
        recompiles=int((recompile & backend_at).sum()),
        compiling=compiling,
        recompiling=recompiling,
        recompile_calls=_Union(call_at[:, 0], call_at[:, 1]),
    )


def _launched(trace: _Trace, steps: _Steps, is_dispatch: np.ndarray) -> np.ndarray:
    """The step windows from the moment the host began launching each: a window the devices' runs give starts
    when the first run starts, after the host's dispatch that launched it (and compiled its program on a first
    call), so the first window starts with the last outermost dispatch begun before it."""
    windows = steps.windows
    from_devices = steps.source is StepSource.DEVICE_STEPS or (
        steps.source is StepSource.PROGRAM_RUNS and bool(trace.program_runs))
    if not from_devices or not len(windows):
        return windows
    begun = [line.starts[_outermost(line, is_dispatch) & (line.starts < windows[0, 0])] for line in trace.host_lines]
    starts = np.concatenate(begun or [np.zeros(0, np.int64)])
    if not len(starts):
        return windows
    launched = windows.copy()
    launched[0, 0] = int(starts.max())
    return launched


def _warmup(compiles: _Compiles, steps: _Steps, windows: np.ndarray, step_ns: np.ndarray) -> Warmup | None:
    """The warm-up's cost (its steps from the first's launch to the first steady step's) and the steady steps."""
    warmup = compiles.warmup_steps
    if not warmup:
        return None
    return Warmup(
        steps=warmup,
        ms=float(windows[warmup, 0] - windows[0, 0]) / 1e6,
        compile_ms=compiles.warmup_ns / 1e6,
        compiles=compiles.warmup_compiles,
        steady_step_ms=Distribution.of((_complete(steps, step_ns)[warmup:] / 1e6).tolist()),
    )


def _recompile_cost(compiles: _Compiles, steps: _Steps, windows: np.ndarray) -> RecompileCost | None:
    """What the steps after the warm-up that recompile cost (:class:`RecompileCost`): each one's time, with the gap
    after it, beyond the median of those that compile nothing, else the time inside its recompiling jit calls."""
    warmup = compiles.warmup_steps
    iterations = _complete(steps, np.vstack((_iterations(windows), windows[-1:])) if len(windows) > 1 else windows)
    iterations = iterations[warmup:]
    recompiling = compiles.recompiling[warmup:warmup + len(iterations)]
    if not recompiling.any():
        return None
    durations = (iterations[:, 1] - iterations[:, 0]).astype(np.float64)
    normal = ~compiles.compiling[warmup:warmup + len(iterations)]
    normal_ns = float(np.median(durations[normal])) if normal.any() else None
    cost = ((durations[recompiling] - normal_ns).clip(min=0) if normal_ns is not None
            else compiles.recompile_calls.covered(iterations[recompiling]).astype(np.float64))
    loop_ns = max(1.0, float(durations.sum()))
    return RecompileCost(steps=int(recompiling.sum()), ms=float(cost.sum()) / 1e6,
                         share_of_loop=min(1.0, float(cost.sum()) / loop_ns), loop_ms=loop_ns / 1e6,
                         normal_step_ms=None if normal_ns is None else normal_ns / 1e6)


def _slow_steps(trace: _Trace, steps: _Steps, stepping: list[_Line], is_marker: np.ndarray,
                busy_unions: list[_Union], warmup: int) -> SlowSteps | None:
    """The iterations after the warm-up grouped by duration (:func:`slow_split`), and what the stepping thread
    does for longer in the slow ones: per event name, its time in a slow iteration against a normal one."""
    # The last step has no gap the capture shows: it counts with its own window, when that is a whole step.
    iterations = _complete(steps, np.vstack((_iterations(steps.windows), steps.windows[-1:])))[warmup:] \
        if len(steps.windows) > 1 else steps.windows[:0]
    durations = (iterations[:, 1] - iterations[:, 0]).astype(np.float64)
    slow = slow_split(durations)
    if slow is None:
        return None
    gaps = np.maximum(iterations[:, 1] - steps.windows[warmup:warmup + len(iterations), 1], 0).astype(np.float64)
    busy = [union.covered(iterations).astype(np.float64) for union in busy_unions]
    device = np.mean(busy, axis=0) if busy else None
    loop_ns = float(durations.sum())
    normal_ms = float(np.median(durations[~slow])) / 1e6
    cost_ns = float((durations[slow] - normal_ms * 1e6).clip(min=0).sum())
    return SlowSteps(
        steps=int(slow.sum()),
        compared=len(iterations),
        indices=(np.flatnonzero(slow) + warmup).tolist()[:MAX_SERIES],
        slow_ms=float(durations[slow].mean()) / 1e6,
        normal_ms=normal_ms,
        slow_gap_ms=float(gaps[slow].mean()) / 1e6,
        normal_gap_ms=float(gaps[~slow].mean()) / 1e6,
        slow_busy_ms=float(device[slow].mean()) / 1e6 if device is not None else None,
        normal_busy_ms=float(device[~slow].mean()) / 1e6 if device is not None else None,
        loop_ms=loop_ns / 1e6,
        share_of_loop=float(durations[slow].sum()) / loop_ns,
        cost_ms=cost_ns / 1e6,
        cost_fraction=min(1.0, cost_ns / loop_ns),
        differences=_differences(trace, stepping, is_marker, iterations, slow, loop_ns),
        elsewhere=_elsewhere(trace, stepping, iterations, slow, loop_ns),
    )


def _differences(trace: _Trace, stepping: list[_Line], is_marker: np.ndarray, iterations: np.ndarray,
                 slow: np.ndarray, loop_ns: float) -> list[StepDifference]:
    """The event names the stepping thread spends more time in per slow iteration than per normal one: the
    cause first (the innermost of those with nearly the largest difference: the function, not its callers),
    then the rest by their difference."""
    slow_ns, normal_ns = np.zeros(len(trace.names)), np.zeros(len(trace.names))
    depth = np.zeros(len(trace.names), dtype=np.int64)
    for line in stepping:
        at = _step_of(iterations, line.starts)
        keep = (at >= 0) & ~is_marker[line.ids] & _outermost_of_its_name(line)
        length = (line.ends - line.starts).astype(np.float64)
        in_slow = keep & slow[np.maximum(at, 0)]
        np.add.at(slow_ns, line.ids[in_slow], length[in_slow])
        np.add.at(normal_ns, line.ids[keep & ~in_slow], length[keep & ~in_slow])
        np.maximum.at(depth, line.ids[in_slow], _depths(line)[in_slow])
    slow_count, normal_count = int(slow.sum()), int((~slow).sum())
    extra = slow_ns / slow_count - normal_ns / normal_count
    largest = float(extra.max(initial=0.0))
    named = [int(i) for i in np.argsort(-extra) if extra[i] > 0 and extra[i] >= NAMED_DIFFERENCE * largest]
    cause = max((i for i in named if extra[i] >= CAUSE_DIFFERENCE * largest), key=lambda i: depth[i], default=None)
    ordered = ([cause] if cause is not None else []) + [i for i in named if i != cause]
    return [StepDifference(name=trace.names[i], slow_ms=float(slow_ns[i]) / slow_count / 1e6,
                           normal_ms=float(normal_ns[i]) / normal_count / 1e6,
                           share_of_loop=min(1.0, float(extra[i]) * slow_count / loop_ns))
            for i in ordered[:MAX_DIFFERENCES]]


def _elsewhere(trace: _Trace, stepping: list[_Line], iterations: np.ndarray, slow: np.ndarray,
               loop_ns: float) -> list[StepDifference]:
    """The other host threads' events by the time they run inside the slow iterations per slow iteration, against
    inside the normal ones per normal iteration (an event counts for the part of it inside each: a thread's long
    save spans many steps); ordered as :func:`_differences` orders the stepping thread's."""
    # The time of slow (and of normal) iterations before each instant, piecewise linear over their bounds.
    bounds = iterations.reshape(-1).astype(np.float64)
    lengths = (iterations[:, 1] - iterations[:, 0]).astype(np.float64)
    cumulative = {}
    for group, chosen in (("slow", slow), ("normal", ~slow)):
        before = np.concatenate(([0.0], np.cumsum(np.where(chosen, lengths, 0.0))))
        cumulative[group] = np.column_stack((before[:-1], before[1:])).reshape(-1)
    rows = []  # (extra ns per slow iteration, depth, thread, name id, slow ns, normal ns)
    slow_count, normal_count = int(slow.sum()), int((~slow).sum())
    for line in trace.host_lines:
        if any(line is chosen for chosen in stepping) or not len(line):
            continue
        keep = _outermost_of_its_name(line)
        inside = {group: np.interp(line.ends[keep], bounds, values) - np.interp(line.starts[keep], bounds, values)
                  for group, values in cumulative.items()}
        slow_ns = np.bincount(line.ids[keep], weights=inside["slow"], minlength=len(trace.names))
        normal_ns = np.bincount(line.ids[keep], weights=inside["normal"], minlength=len(trace.names))
        depth = np.zeros(len(trace.names), dtype=np.int64)
        np.maximum.at(depth, line.ids[keep], _depths(line)[keep])
        extra = slow_ns / slow_count - normal_ns / normal_count
        rows += [(float(extra[i]), int(depth[i]), line.name or UNNAMED_THREAD, int(i), float(slow_ns[i]),
                  float(normal_ns[i])) for i in np.flatnonzero(extra > 0)]
    largest = max((row[0] for row in rows), default=0.0)
    named = sorted((row for row in rows if row[0] >= NAMED_DIFFERENCE * largest), key=lambda row: -row[0])
    cause = max((row for row in named if row[0] >= CAUSE_DIFFERENCE * largest), key=lambda row: row[1],
                default=None)
    ordered = ([cause] if cause is not None else []) + [row for row in named if row is not cause]
    return [StepDifference(name=trace.names[i], thread=thread, slow_ms=slow_ns / slow_count / 1e6,
                           normal_ms=normal_ns / normal_count / 1e6,
                           share_of_loop=min(1.0, extra * slow_count / loop_ns))
            for extra, _, thread, i, slow_ns, normal_ns in ordered[:MAX_DIFFERENCES]]


def _outermost_of_its_name(line: _Line) -> np.ndarray:
    """Whether no enclosing event has the event's name: a jit function called inside another of the same name
    (``PjitFunction`` within ``PjitFunction``) counts its time once."""
    outermost = np.ones(len(line), dtype=bool)
    up = line.parents.copy()
    while (inside := up >= 0).any():
        outermost &= ~(inside & (line.ids[np.maximum(up, 0)] == line.ids))
        up = np.where(inside, line.parents[np.maximum(up, 0)], -1)
    return outermost


def _depths(line: _Line) -> np.ndarray:
    """How many events enclose each event (one pass per nesting level)."""
    depth = np.zeros(len(line), dtype=np.int64)
    up = line.parents.copy()
    while (inside := up >= 0).any():
        depth += inside
        up = np.where(inside, line.parents[np.maximum(up, 0)], -1)
    return depth


def _activities(trace: _Trace, total_ns: np.ndarray, count: np.ndarray, steps: int, mean_step_ns: float,
                dispatching: np.ndarray, own: _Own | None = None, thread: str = "",
                reads: np.ndarray | None = None) -> list[HostActivity]:
    found = []
    for i in np.argsort(-total_ns)[:TOP_ACTIVITIES]:
        if total_ns[i] <= 0:
            continue
        activity = HostActivity(name=trace.names[i], count_per_step=count[i] / steps,
                                ms_per_step=total_ns[i] / steps / 1e6, share_of_step=total_ns[i] / steps / mean_step_ns,
                                encloses_dispatches=bool(dispatching[i]), thread=thread)
        if reads is not None:
            activity.reads_device = bool(reads[i])
        if own is not None:
            activity.self_ms_per_step = float(own.ns[i]) / steps / 1e6
            activity.reads_device = bool(own.reads[i]) if own.reads is not None else False
            held = own.parts.get(int(i), [])
            activity.owners = [OwnTime(name=trace.names[holder], ms_per_step=ns / steps / 1e6, reads_device=reads)
                               for holder, ns, reads in held[:MAX_OWNERS] if ns >= OWNER_FLOOR * own.ns[i] > 0]
        found.append(activity)
    return found


def _has_descendant(line: _Line, flagged: np.ndarray) -> np.ndarray:
    """For each event, whether any event it encloses is ``flagged`` (one pass per nesting level)."""
    result = np.zeros(len(line), dtype=bool)
    reached = line.parents[flagged & (line.parents >= 0)]
    while len(reached):
        reached = reached[~result[reached]]
        result[reached] = True
        reached = line.parents[reached]
        reached = reached[reached >= 0]
    return result


def _nearest_ancestor(line: _Line, flagged: np.ndarray) -> np.ndarray:
    """For each event, the nearest event enclosing it that is ``flagged``, -1 where none is (one pass per
    nesting level)."""
    nearest = np.full(len(line), -1, dtype=np.int64)
    looking = np.flatnonzero(line.parents >= 0)
    up = line.parents[looking]
    while len(looking):
        found = flagged[up]
        nearest[looking[found]] = up[found]
        looking, up = looking[~found], line.parents[up[~found]]
        looking, up = looking[up >= 0], up[up >= 0]
    return nearest


def _has_ancestor(line: _Line, flagged: np.ndarray) -> np.ndarray:
    """For each event, whether any event enclosing it is ``flagged``.

    Each pass doubles how far up it has looked (and where it looks from), so a
    chain of n nested events takes log2(n) passes rather than n; an event that has
    found one, or has looked up to the top, is done.
    """
    up = line.parents.copy()  # after k passes: the ancestor 2**k levels up, or -1
    result = (up >= 0) & flagged[np.maximum(up, 0)]  # after k passes: any flagged within 2**k levels
    looking = np.flatnonzero((up >= 0) & ~result)
    while len(looking):
        above = up[looking]
        result[looking], up[looking] = result[above], up[above]
        looking = looking[~result[looking] & (up[looking] >= 0)]
    return result


def main(argv: list[str]) -> NoReturn:
    """The reader process: the evidence as JSON on stdout, or exit 3 with the reason.

    It exits without freeing what it computed; the system takes the memory back at once.
    """
    path, *timeline = argv
    try:
        trace = _read(Path(path), Path(timeline[0]) if timeline else None)
        sys.stdout.write(_evidence(Path(path), trace).to_json())
    except UnreadableProfile as error:
        print(error, file=sys.stderr)
        sys.stderr.flush()
        os._exit(UNREADABLE_EXIT)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
