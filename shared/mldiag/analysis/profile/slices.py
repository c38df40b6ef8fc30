"""One host's profile cut into consecutive time slices: smaller ``XSpace`` files XProf converts one at a time.

XProf's op_stats conversion holds a whole host file in memory, at 17x to 41x its
size, and protobuf refuses a file past 2 GiB. Cut into slices, each is converted
alone at a fraction of that, and the slices' op_stats merged
(:mod:`mldiag.analysis.xprof.op_stats_merge`) are the host's.

Every slice keeps what is not an event whole: the XSpace's own fields, every
plane's names, metadata and stats (the HLO modules of the metadata plane
included), every line with its name and time base. Of each line's events it
keeps those whose *top-level event* starts in its span of time: the outermost
event that encloses them on that line, so an event always stays with the events
nested in it. The cuts fall where each slice holds about the same bytes of
events, so that each conversion needs about the same memory; where the profile
marks its steps (a device's ``Steps`` line, or the host's events with a ``step_num``,
which XProf's step trace reads), each cut moves to the start of the step nearest
to it, so that no step is split between two slices (where nothing marks a step, to
the start of the nearest program run on a device).

The file is never parsed as one message nor copied into memory: it is
memory-mapped and read line by line (:func:`mldiag.analysis.profile.xspace.line_events`)
once, keeping four numbers per top-level event (its start, where it is, its
bytes and its last end, nested events included); the slices are then written
from those, a run of the file's bytes at a time.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from mldiag.analysis.profile.wire import MalformedXSpace, field_head, fields
from mldiag.analysis.profile.xspace import (
    PLANE_LINES,
    XSPACE_PLANES,
    LineEvents,
    event_stat_ids,
    line_events,
    plane_name,
    release_pages,
    stat_id,
)

DEVICE_PLANE_PREFIX = "/device:"
HOST_PLANE = "/host:CPU"
ACCELERATOR_PLANE_PREFIXES = ("/device:TPU:", "/device:GPU:")  # the planes of devices that run programs
STEPS_LINE = "Steps"  # the line of a device plane whose events are its steps
PROGRAMS_LINE = "XLA Modules"  # the line of a device plane whose events are its program runs
STEP_MARKER = "step_num"  # the stat of a host event that marks a step
OPS_LINE = "XLA Ops"  # the line of a device plane whose events are the ops it runs


@dataclass
class TimeSlices:
    """The slices of one host file, earliest first, and where each plane's events lie in each slice."""

    paths: list[Path]
    extents_ns: dict[str, np.ndarray] = field(default_factory=dict)  # per plane: per slice, first start, last end
    # The same of each plane's op lines (a TPU's "XLA Ops"), where ops are active, by plane.
    op_extents_ns: dict[str, np.ndarray] = field(default_factory=dict)
    cut_at: str = ""  # what marks the starts the cuts moved to: STEPS_LINE, STEP_MARKER or PROGRAMS_LINE ("" none)
    events: int = 0  # every event of the file, nested and instant ones included
    # Those of its host plane where its programs run on a TPU or GPU plane: its host lines are then all threads (a
    # host whose CPU runs the programs has its compute lanes there too), whose events the raw-event read cuts into
    # pieces of time, up to a few an event.
    host_thread_events: int = 0
    steps: int = 0  # the starts of steps (or of program runs, where nothing marks a step) the cuts could move to

    def gaps_ns(self, plane_prefix: str, *, ops_only: bool = False) -> int:
        """The time between the slices on the planes whose names start with ``plane_prefix``, summed over those
        planes: from each slice's last event to the next slice's first (0 where they overlap); ``ops_only``,
        on their op lines alone. A conversion of the slices apart misses these gaps; added to the slices'
        spans they give the whole file's."""
        total = 0
        for plane, extents in (self.op_extents_ns if ops_only else self.extents_ns).items():
            if plane.startswith(plane_prefix):
                held = extents[extents[:, 0] <= extents[:, 1]]  # slices with events on the plane
                total += int(np.clip(held[1:, 0] - held[:-1, 1], 0, None).sum())
        return total


@dataclass
class _Span:
    """A field of the file: where its tag starts, and where its value starts and ends."""

    tag_at: int
    start: int
    end: int


def slice_by_time(path: Path, count: int, folder: Path) -> TimeSlices:
    """Cut the host file at ``path`` into ``count`` time slices written into ``folder``, earliest first: fewer
    where two cuts move to the start of the same step.

    Each slice is named after the file, with its index: ``host.xplane.pb`` gives ``host.slice-0.xplane.pb``...
    Raises :class:`MalformedXSpace` for a file that is not in the wire format.
    """
    if count < 1:
        raise ValueError(f"a profile is cut into at least one slice, not {count}")
    with open(path, "rb") as file:
        if not file.seek(0, 2):
            raise MalformedXSpace(f"{path.name} is empty")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as source:
            planes = [(plane, [_summary(source, line) for line in _line_spans(source, plane)])
                      for plane in _planes(source)]
            cut_at, boundaries = _boundaries(source, planes)
            cuts = _at_boundaries(_cuts([line for _, lines in planes for line in lines], count), boundaries)
            count = len(cuts) + 1
            extents: dict[str, np.ndarray] = {}
            op_extents: dict[str, np.ndarray] = {}
            names = [plane_name(source, plane.start, plane.end) for plane, _ in planes]
            for name, (plane, lines) in zip(names, planes):
                plane_extents = extents.setdefault(name, _no_extents(count))
                for line in lines:
                    line.widen(plane_extents, cuts)
                    if line.name == OPS_LINE:
                        line.widen(op_extents.setdefault(name, _no_extents(count)), cuts)
            stem = path.name.removesuffix(".xplane.pb")
            targets = [folder / f"{stem}.slice-{index}.xplane.pb" for index in range(count)]
            _write(source, cuts, planes, targets)
    on_devices = any(name.startswith(ACCELERATOR_PLANE_PREFIXES) for name in names)
    return TimeSlices(targets, extents, op_extents, cut_at if len(cuts) else "",
                      sum(line.events for _, lines in planes for line in lines),
                      sum(line.events for name, (_, lines) in zip(names, planes) if on_devices and name == HOST_PLANE
                          for line in lines), len(boundaries))


def shared_bytes(path: Path) -> int:
    """The bytes every slice of the file at ``path`` carries whatever its share of the events: the XSpace's own
    fields and each plane's name, metadata and stats (the lines' own few fields aside)."""
    with open(path, "rb") as file:
        if not file.seek(0, 2):
            raise MalformedXSpace(f"{path.name} is empty")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as source:
            return sum(
                end - tag_at if number != XSPACE_PLANES else sum(
                    field_end - field_at for field, field_at, _, field_end in fields(source, start, end)
                    if field != PLANE_LINES)
                for number, tag_at, start, end in fields(source, 0, len(source)))


def without_events(path: Path, target: Path) -> None:
    """Write to ``target`` the file at ``path`` without any of its lines: the XSpace's own fields, and every
    plane's name, metadata and stats (the HLO modules of the metadata plane included)."""
    with open(path, "rb") as file:
        if not file.seek(0, 2):
            raise MalformedXSpace(f"{path.name} is empty")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as source, open(target, "wb") as output:
            for number, tag_at, start, end in fields(source, 0, len(source)):
                if number != XSPACE_PLANES:
                    output.write(source[tag_at:end])
                    continue
                described = [source[field_at:field_end] for field, field_at, _, field_end in fields(source, start, end)
                             if field != PLANE_LINES]
                output.write(field_head(XSPACE_PLANES, sum(map(len, described))))
                output.writelines(described)


def _no_extents(count: int) -> np.ndarray:
    extents = np.empty((count, 2), dtype=np.int64)
    extents[:, 0], extents[:, 1] = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    return extents


def _planes(source: mmap.mmap) -> Iterator[_Span]:
    for number, tag_at, start, end in fields(source, 0, len(source)):
        if number == XSPACE_PLANES:
            yield _Span(tag_at, start, end)


def _line_spans(source: mmap.mmap, plane: _Span) -> Iterator[_Span]:
    for number, tag_at, start, end in fields(source, plane.start, plane.end):
        if number == PLANE_LINES:
            yield _Span(tag_at, start, end)


def _read_line(source: mmap.mmap, line: _Span) -> LineEvents:
    events = line_events(source, line.start, line.end)
    release_pages(source, line.start, line.end)
    return events


def _top_level(events: LineEvents) -> np.ndarray:
    """For each event, the index of its top-level event: the latest event before it that starts at or after the
    end of every event before that one (an event that starts before some earlier event ends is nested in it)."""
    if not len(events.offsets_ps):
        return np.zeros(0, dtype=np.int64)
    ends = events.offsets_ps + events.durations_ps
    latest_end_before = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(ends)[:-1]))
    indices = np.arange(len(ends))
    return np.maximum.accumulate(np.where(events.offsets_ps >= latest_end_before, indices, 0))


def _starts_ns(events: LineEvents) -> np.ndarray:
    return events.timestamp_ns + events.offsets_ps // 1000


@dataclass
class _LineSummary:
    """What cutting needs of a line, read once: its other fields, and of each of its top-level events the start,
    where it is in the file, and the bytes and the last end of it with the events nested in it."""

    span: _Span
    name: str
    headers: list[tuple[int, int]]  # where its other fields are
    kinds: np.ndarray  # metadata ids
    starts_ns: np.ndarray
    at: np.ndarray
    bytes: np.ndarray
    ends_ns: np.ndarray
    adjacent: bool  # its events follow one another in the file (as every serializer writes them)
    events: int  # all of them, nested ones included

    def slices(self, cuts: np.ndarray) -> np.ndarray:
        """The slice of each top-level event."""
        return np.searchsorted(cuts, self.starts_ns, side="right")

    def widen(self, extents: np.ndarray, cuts: np.ndarray) -> None:
        """Widen ``extents`` (per slice: first start, last end) to the line's events."""
        slices = self.slices(cuts)
        np.minimum.at(extents[:, 0], slices, self.starts_ns)
        np.maximum.at(extents[:, 1], slices, self.ends_ns)

    def bytes_per_slice(self, cuts: np.ndarray, count: int) -> np.ndarray:
        """The bytes of each slice's copy of the line."""
        own = sum(end - start for start, end in self.headers)
        return own + np.bincount(self.slices(cuts), weights=self.bytes, minlength=count).astype(np.int64)

    def runs(self, source: mmap.mmap, cuts: np.ndarray) -> list[tuple[int, int, int]]:
        """``(slice, start, end)`` of each run of the line's events that lie next to each other in the file and
        go to the same slice, in file order."""
        if not self.adjacent:
            events = _read_line(source, self.span)
            return _runs(events.at, events.sizes, _slice_of(events, cuts))
        return _runs(self.at, self.bytes, self.slices(cuts))


def _summary(source: mmap.mmap, line: _Span) -> _LineSummary:
    events = _read_line(source, line)
    headers = _not_events(events, line)
    if not len(events.at):
        empty = np.zeros(0, dtype=np.int64)
        return _LineSummary(line, events.name, headers, empty, empty, empty, empty, empty, True, 0)
    top = _top_level(events)
    firsts = np.flatnonzero(top == np.arange(len(top)))
    starts = _starts_ns(events)
    ends = np.maximum.reduceat(starts + events.durations_ps // 1000, firsts)
    adjacent = bool((events.at[1:] == events.at[:-1] + events.sizes[:-1]).all())
    return _LineSummary(line, events.name, headers, events.metadata_ids[firsts], starts[firsts], events.at[firsts],
                        np.add.reduceat(events.sizes, firsts), ends, adjacent, len(events.at))


def _cuts(lines: list[_LineSummary], count: int) -> np.ndarray:
    """The ``count - 1`` start times (ns) at which the slices after the first begin: each slice then holds about
    the same bytes of events, counting each top-level event with the events nested in it."""
    if count == 1 or not any(len(line.starts_ns) for line in lines):
        return np.zeros(0, dtype=np.int64)
    times = np.concatenate([line.starts_ns for line in lines])
    order = np.argsort(times, kind="stable")
    times = times[order]
    before = np.cumsum(np.concatenate([line.bytes for line in lines])[order])
    shares = before[-1] * np.arange(1, count) / count
    reaching = np.searchsorted(before, shares)  # the top-level event that takes the bytes past each share
    short_of = np.where(reaching > 0, before[reaching - 1], 0)  # the bytes before it
    ahead = (reaching > 0) & (shares - short_of < before[reaching] - shares)  # cutting before it is closer
    return times[np.minimum(np.where(ahead, reaching, reaching + 1), len(times) - 1)]


def _boundaries(source: mmap.mmap, planes: list[tuple[_Span, list[_LineSummary]]]) -> tuple[str, np.ndarray]:
    """When each step starts (ns) and what marks it: the ``Steps`` lines of the device planes, else the
    host's step markers (its events with a ``step_num``, as XProf groups steps), else when each program run
    starts (the devices' ``XLA Modules`` lines); none where nothing marks them."""
    named = [(plane_name(source, plane.start, plane.end), plane, lines) for plane, lines in planes]
    device = [lines for name, _, lines in named if name.startswith(DEVICE_PLANE_PREFIX)]
    found: dict[str, Callable[[], list[np.ndarray]]] = {  # in order of preference, each read only if needed
        STEPS_LINE: lambda: [line.starts_ns for lines in device for line in lines if line.name == STEPS_LINE],
        STEP_MARKER: lambda: [_step_marker_starts(source, plane, lines) for name, plane, lines in named
                              if name == HOST_PLANE],
        PROGRAMS_LINE: lambda: [line.starts_ns for lines in device for line in lines if line.name == PROGRAMS_LINE],
    }
    for marker, read in found.items():
        starts = read()
        if any(len(some) for some in starts):
            return marker, np.unique(np.concatenate(starts))
    return "", np.zeros(0, dtype=np.int64)


def _step_marker_starts(source: mmap.mmap, plane: _Span, lines: list[_LineSummary]) -> np.ndarray:
    """When the plane's top-level events that carry a ``step_num`` stat start (ns): for each kind of event
    (its metadata), the first one's stats tell."""
    step_num = stat_id(source, plane.start, plane.end, STEP_MARKER)
    if step_num is None:
        return np.zeros(0, dtype=np.int64)
    starts = []
    for line in lines:
        kinds, first = np.unique(line.kinds, return_index=True)
        markers = [kind for kind, at in zip(kinds, line.at[first]) if step_num in event_stat_ids(source, int(at))]
        starts.append(line.starts_ns[np.isin(line.kinds, markers)])
    return np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)


def _at_boundaries(cuts: np.ndarray, boundaries: np.ndarray) -> np.ndarray:
    """Each cut moved to the boundary (a step's start) nearest to it, none moved without any, one cut per
    boundary."""
    if not len(cuts) or not len(boundaries):
        return cuts
    after = np.searchsorted(boundaries, cuts)
    later, earlier = boundaries[np.minimum(after, len(boundaries) - 1)], boundaries[np.maximum(after - 1, 0)]
    return np.unique(np.where(cuts - earlier <= later - cuts, earlier, later))


def _slice_of(events: LineEvents, cuts: np.ndarray) -> np.ndarray:
    """Which slice each event goes to: the one its top-level event starts in."""
    return np.searchsorted(cuts, _starts_ns(events), side="right")[_top_level(events)]


def _not_events(events: LineEvents, line: _Span) -> list[tuple[int, int]]:
    """The line's other fields (name, time base...): the bytes between and around its events."""
    if not len(events.at):
        return [(line.start, line.end)]
    ends = events.at + events.sizes
    bounds = [(line.start, int(events.at[0]))]
    bounds += [(int(ends[gap]), int(events.at[gap + 1])) for gap in np.flatnonzero(events.at[1:] != ends[:-1])]
    bounds.append((int(ends[-1]), line.end))
    return [(start, end) for start, end in bounds if end > start]


def _runs(at: np.ndarray, sizes: np.ndarray, slices: np.ndarray) -> list[tuple[int, int, int]]:
    """``(slice, start, end)`` of each run of the pieces at ``at`` (of ``sizes`` bytes) that lie next to each
    other in the file and go to the same slice, in file order."""
    if not len(slices):
        return []
    ends = at + sizes
    breaks = np.flatnonzero((slices[1:] != slices[:-1]) | (at[1:] != ends[:-1])) + 1
    firsts, lasts = np.concatenate(([0], breaks)), np.concatenate((breaks, [len(slices)])) - 1
    return [(int(slices[first]), int(at[first]), int(ends[last])) for first, last in zip(firsts, lasts)]


def _write(source: mmap.mmap, cuts: np.ndarray, planes: list[tuple[_Span, list[_LineSummary]]],
           targets: list[Path]) -> None:
    with contextlib.ExitStack() as stack:
        outputs = [stack.enter_context(open(target, "wb")) for target in targets]
        view = stack.enter_context(memoryview(source))
        lines_of = iter(lines for _, lines in planes)
        for number, tag_at, start, end in fields(source, 0, len(source)):
            if number == XSPACE_PLANES:
                _write_plane(source, view, _Span(tag_at, start, end), next(lines_of), cuts, outputs)
            else:  # the XSpace's own fields: host names, errors, warnings
                for output in outputs:
                    output.write(view[tag_at:end])


def _write_plane(source: mmap.mmap, view: memoryview, plane: _Span, lines: list[_LineSummary],
                 cuts: np.ndarray, outputs: list[BinaryIO]) -> None:
    described = [(tag_at, end) for number, tag_at, _, end in fields(source, plane.start, plane.end)
                 if number != PLANE_LINES]
    line_sizes = [line.bytes_per_slice(cuts, len(outputs)) for line in lines]
    plane_sizes = sum(end - tag_at for tag_at, end in described) + sum(
        (np.array([len(field_head(PLANE_LINES, int(size))) for size in sizes]) + sizes for sizes in line_sizes),
        np.zeros(len(outputs), dtype=np.int64))
    for output, size in zip(outputs, plane_sizes):
        output.write(field_head(XSPACE_PLANES, int(size)))
        for tag_at, end in described:  # the plane's name, metadata and stats
            output.write(view[tag_at:end])
    for line, sizes in zip(lines, line_sizes):
        for output, size in zip(outputs, sizes):
            output.write(field_head(PLANE_LINES, int(size)))
            for start, end in line.headers:
                output.write(view[start:end])
        for index, start, end in line.runs(source, cuts):
            outputs[index].write(view[start:end])
        release_pages(source, line.span.start, line.span.end)
