"""Cutting a profile into consecutive time slices, to test the OpStats merge on real conversions.

Each slice is an ``XSpace`` with every plane's metadata and every line's
header, and of each line's events those whose top-level event starts in the
slice (an event nested in another goes with it). The cuts split the events
into parts of about equal count. Read and written in the wire format with
:mod:`mldiag.analysis.wire`, as the analysis reads profiles.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from pathlib import Path

from mldiag.analysis.wire import delimited, fields, varint

_PLANES, _PLANE_LINES = 1, 3  # XSpace.planes, XPlane.lines
_LINE_TIMESTAMP_NS, _LINE_EVENTS = 3, 4  # XLine.timestamp_ns, XLine.events
_EVENT_OFFSET_PS, _EVENT_DURATION_PS = 2, 3


def _offset_and_duration(data: bytes, start: int, end: int) -> tuple[int, int]:
    offset = duration = 0
    for number, _, value_at, _ in fields(data, start, end):
        if number == _EVENT_OFFSET_PS:
            offset = varint(data, value_at)[0]
        elif number == _EVENT_DURATION_PS:
            duration = varint(data, value_at)[0]
        elif number > _EVENT_DURATION_PS:
            break
    return offset, duration


def _line_start_ps(data: bytes, start: int, end: int) -> int:
    for number, _, value_at, _ in fields(data, start, end):
        if number == _LINE_TIMESTAMP_NS:
            return varint(data, value_at)[0] * 1000
    return 0


def _lines(data: bytes) -> Iterator[tuple[int, int]]:
    """Where each line of each plane starts and ends."""
    for number, _, plane_at, plane_end in fields(data, 0, len(data)):
        if number == _PLANES:
            for field, _, line_at, line_end in fields(data, plane_at, plane_end):
                if field == _PLANE_LINES:
                    yield line_at, line_end


def _event_starts_ps(data: bytes) -> list[int]:
    starts = []
    for line_at, line_end in _lines(data):
        line_start = _line_start_ps(data, line_at, line_end)
        starts += [line_start + _offset_and_duration(data, event_at, event_end)[0]
                   for field, _, event_at, event_end in fields(data, line_at, line_end) if field == _LINE_EVENTS]
    return sorted(starts)


def _sliced_line(data: bytes, start: int, end: int, cuts: list[int]) -> list[bytes]:
    line_start = _line_start_ps(data, start, end)
    head, events = bytearray(), [bytearray() for _ in range(len(cuts) + 1)]
    top_level_end, slice_index = -1, 0
    for number, tag_at, value_at, value_end in fields(data, start, end):
        if number != _LINE_EVENTS:
            head += data[tag_at:value_end]
            continue
        offset, duration = _offset_and_duration(data, value_at, value_end)
        if offset >= top_level_end:
            slice_index = bisect.bisect_right(cuts, line_start + offset)
            top_level_end = offset + duration
        events[slice_index] += data[tag_at:value_end]
    return [bytes(head + part) for part in events]


def cut_by_time(path: Path, count: int, folder: Path) -> list[Path]:
    """``path`` cut into ``count`` consecutive slices, written as ``folder/<i>/<name of path>``."""
    data = path.read_bytes()
    starts = _event_starts_ps(data)
    cuts = [starts[len(starts) * index // count] for index in range(1, count)]
    spaces = [bytearray() for _ in range(count)]
    for number, tag_at, value_at, value_end in fields(data, 0, len(data)):
        if number != _PLANES:
            for space in spaces:
                space += data[tag_at:value_end]
            continue
        planes = [bytearray() for _ in range(count)]
        for field, field_tag_at, field_at, field_end in fields(data, value_at, value_end):
            parts = (_sliced_line(data, field_at, field_end, cuts) if field == _PLANE_LINES
                     else [data[field_tag_at:field_end]] * count)
            for plane, part in zip(planes, parts):
                plane += delimited(_PLANE_LINES, part) if field == _PLANE_LINES else part
        for space, plane in zip(spaces, planes):
            space += delimited(_PLANES, bytes(plane))
    written = []
    for index, space in enumerate(spaces):
        (folder / str(index)).mkdir(parents=True, exist_ok=True)
        written.append(folder / str(index) / path.name)
        written[-1].write_bytes(bytes(space))
    return written
