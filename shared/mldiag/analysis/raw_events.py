"""Signals from the raw trace events of one ``<host>.xplane.pb``.

XProf's device tools are empty on CPU profiles (XLA ops there are host events on
``tf_XLA*`` threads) and its bottleneck text cannot tell an input-starved loop
from a busy one, so the basic facts are read from the events themselves, on
every kind of profile:

* **steps**: the host's step markers (``StepTraceAnnotation``), else a device
  ``Steps`` line, else one step per run of the dominant XLA program, else the
  whole active window;
* **busy**: per step, the union of the compute lanes' events (XLA CPU threads,
  TPU ``XLA Ops`` lines, GPU streams), averaged over devices;
* **host**: gaps between steps, what the host does inside steps, jit dispatches
  (``PjitFunction``) and compilation;
* **ops**: self time of each XLA op, and the converts, copies and reshapes.

A large profile has millions of events, so each line is read once into numpy
arrays (start, end, name id; :func:`~mldiag.analysis.xspace.read_planes` decodes
them without an object per event) and every signal is an array operation;
anything that depends on an event's name is decided once per distinct name.

``python -m mldiag.analysis.raw_events FILE [TIMELINE]`` prints the evidence as
JSON (exit 3 with the reason for a file that is not a profile) and saves every
event of the file in TIMELINE for the follow-up aggregation: the engine reads
each host in a process of its own, whose memory is gone the moment it is done.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from mldiag.analysis.host_evidence import (
    DeviceKind, Distribution, HostActivity, HostEvidence, OpFamily, OpTime, StepSeries, StepSource,
)
from mldiag.analysis.profiles import UNREADABLE_EXIT, UnreadableProfile, host_of
from mldiag.analysis.timeline import Timeline, TimelineLine
from mldiag.analysis.trace_names import (
    ALLOCATOR_EVENTS, COMMUNICATION, COMPILE, DISPATCH_PREFIX, FAMILIES, NOT_AN_OP, NOT_BUSY,
)
from mldiag.analysis.xspace import Line, MalformedXSpace, Plane, read_planes

MAX_SERIES = 1000
TOP_OPS = 15
TOP_ACTIVITIES = 10
FirstSeen = Callable[[int, dict[str, Any]], None]  # told each new name's id and the stats of its first event
_HLO_NAME = re.compile(r"^%?([^\s=]+)\s+=")


@dataclass
class _Line:
    """One trace line: events in start order, and how they nest."""

    name: str
    starts: np.ndarray
    ends: np.ndarray
    ids: np.ndarray  # index into _Trace.names
    parents: np.ndarray = field(init=False)  # index of the enclosing event, -1 at the top

    def __post_init__(self) -> None:
        order = np.lexsort((-self.ends, self.starts))
        self.starts, self.ends, self.ids = self.starts[order], self.ends[order], self.ids[order]
        self.parents = _parents(self.starts, self.ends)

    def __len__(self) -> int:
        return len(self.starts)

    def self_ns(self) -> np.ndarray:
        """Each event's duration minus that of its direct children."""
        own = self.ends - self.starts
        nested = self.parents >= 0
        np.subtract.at(own, self.parents[nested], (self.ends - self.starts)[nested])
        return own


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The enclosing event of each event, for events that nest (one thread's trace scopes).

    An event's depth is how many earlier events are still open when it starts;
    its parent is the last earlier event one level up. One sort and one search
    find every parent at once, however deep the events overlap.
    """
    count = len(starts)
    if count == 0:
        return np.full(0, -1, dtype=np.int64)
    sorted_ends = np.sort(ends)
    depth = np.arange(count) - np.searchsorted(sorted_ends, starts, side="right")
    np.maximum(depth, 0, out=depth)
    # Each event's key orders events by depth, then by position: the parent of an event at depth d
    # is the greatest key below (d - 1, the event's position), if that key is at depth d - 1.
    keys = np.sort(depth * count + np.arange(count))
    found = np.searchsorted(keys, (depth - 1) * count + np.arange(count), side="right") - 1
    candidate = keys[np.maximum(found, 0)]
    is_parent = (depth > 0) & (found >= 0) & (candidate // count == depth - 1)
    return np.where(is_parent, candidate % count, -1).astype(np.int64)


@dataclass
class _Trace:
    """A profile's lines by role, and its distinct event names."""

    names: list[str] = field(default_factory=list)
    device_kind: DeviceKind = DeviceKind.CPU
    device_type: str = "CPU"
    lanes: dict[str, list[_Line]] = field(default_factory=dict)  # device -> its compute lines
    host_lines: list[_Line] = field(default_factory=list)
    device_steps: _Line | None = None
    program_runs: _Line | None = None
    markers: set[int] = field(default_factory=set)  # name ids of step markers
    hlo_op_of: dict[int, str] = field(default_factory=dict)  # GPU kernel -> the HLO op it runs
    profile: Any = None  # the parsed file, held so that the reader process can exit without freeing it

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

    Every event of every line it reads, instant ones included, is also kept for
    the :class:`~mldiag.analysis.timeline.Timeline`; names that only such events
    carry are numbered apart (negative ids), so that the evidence's numbering
    stays that of the events it reads.
    """

    def __init__(self, trace: _Trace):
        self.trace = trace
        self.ids: dict[str, int] = {}
        self.timeline_ids: dict[str, int] = {}  # names of events only the timeline keeps -> -1, -2, ...
        self.kept: dict[int, np.ndarray] = {}  # id(line) -> every event's name id

    def line(self, line: Line, first_seen: FirstSeen | None = None, *, timed_only: bool = False) -> _Line:
        """The line's events as arrays; ``timed_only`` drops instant events (markers that take no time)."""
        every_id = self._events(line, first_seen, timed_only=timed_only)
        evidence = every_id >= 0
        begin = line.starts_ns[evidence]
        return _Line(line.name, begin, begin + line.durations_ns[evidence], every_id[evidence])

    def _events(self, line: Line, first_seen: FirstSeen | None = None, *, timed_only: bool = False,
                timeline_only: bool = False) -> np.ndarray:
        """Each event's name id (negative for events only the timeline keeps)."""
        if timeline_only:
            apart = np.ones(len(line), dtype=bool)
        else:
            apart = line.durations_ns == 0 if timed_only else np.zeros(len(line), dtype=bool)
        every_id = np.empty(len(line), dtype=np.int64)
        for chosen, numbered in ((~apart, self._numbered), (apart, self._numbered_apart)):
            positions = np.flatnonzero(chosen)
            metadata_ids, first, inverse = np.unique(line.metadata_ids[positions], return_index=True,
                                                     return_inverse=True)
            ids = np.empty(len(metadata_ids), dtype=np.int64)
            for distinct in np.argsort(first):  # names are numbered in the order their first events come
                name = line.plane.event_names.get(int(metadata_ids[distinct]), "")
                ids[distinct] = numbered(name, line, int(positions[first[distinct]]), first_seen)
            every_id[positions] = ids[inverse]
        self.kept[id(line)] = every_id
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
        """Every event of ``planes``, lines the evidence skipped included."""
        for plane in planes:
            for line in plane.lines:
                if id(line) not in self.kept:
                    self._events(line, timeline_only=True)
        names = list(self.trace.names)
        index_of = dict(self.ids)
        for name in self.timeline_ids:
            if name not in index_of:
                index_of[name] = len(names)
                names.append(name)
        apart = np.array([index_of[name] for name in self.timeline_ids] or [0], dtype=np.int64)
        lines = []
        for plane in planes:
            for line in plane.lines:
                ids = self.kept[id(line)]
                ids = np.where(ids >= 0, ids, apart[np.maximum(-1 - ids, 0)])
                # As XProf computes it: its reader's nanoseconds (picoseconds / 1000.0) times 1000, truncated.
                as_xprof_computes = (line.durations_ps / 1000.0 * 1000).astype(np.int64)
                lines.append(TimelineLine(plane.name, line.name, ids, as_xprof_computes))
        return Timeline(names, lines)


def _read(path: Path, timeline: Path | None = None) -> _Trace:
    try:
        planes = read_planes(path)
    except MalformedXSpace as error:
        raise UnreadableProfile(f"{path.name}: not a readable XSpace protobuf ({error})") from error
    trace = _Trace(profile=planes)
    reader = _Reader(trace)

    def note_hlo_op(index: int, stats: dict[str, Any]) -> None:
        if stats.get("hlo_op"):
            trace.hlo_op_of[index] = str(stats["hlo_op"])

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
        for attribute, line_name in (("device_steps", "Steps"), ("program_runs", "XLA Modules")):
            if getattr(trace, attribute) is None and line_name in lines:
                found = reader.line(lines[line_name])
                setattr(trace, attribute, found if len(found) else None)
        if trace.device_kind is DeviceKind.CPU:
            is_gpu = plane.name.startswith("/device:GPU:")
            trace.device_kind = DeviceKind.GPU if is_gpu else DeviceKind.TPU
            trace.device_type = _device_type(trace.device_kind, plane.stats)

    def note_marker(index: int, stats: dict[str, Any]) -> None:
        if "step_num" in stats:
            trace.markers.add(index)

    xla_runs_on_host = not trace.lanes
    host_lines = next((plane.lines for plane in planes if plane.name == "/host:CPU"), [])
    for line in host_lines:
        is_lane = xla_runs_on_host and line.name.startswith("tf_XLA")
        events = reader.line(line, note_marker, timed_only=is_lane)
        if is_lane:
            events.name = f"/host:CPU/{line.name}"
            trace.lanes.setdefault("/host:CPU", []).append(events)
        else:
            trace.host_lines.append(events)
    if trace.events == 0:
        raise UnreadableProfile(f"{path.name}: the profile has no trace events")
    if timeline is not None:
        reader.timeline(planes).save(timeline)
    return trace


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
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(ends[order]) if len(ends) else ends[order]
        opens_block = np.ones(len(starts), dtype=bool)
        opens_block[1:] = starts[1:] > ends[:-1]
        block_of = np.cumsum(opens_block) - 1
        self.starts = starts[opens_block]
        self.ends = np.zeros(len(self.starts), dtype=np.int64)
        np.maximum.at(self.ends, block_of, ends)
        self.covered_before = np.concatenate(([0], np.cumsum(self.ends - self.starts)))

    def covered(self, windows: np.ndarray) -> np.ndarray:
        """For each ``[start, end)`` row of ``windows``, the nanoseconds the intervals cover."""
        if len(self.starts) == 0:
            return np.zeros(len(windows), dtype=np.int64)
        start, end = windows[:, 0], windows[:, 1]
        first = np.searchsorted(self.ends, start, side="right")
        last = np.searchsorted(self.starts, end, side="left")
        total = self.covered_before[last] - self.covered_before[first]
        some = first < last
        clip_first = np.where(some, np.maximum(0, start - self.starts[np.minimum(first, len(self.starts) - 1)]), 0)
        clip_last = np.where(some, np.maximum(0, self.ends[np.maximum(last - 1, 0)] - end), 0)
        return np.where(some, total - clip_first - clip_last, 0)


def _union_of(lines: list[_Line], keep: np.ndarray) -> _Union:
    starts = np.concatenate([line.starts[keep[line.ids]] for line in lines] or [np.zeros(0, np.int64)])
    ends = np.concatenate([line.ends[keep[line.ids]] for line in lines] or [np.zeros(0, np.int64)])
    return _Union(starts, ends)


# --- steps -------------------------------------------------------------------------------------


def _windows_from_runs(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """One step per run: from a run's start to the next one's (the last ends with its run)."""
    order = np.argsort(starts)
    starts, ends = starts[order], ends[order]
    return np.column_stack((starts, np.append(starts[1:], ends.max())))


def _steps(trace: _Trace) -> tuple[StepSource, str, np.ndarray]:
    if trace.markers:
        counts = np.bincount(np.concatenate([line.ids for line in trace.host_lines]), minlength=len(trace.names))
        marker = max(trace.markers, key=lambda index: counts[index])
        windows = np.concatenate([
            np.column_stack((line.starts, line.ends))[line.ids == marker] for line in trace.host_lines
        ])
        return StepSource.STEP_MARKERS, trace.names[marker], windows[np.argsort(windows[:, 0])]
    if trace.device_steps is not None:
        steps = trace.device_steps
        return StepSource.DEVICE_STEPS, "", np.column_stack((steps.starts, steps.ends))
    runs = [trace.program_runs] if trace.program_runs is not None else trace.host_lines
    is_program = trace.mask(lambda name: trace.program_runs is not None or name.startswith(DISPATCH_PREFIX))
    time_by_name = np.zeros(len(trace.names), dtype=np.int64)
    for line in runs:
        np.add.at(time_by_name, line.ids, (line.ends - line.starts) * is_program[line.ids])
    if time_by_name.any():
        program = int(time_by_name.argmax())
        starts = np.concatenate([line.starts[line.ids == program] for line in runs])
        ends = np.concatenate([line.ends[line.ids == program] for line in runs])
        if len(starts) >= 2:
            return StepSource.PROGRAM_RUNS, trace.names[program], _windows_from_runs(starts, ends)
    active = [line for lines in trace.lanes.values() for line in lines] or trace.host_lines
    begin = min(int(line.starts.min()) for line in active if len(line))
    end = max(int(line.ends.max()) for line in active if len(line))
    return StepSource.PROFILE_WINDOW, "", np.array([[begin, end]], dtype=np.int64)


def _step_of(windows: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The index of the step each time falls in, -1 outside every step."""
    index = np.searchsorted(windows[:, 0], times, side="right") - 1
    inside = (index >= 0) & (times < windows[np.maximum(index, 0), 1])
    return np.where(inside, index, -1)


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

    With ``timeline``, every event of the file is also saved there (:class:`~mldiag.analysis.timeline.Timeline`).
    """
    return _evidence(path, _read(path, timeline))


def _evidence(path: Path, trace: _Trace) -> HostEvidence:
    source, marker, windows = _steps(trace)
    steps = len(windows)
    step_ns = windows[:, 1] - windows[:, 0]
    span = (windows[0, 0], windows[-1, 1])
    mean_step_ns = float(step_ns.mean())

    busy_name = ~trace.mask(lambda name: name.startswith(NOT_BUSY))
    covered = [_union_of(lines, busy_name).covered(windows) for lines in trace.lanes.values()]
    busy = np.mean(covered, axis=0) / np.maximum(step_ns, 1) if covered else np.zeros(steps)

    lanes = [line for lines in trace.lanes.values() for line in lines]
    is_op = trace.mask(lambda name: not name.startswith(NOT_AN_OP) and "::" not in name)
    in_span = [is_op[line.ids] & (line.starts >= span[0]) & (line.starts < span[1]) for line in lanes]
    op_ns = _per_name(trace, lanes, [line.self_ns() for line in lanes], in_span)
    op_count = _per_name(trace, lanes, [np.ones(len(line)) for line in lanes], in_span)
    labelled: dict[str, list[float]] = {}  # the same op on several devices or lanes is one op
    expressions: dict[str, str] = {}
    for index in np.flatnonzero(op_count):
        label, expression = _op_label(trace, int(index))
        totals = labelled.setdefault(label, [0.0, 0.0])
        totals[0] += op_ns[index]
        totals[1] += op_count[index]
        if expression:
            expressions.setdefault(label, expression)
    busy_ns = sum(ns for ns, _ in labelled.values()) or 1.0
    per_device_step = steps * max(1, len(trace.lanes))  # op times are per step on one device
    top_ops = sorted(labelled.items(), key=lambda item: -item[1][0])

    is_dispatch = trace.mask(lambda name: name.startswith(DISPATCH_PREFIX))
    is_compile = trace.mask(COMPILE.match)
    is_backend_compile = trace.mask(lambda name: name.startswith("backend_compile"))
    is_allocator = trace.mask(ALLOCATOR_EVENTS.__contains__)
    is_marker = trace.mask(lambda name: source is StepSource.STEP_MARKERS and name == marker)
    dispatches = np.zeros(steps, dtype=np.int64)
    compile_starts, compile_ends = [], []
    compiles_in_steps = allocator_events = 0
    host_keep, outer_dispatch, host_ns = [], [], []
    # What the host does for the step is what the step's own thread does; compiler and runtime pools
    # work alongside it.
    stepping = (
        [line for line in trace.host_lines if is_marker[line.ids].any()]
        or [line for line in trace.host_lines if is_dispatch[line.ids].any()]
        or trace.host_lines
    )
    for line in trace.host_lines:
        step = _step_of(windows, line.starts)
        parent_ids = np.where(line.parents >= 0, line.ids[np.maximum(line.parents, 0)], -1)
        dispatch = is_dispatch[line.ids]
        outermost = dispatch & ~_has_ancestor(line, dispatch) & (step >= 0)
        dispatches += np.bincount(step[outermost], minlength=steps)
        compiling = is_compile[line.ids] & (step >= 0)
        compile_starts.append(line.starts[compiling])
        compile_ends.append(line.ends[compiling])
        compiles_in_steps += int(is_backend_compile[line.ids[compiling]].sum())
        allocator_events += int(is_allocator[line.ids].sum())
        top_level = (line.parents < 0) | ((parent_ids >= 0) & is_marker[np.maximum(parent_ids, 0)])
        host_keep.append(top_level & ~is_marker[line.ids] & (step >= 0) & any(line is s for s in stepping))
        outer_dispatch.append(outermost)
        host_ns.append((line.ends - line.starts).astype(np.float64))
    compile_ns = _Union(np.concatenate(compile_starts or [np.zeros(0, np.int64)]),
                        np.concatenate(compile_ends or [np.zeros(0, np.int64)])).covered(windows)
    activity_ns = _per_name(trace, trace.host_lines, host_ns, host_keep)
    activity_count = _per_name(trace, trace.host_lines, [np.ones(len(x)) for x in host_ns], host_keep)
    dispatched = _per_name(trace, trace.host_lines, [np.ones(len(x)) for x in host_ns], outer_dispatch)
    dispatched_ns = _per_name(trace, trace.host_lines, host_ns, outer_dispatch)

    families = {}
    for family, pattern in FAMILIES.items():
        members = [label for label in labelled if pattern.search(label)]
        dispatch_count = sum(
            dispatched[i] for i in np.flatnonzero(dispatched) if pattern.search(trace.names[i][len(DISPATCH_PREFIX):])
        )
        if members or dispatch_count:
            families[family] = OpFamily(
                ops_per_step=sum(labelled[m][1] for m in members) / per_device_step,
                ms_per_step=sum(labelled[m][0] for m in members) / per_device_step / 1e6,
                dispatches_per_step=float(dispatch_count) / steps,
                examples=sorted(members, key=lambda m: -labelled[m][0])[:5],
            )
    gaps = windows[1:, 0] - windows[:-1, 1]
    has_lanes = bool(trace.lanes)
    return HostEvidence(
        host=host_of(path),
        file=path.name,
        bytes=path.stat().st_size,
        events=trace.events,
        device_kind=trace.device_kind,
        device_type=trace.device_type,
        devices=max(1, len(trace.lanes)),
        compute_lanes=[line.name for line in lanes],
        step_source=source,
        step_marker=marker,
        steps=steps,
        step_ms=Distribution.of((step_ns / 1e6).tolist()),
        busy_fraction=float(busy.mean()) if has_lanes else None,
        idle_ms_per_step=float(((1 - busy) * step_ns).mean() / 1e6) if has_lanes else None,
        gap_ms_per_step=float(gaps.mean() / 1e6) if len(gaps) else None,
        dispatches_per_step=float(dispatches.sum()) / steps,
        dispatch_ms_per_step=float(dispatched_ns.sum()) / steps / 1e6,
        compile_ms_per_step=float(compile_ns.sum()) / steps / 1e6,
        compiles_in_steps=compiles_in_steps,
        communication_ms_per_step=sum(ns for label, (ns, _) in labelled.items() if COMMUNICATION.search(label))
        / per_device_step / 1e6,
        memory_allocator_events=allocator_events,
        top_ops=[
            OpTime(name=label, count_per_step=count / per_device_step, self_ms_per_step=ns / per_device_step / 1e6,
                   share_of_busy=ns / busy_ns, expression=expressions.get(label, ""))
            for label, (ns, count) in top_ops[:TOP_OPS]
        ],
        host_activities=_activities(trace, activity_ns, activity_count, steps, mean_step_ns),
        dispatched=_activities(trace, dispatched_ns, dispatched, steps, mean_step_ns),
        op_families=families,
        series=StepSeries(
            step_ms=np.round(step_ns[:MAX_SERIES] / 1e6, 4).tolist(),
            busy_fraction=np.round(busy[:MAX_SERIES], 4).tolist(),
            dispatches=dispatches[:MAX_SERIES].tolist(),
            compile_ms=np.round(compile_ns[:MAX_SERIES] / 1e6, 4).tolist(),
            gap_before_ms=[0.0, *np.round(gaps[: MAX_SERIES - 1] / 1e6, 4).tolist()],
            truncated=steps > MAX_SERIES,
        ),
    )


def _activities(trace: _Trace, total_ns: np.ndarray, count: np.ndarray, steps: int,
                mean_step_ns: float) -> list[HostActivity]:
    return [
        HostActivity(name=trace.names[i], count_per_step=count[i] / steps, ms_per_step=total_ns[i] / steps / 1e6,
                     share_of_step=total_ns[i] / steps / mean_step_ns)
        for i in np.argsort(-total_ns)[:TOP_ACTIVITIES] if total_ns[i] > 0
    ]


def _has_ancestor(line: _Line, flagged: np.ndarray) -> np.ndarray:
    """For each event, whether any event enclosing it is ``flagged``.

    Each pass doubles how far up it has looked (and where it looks from), so a
    chain of n nested events takes log2(n) passes rather than n.
    """
    up = line.parents.copy()  # after k passes: the ancestor 2**k levels up, or -1
    result = (up >= 0) & flagged[np.maximum(up, 0)]  # after k passes: any flagged within 2**k levels
    while (looking := up >= 0).any():
        above = np.maximum(up, 0)
        result = result | (looking & result[above])
        up = np.where(looking, up[above], -1)
    return result


def main(argv: list[str]) -> NoReturn:
    """The reader process: the evidence as JSON on stdout, or exit 3 with the reason.

    It exits without freeing what it read (the parsed profile alone takes 10 ms
    per MB of file to free); the system takes the memory back at once.
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
