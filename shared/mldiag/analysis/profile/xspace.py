"""An ``XSpace`` file read from the protobuf wire format, without an object per event.

The schema is ``tsl/profiler/protobuf/xplane.proto``: an ``XSpace`` holds
``XPlane``\\ s (field 1), each with its ``XLine``\\ s (field 3), its event and stat
metadata (fields 4 and 5, the names events refer to by id) and its stats
(field 6); each line holds its ``XEvent``\\ s (field 4).

Two readers, for the two things the analysis needs fast:

* :func:`plane_bytes` finds planes by name in a memory-mapped file and copies
  them out whole. XProf keeps a profile's compiled HLO modules in one small
  plane, ``/host:metadata`` (200 KB of a 44 MB CPU profile); to dump the
  modules XProf parses the whole file (0.8 s and 300 MB for 44 MB), but given
  a copy that holds only that plane it writes the same modules in a few
  milliseconds.
* :func:`read_planes` reads every line's events as columns: metadata ids,
  start and duration. A profile holds millions of events, and building a
  Python object per event (as ``jax.profiler.ProfileData`` and XProf's own
  reader do) costs about a microsecond each. Here the file is streamed, plane
  by plane and line by line: protobuf's C parser frames one line at a time,
  with each event left as its serialized bytes, and numpy decodes the three
  leading fields of all of the line's events at once. Every protobuf
  serializer writes fields in field-number order, so an event starts with its
  metadata id (1), offset (2) and duration (3), each omitted when zero. The
  few events whose stats are wanted (the first of each name) are parsed whole
  on request, from where they are in the file. Nothing parses the file as one
  message, so a file past protobuf's 2 GiB limit reads as any other (one line
  must stay under it).
"""

from __future__ import annotations

import contextlib
import functools
import mmap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mldiag.analysis.profile.wire import (
    FIXED32,
    FIXED64,
    LENGTH_DELIMITED,
    VARINT,
    MalformedXSpace,
    fields,
    varint,
)

METADATA_PLANE = "/host:metadata"
XSPACE_PLANES = 1  # XSpace.planes
PLANE_NAME = 2  # XPlane.name
PLANE_LINES = 3  # XPlane.lines
LINE_EVENTS = 4  # XLine.events
PLANE_STAT_METADATA = 5  # XPlane.stat_metadata
_EVENT_TAG = LINE_EVENTS << 3 | 2  # length-delimited
_LEADING_FIELDS = (1, 2, 3)  # XEvent.metadata_id, offset_ps, duration_ps
_MAX_VARINT_BYTES = 10
_EVENTS_AT_ONCE = 1 << 16  # events decoded together (:func:`_leading_fields`)
# After a line's bytes, as long as the longest varint and its tag: a field of its own (XLine has no field 15), whose
# first byte ends any varint read past the line's last event. Parsed back whole, it says no field of the line ran
# past the line's end.
_PADDING_FIELD = 15
_LINE_PADDING = bytes((_PADDING_FIELD << 3 | LENGTH_DELIMITED, 9)) + bytes(9)


# --- finding planes --------------------------------------------------------------------------


def plane_name(data: mmap.mmap, start: int, end: int) -> str:
    for number, _, value_start, value_end in fields(data, start, end):
        if number == PLANE_NAME:
            return bytes(data[value_start:value_end]).decode("utf-8", errors="replace")
    return ""


def plane_bytes(path: Path, name: str) -> bytes:
    """A serialized ``XSpace`` holding only the planes of ``path`` called ``name`` (empty when none).

    Raises :class:`MalformedXSpace` for a file that is not in the wire format.
    """
    with open(path, "rb") as file:
        if not file.seek(0, 2):
            raise MalformedXSpace(f"{path.name} is empty")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return b"".join(
                data[tag_at:value_end]
                for number, tag_at, value_start, value_end in fields(data, 0, len(data))
                if number == XSPACE_PLANES and plane_name(data, value_start, value_end) == name
            )


# --- reading events as columns ---------------------------------------------------------------


@functools.cache
def _messages() -> dict[str, Any]:
    """Message classes for the parts of xplane.proto read here, built at run time (no generated code).

    ``XLine.events`` is declared ``bytes`` so that parsing frames the events without building them, and
    names ``bytes`` so that a name that is not UTF-8 reads with replacement characters instead of
    failing the whole file.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FieldDescriptorProto
    package = "mldiag.xspace"
    schema = descriptor_pb2.FileDescriptorProto(name="mldiag_xspace.proto", package=package, syntax="proto3")
    types = {"int64": proto.TYPE_INT64, "uint64": proto.TYPE_UINT64, "double": proto.TYPE_DOUBLE,
             "bytes": proto.TYPE_BYTES}

    def message(name: str, fields: str, within: Any = schema) -> Any:
        """``fields``: ``"[repeated] type name = number; ..."``, type a scalar or a message of this file."""
        described = (within.nested_type if within is not schema else schema.message_type).add(name=name)
        for declaration in filter(None, (part.strip() for part in fields.split(";"))):
            *kind, field_name, _, number = declaration.split()
            label = proto.LABEL_REPEATED if kind[0] == "repeated" else proto.LABEL_OPTIONAL
            added = described.field.add(name=field_name, number=int(number), label=label)
            if kind[-1] in types:
                added.type = types[kind[-1]]
            else:
                added.type, added.type_name = proto.TYPE_MESSAGE, f".{package}.{kind[-1]}"
        return described

    def map_entry(plane: Any, name: str, value: str) -> None:
        message(name, f"int64 key = 1; {value} value = 2", within=plane).options.map_entry = True

    plane = message("XPlane", "bytes name = 2; repeated XLine lines = 3; "
                              "repeated XPlane.EventMetadataEntry event_metadata = 4; "
                              "repeated XPlane.StatMetadataEntry stat_metadata = 5; repeated XStat stats = 6")
    map_entry(plane, "EventMetadataEntry", "XEventMetadata")
    map_entry(plane, "StatMetadataEntry", "XStatMetadata")
    message("XLine", "bytes name = 2; int64 timestamp_ns = 3; repeated bytes events = 4; bytes padding = 15")
    message("XEvent", "repeated XStat stats = 4")
    stat = message("XStat", "int64 metadata_id = 1; double double_value = 2; uint64 uint64_value = 3; "
                            "int64 int64_value = 4; bytes str_value = 5; bytes bytes_value = 6; uint64 ref_value = 7")
    stat.oneof_decl.add(name="value")
    for value in stat.field[1:]:
        value.oneof_index = 0
    message("XEventMetadata", "bytes name = 2; repeated XStat stats = 5")
    message("XStatMetadata", "bytes name = 2")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(schema)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name in ("XPlane", "XLine", "XEvent")}


# Bit masks for decoding a varint held in the little-endian word of its first 8 bytes.
_CONTINUATION_BITS = np.uint64(0x8080808080808080)
_PAYLOAD_BITS = np.uint64(0x7F7F7F7F7F7F7F7F)
# Each step packs neighbouring 7-, 14- and 28-bit groups together, closing the gaps the dropped bits left.
_PACKING = tuple((np.uint64(low), np.uint64(high), np.uint64(shift)) for low, high, shift in (
    (0x007F007F007F007F, 0x7F007F007F007F00, 1),
    (0x00003FFF00003FFF, 0x3FFF00003FFF0000, 2),
    (0x000000000FFFFFFF, 0x0FFFFFFF00000000, 4),
))


def _varints(buffer: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varints starting at each of ``at`` in ``buffer``, and where each one ends.

    Each varint's first 8 bytes are read as one word and decoded with bit masks,
    the same few operations for every event whatever its length; the rare
    9- and 10-byte varints (negative int64s) take their last bytes separately.
    ``buffer`` must extend at least 10 bytes past the last position read.
    """
    # The word at every byte of the buffer: an unaligned view, read only where a varint starts.
    words = np.ndarray(shape=(max(len(buffer) - 7, 0),), dtype="<u8", buffer=buffer, strides=(1,))[at]
    last_bytes = ~words & _CONTINUATION_BITS  # the top bit of each byte that ends a varint
    last_bit = last_bytes & (~last_bytes + np.uint64(1))  # only the first such byte's, 0 past 8 bytes
    value = words & ((last_bit << np.uint64(1)) - np.uint64(1)) & _PAYLOAD_BITS  # a shift past 63 bits is 0
    for low, high, shift in _PACKING:
        value = (value & low) | ((value & high) >> shift)
    _, exponent = np.frexp(last_bit.astype(np.float64))  # last_bit is 2**(8n - 1) for an n-byte varint
    length = exponent.astype(np.int64) // 8
    longer = np.flatnonzero(last_bit == 0)
    if len(longer):
        ninth, tenth = (buffer[at[longer] + index].astype(np.uint64) for index in (8, 9))
        if (tenth[ninth >= 0x80] >= 0x80).any():
            raise MalformedXSpace("an event holds a varint longer than 10 bytes")
        value[longer] |= (ninth & np.uint64(0x7F)) << np.uint64(56)
        value[longer] |= np.where(ninth >= 0x80, (tenth & np.uint64(1)) << np.uint64(63), np.uint64(0))
        length[longer] = np.where(ninth >= 0x80, 10, 9)
    return value, at + length


def _leading_fields(buffer: np.ndarray, at: np.ndarray, ends: np.ndarray) -> list[np.ndarray]:
    """Fields 1 to 3 of each serialized event ``buffer[at:ends]`` (zero where absent), a column per field, as
    int64 (a value past 2**63 wraps, as protobuf's int64 reads it).

    ``buffer`` must extend at least 10 bytes past the last event. The events are decoded
    :data:`_EVENTS_AT_ONCE` at a time: the dozen arrays a varint's decoding makes then stay in the
    processor's cache, where a line's millions of events would have each one go through memory.
    """
    columns = [np.zeros(len(at), dtype=np.int64) for _ in _LEADING_FIELDS]
    for first in range(0, len(at), _EVENTS_AT_ONCE):
        chosen = slice(first, first + _EVENTS_AT_ONCE)
        _decode_leading_fields(buffer, at[chosen].copy(), ends[chosen], [column[chosen] for column in columns])
    return columns


def _decode_leading_fields(buffer: np.ndarray, at: np.ndarray, ends: np.ndarray, columns: list[np.ndarray]) -> None:
    for column, number in zip(columns, _LEADING_FIELDS):
        present = np.flatnonzero((at < ends) & (buffer[at] == (number << 3 | VARINT)))
        values, after = _varints(buffer, at[present] + 1)
        if (after > ends[present]).any():
            raise MalformedXSpace(f"field {number} of an event runs past the event")
        column[present] = values
        at[present] = after


_NO_STAT, _PARSE_ALONE = -1, -2
_STAT_TAG = 4 << 3 | LENGTH_DELIMITED  # XEvent.stats
_STAT_ID_TAG = 1 << 3 | VARINT  # XStat.metadata_id
_REF_VALUE_TAG = 7 << 3 | VARINT  # XStat.ref_value
_SKIPPED_BYTES = {FIXED64: 8, FIXED32: 4}


def _referenced_stat(buffer: np.ndarray, tags_at: np.ndarray, wanted: int) -> np.ndarray:
    """For each event whose field starts at ``tags_at`` (its tag) in ``buffer``: the ``ref_value`` of its first
    own stat whose metadata id is ``wanted``, :data:`_NO_STAT` where it has none, :data:`_PARSE_ALONE` where the
    walk cannot tell (the stat holds another kind of value or leads with another field, a field number past 15,
    a field past its event, an event within 10 bytes of the buffer's end)."""
    found = np.full(len(tags_at), _PARSE_ALONE, dtype=np.int64)
    rows = np.flatnonzero(tags_at + 1 + 2 * _MAX_VARINT_BYTES < len(buffer))
    if not wanted or not len(rows):
        return found
    try:
        lengths, at = _varints(buffer, tags_at[rows] + 1)
        ends = at + lengths.astype(np.int64)
        walkable = (ends >= at) & (ends + _MAX_VARINT_BYTES < len(buffer))
        rows, at, ends = rows[walkable], at[walkable], ends[walkable]
        while len(rows):  # a field of every event still walked at a time
            done = at == ends
            found[rows[done]] = _NO_STAT
            rows, at, ends = rows[~done], at[~done], ends[~done]
            tag = buffer[at].astype(np.int64)
            wire = tag & 7
            after, value_at = at + 1, np.zeros(len(rows), dtype=np.int64)
            varints = np.flatnonzero(wire == VARINT)
            after[varints] = _varints(buffer, at[varints] + 1)[1]
            for kind, size in _SKIPPED_BYTES.items():
                after[wire == kind] += size
            delimited = np.flatnonzero(wire == LENGTH_DELIMITED)
            length, value_at[delimited] = _varints(buffer, at[delimited] + 1)
            after[delimited] = value_at[delimited] + length.astype(np.int64)
            unknown = (tag >= 0x80) | ~np.isin(wire, (VARINT, FIXED64, LENGTH_DELIMITED, FIXED32)) | (after > ends)
            unknown[delimited] |= after[delimited] < value_at[delimited]
            stats = delimited[(tag[delimited] == _STAT_TAG) & ~unknown[delimited]]
            led = (value_at[stats] < after[stats]) & (buffer[value_at[stats]] == _STAT_ID_TAG)
            unknown[stats[~led]] = True
            stats = stats[led]
            stat_ids, id_end = _varints(buffer, value_at[stats] + 1)
            unknown[stats[id_end > after[stats]]] = True
            mine = (stat_ids == wanted) & (id_end <= after[stats])
            stats, id_end = stats[mine], id_end[mine]
            refs, ref_end = _varints(buffer, id_end + 1)
            plain = (id_end < after[stats]) & (buffer[id_end] == _REF_VALUE_TAG) & (ref_end == after[stats])
            found[rows[stats[plain]]] = refs[plain].astype(np.int64)
            unknown[stats[~plain]] = True
            found[rows[unknown]] = _PARSE_ALONE
            going = ~unknown
            going[stats[plain]] = False
            rows, at, ends = rows[going], after[going], ends[going]
    except MalformedXSpace:  # a varint longer than 10 bytes: parsing says what is wrong
        found[:] = _PARSE_ALONE
    return found


def _text(name: bytes) -> str:
    return name.decode("utf-8", errors="replace")


def _value(stat: Any, stat_names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    if kind == "str_value":
        return _text(stat.str_value)
    return getattr(stat, kind) if kind else None


@dataclass
class Line:
    """One line's events, in file order: timed in whole nanoseconds, and their durations to the picosecond."""

    name: str
    metadata_ids: np.ndarray
    starts_ns: np.ndarray
    durations_ps: np.ndarray
    plane: Plane = field(repr=False)
    _source: mmap.mmap = field(repr=False)
    _offsets: np.ndarray = field(repr=False)  # where each event's field starts in the file (its tag)

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def durations_ns(self) -> np.ndarray:
        """Whole nanoseconds, as ``jax.profiler.ProfileData`` gives them."""
        return self.durations_ps // 1000

    def release(self, *columns: str) -> None:
        """Let go of the events' columns named (``metadata_ids``, ``starts_ns``, ``durations_ps``) once read, or
        of every one and of where the events are in the file: the line stays, named, without events."""
        for column in columns or ("metadata_ids", "starts_ns", "durations_ps", "_offsets"):
            setattr(self, column, np.zeros(0, dtype=np.int64))

    def stats(self, index: int) -> dict[str, Any]:
        """The stats of event ``index`` by name, its metadata's stats included (the event's own win).

        The event is parsed from the file, where it still is: the reader keeps no event's bytes.
        """
        length, start = varint(self._source, int(self._offsets[index]) + 1)
        event = _messages()["XEvent"].FromString(self._source[start:start + length])
        return self.plane.resolve(self.plane.metadata_stats(int(self.metadata_ids[index])), event.stats)

    def own_stat(self, name: str, positions: np.ndarray) -> list[Any]:
        """The value of the stat called ``name`` among the own stats of each event at ``positions`` (its
        metadata's aside), None where the event has none.

        The events' fields are walked in place, a field of every event at once (:func:`_referenced_stat`), for a
        stat that refers to its value by id, as XProf writes the ones that repeat; an event whose stat is
        written otherwise, or whose fields are not laid out as every serializer writes them, is parsed alone.
        """
        wanted = next((key for key, stat_name in self.plane._stat_names.items() if stat_name == name), None)
        if wanted is None:
            return [None] * len(positions)
        refs = _referenced_stat(np.frombuffer(self._source, dtype=np.uint8), self._offsets[positions], wanted)
        values: list[Any] = [None] * len(positions)
        for row in np.flatnonzero(refs >= 0).tolist():
            values[row] = self.plane._stat_names.get(int(refs[row]), "")
        parse = _messages()["XEvent"].FromString
        for row in np.flatnonzero(refs == _PARSE_ALONE).tolist():
            length, start = varint(self._source, int(self._offsets[positions[row]]) + 1)
            found = next((stat for stat in parse(self._source[start:start + length]).stats
                          if stat.metadata_id == wanted), None)
            values[row] = None if found is None else _value(found, self.plane._stat_names)
        return values


@dataclass
class Plane:
    """One plane: its name, its stats, its lines, and the names its events refer to."""

    name: str
    stats: dict[str, Any]
    lines: list[Line]
    event_names: dict[int, str]
    _event_metadata: Any = field(repr=False)
    _stat_names: dict[int, str] = field(repr=False)

    def metadata_stats(self, metadata_id: int) -> Any:
        return self._event_metadata[metadata_id].stats if metadata_id in self._event_metadata else ()

    def resolve(self, *stat_lists: Any) -> dict[str, Any]:
        """Stats by name, later lists overriding earlier ones; a reference stat's value is the name it refers to."""
        return {self._stat_names.get(stat.metadata_id, ""): _value(stat, self._stat_names)
                for stats in stat_lists for stat in stats}


def stat_id(source: mmap.mmap, start: int, end: int, name: str) -> int | None:
    """The id of the stat called ``name`` of the plane at ``source[start:end]``, None where it has none: read
    from the plane's stat metadata alone."""
    described = b"".join(source[tag_at:value_end] for number, tag_at, _, value_end in fields(source, start, end)
                         if number == PLANE_STAT_METADATA)
    wanted = name.encode()
    return next((key for key, metadata in _messages()["XPlane"].FromString(described).stat_metadata.items()
                 if metadata.name == wanted), None)


def event_stat_ids(source: mmap.mmap, at: int) -> set[int]:
    """The stat ids of the event whose field starts at ``at`` (its tag), its own stats only."""
    length, start = varint(source, at + 1)  # past the one-byte tag of XLine.events
    return {stat.metadata_id for stat in _messages()["XEvent"].FromString(source[start:start + length]).stats}


def read_planes(path: Path) -> list[Plane]:
    """Every plane of the file at ``path``, its lines' events as columns.

    The file is streamed, never parsed as one message (protobuf refuses messages over 2 GiB) nor copied
    whole into memory: it is memory-mapped, each plane's names and stats are parsed apart from its
    lines, then each line alone, and the pages of a line already read are handed back. What stays is
    four numbers per event, so the reader's peak is those columns plus a small multiple of the largest line.
    Raises :class:`MalformedXSpace` for a file that is empty or not in the wire format.
    """
    with open(path, "rb") as file:
        if not file.seek(0, 2):
            raise MalformedXSpace(f"{Path(path).name} is empty")
        source = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    return [_plane(source, start, end) for number, _, start, end in fields(source, 0, len(source))
            if number == XSPACE_PLANES]


def _plane(source: mmap.mmap, start: int, end: int) -> Plane:
    from google.protobuf.message import DecodeError

    messages = _messages()
    lines, described = [], []
    for number, tag_at, value_start, value_end in fields(source, start, end):
        (lines if number == PLANE_LINES else described).append((tag_at, value_start, value_end))
    try:  # the plane without its lines: names, metadata and stats
        parsed = messages["XPlane"].FromString(b"".join(source[tag_at:value_end] for tag_at, _, value_end in described))
    except DecodeError as error:
        raise MalformedXSpace(f"a plane at byte {start}: {error}") from error
    stat_names = {key: _text(metadata.name) for key, metadata in parsed.stat_metadata.items()}
    event_metadata = parsed.event_metadata
    plane = Plane(_text(parsed.name), {}, [], {key: _text(metadata.name) for key, metadata in event_metadata.items()},
                  event_metadata, stat_names)
    plane.stats = plane.resolve(parsed.stats)
    for _, value_start, value_end in lines:
        plane.lines.append(_line(source, value_start, value_end, plane))
        release_pages(source, value_start, value_end)
    return plane


@dataclass
class LineEvents:
    """A line's time base and its events as columns: where each is in the file, and its leading fields."""

    name: str
    timestamp_ns: int
    metadata_ids: np.ndarray
    offsets_ps: np.ndarray  # from the line's timestamp
    durations_ps: np.ndarray
    at: np.ndarray  # where each event's field starts in the file (its tag)
    sizes: np.ndarray  # each event's field, tag and length included


def line_events(source: mmap.mmap, start: int, end: int) -> LineEvents:
    """The line at ``source[start:end]``, read from one copy of its bytes: protobuf frames its events, numpy
    decodes them in place.

    The copy is immutable, with :data:`_LINE_PADDING` after the line: protobuf then frames the events where
    they are (it copies each event of a mutable buffer), and numpy's varint reads past an event's end stop in
    the padding.
    """
    from google.protobuf.message import DecodeError

    with memoryview(source) as view:
        line_bytes = b"".join((view[start:end], _LINE_PADDING))
    try:
        line = _messages()["XLine"].FromString(line_bytes)
    except DecodeError as error:
        raise MalformedXSpace(f"a line at byte {start}: {error}") from error
    if line.padding != _LINE_PADDING[2:]:
        raise MalformedXSpace(f"a line at byte {start}: its last field runs past the line")
    name, timestamp_ns = _text(line.name), line.timestamp_ns
    lengths = np.fromiter(map(len, line.events), dtype=np.int64, count=len(line.events))
    del line
    # Each column computed in place of one no longer needed: a line holds up to millions of events.
    sizes = _varint_sizes(lengths)
    sizes += 1  # the tag (field 4 is one byte) and the length: the event's head
    offsets = _event_offsets(source, start, end, lengths, sizes)
    at = offsets - start
    at += sizes
    sizes += lengths  # the whole field
    ends = lengths
    ends += at
    del lengths
    metadata_ids, offsets_ps, durations_ps = _leading_fields(np.frombuffer(line_bytes, dtype=np.uint8), at, ends)
    return LineEvents(name, timestamp_ns, metadata_ids, offsets_ps, durations_ps, offsets, sizes)


def _line(source: mmap.mmap, start: int, end: int, plane: Plane) -> Line:
    events = line_events(source, start, end)
    starts_ns = events.offsets_ps
    starts_ns //= 1000
    starts_ns += events.timestamp_ns
    return Line(events.name, _narrowed(events.metadata_ids), starts_ns, events.durations_ps, plane, source, events.at)


def _narrowed(ids: np.ndarray) -> np.ndarray:
    """``ids`` as int32 where every one fits (a plane's metadata ids count its distinct names), else as they are."""
    if not len(ids) or (ids.min() >= np.iinfo(np.int32).min and ids.max() <= np.iinfo(np.int32).max):
        return ids.astype(np.int32)
    return ids


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes each of ``values`` (non-negative) takes as a varint."""
    sizes = np.ones(len(values), dtype=np.int64)
    for bits in range(7, 64, 7):
        sizes += values >= 1 << bits
    return sizes


def _event_offsets(source: mmap.mmap, start: int, end: int, lengths: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Where each of a line's events starts in the file (its tag), from their lengths and their heads' sizes.

    Every serializer writes a line's fields in field-number order, so its events follow one another;
    where they do not, the line's fields are walked one by one.
    """
    sizes = heads + lengths  # the tag (field 4 is one byte), the length, the event
    first = next((tag_at for number, tag_at, _, _ in fields(source, start, end) if number == LINE_EVENTS), end)
    offsets = np.cumsum(sizes)
    offsets -= sizes
    offsets += first
    if (np.frombuffer(source, dtype=np.uint8)[offsets] == _EVENT_TAG).all():
        with contextlib.suppress(MalformedXSpace):  # past the last event, mid-field if they were not contiguous
            if all(number != LINE_EVENTS for number, *_ in fields(source, first + int(sizes.sum()), end)):
                return offsets
    return np.array([tag_at for number, tag_at, _, _ in fields(source, start, end) if number == LINE_EVENTS],
                    dtype=np.int64)


def release_pages(source: mmap.mmap, start: int, end: int) -> None:
    """Hand the pages of ``[start, end)`` back: read again they come from the page cache, not this process."""
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    if end - first >= mmap.PAGESIZE:
        source.madvise(mmap.MADV_DONTNEED, first, (end - first) // mmap.PAGESIZE * mmap.PAGESIZE)
