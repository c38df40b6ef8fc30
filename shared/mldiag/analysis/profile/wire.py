"""The protobuf wire format's framing: tags and lengths, read without parsing a message (and written, for
profiles made field by field).

:mod:`mldiag.analysis.profile.xspace` finds planes with it, and :func:`check_xspace`
refuses a file that is not an ``XSpace``, or was cut short, before XProf or
anything else parses it; :func:`check_xspace_head` refuses one by its first
bytes, before it is downloaded; :func:`structure_of` counts what a file holds
besides its events (planes, lines, metadata entries, stats), so that a file
whose structure alone costs more than the memory ceiling is refused before
XProf or the raw-event reader builds it. Nothing here imports numpy or XProf, so the check
costs an analysis nothing before its conversions start.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
_XSPACE_FIELDS = frozenset({1, 2, 3, 4})  # planes, errors, warnings, hostnames: each length-delimited
_XSPACE_PLANES = 1
_PLANE_LINES = 3
_PLANE_DESCRIPTIONS = frozenset({4, 5, 6})  # XPlane.event_metadata, stat_metadata, stats
# What reading each part costs, XProf's conversions and the raw-event reader together, whatever its events:
# measured on files of 100 k and 300 k empty ones (4.5 KB a plane, 1.9 KB a line, 0.7 KB a metadata entry).
PLANE_COST = 5 << 10
LINE_COST = 2 << 10
DESCRIPTION_COST = 1 << 10


class MalformedXSpace(ValueError):
    """The bytes do not follow the protobuf wire format."""


def varint(data: mmap.mmap | bytes, at: int) -> tuple[int, int]:
    """The varint at ``at``, and where the next field starts."""
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise MalformedXSpace(f"a varint runs past byte {at}")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def encode_varint(value: int) -> bytes:
    """``value`` as a varint: what :func:`varint` reads."""
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def field_head(number: int, length: int) -> bytes:
    """The tag and length that start a length-delimited field of ``length`` bytes."""
    return encode_varint(number << 3 | LENGTH_DELIMITED) + encode_varint(length)


def delimited(number: int, payload: bytes) -> bytes:
    """``payload`` as length-delimited field ``number``."""
    return field_head(number, len(payload)) + payload


def fields(data: mmap.mmap | bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """``(field number, start of the field's tag, start of its value, end of its value)`` in order."""
    at = start
    while at < end:
        tag_at = at
        tag, at = varint(data, at)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == VARINT:
            _, value_end = varint(data, at)
        elif wire_type == LENGTH_DELIMITED:
            length, at = varint(data, at)
            value_end = at + length
        elif wire_type in (FIXED64, FIXED32):
            value_end = at + (8 if wire_type == FIXED64 else 4)
        else:
            raise MalformedXSpace(f"wire type {wire_type} at byte {tag_at}")
        if value_end > end:
            raise MalformedXSpace(f"field {number} at byte {tag_at} runs past its message")
        yield number, tag_at, at, value_end
        at = value_end


def _check_field(number: int, wire_type: int, tag_at: int) -> None:
    if number == 0 or (number in _XSPACE_FIELDS and wire_type != LENGTH_DELIMITED):
        raise MalformedXSpace(f"field {number} at byte {tag_at} is not one of XSpace's")


def check_xspace_head(head: bytes) -> None:
    """Raise :class:`MalformedXSpace` unless a file starting with ``head`` (its first bytes) may be an ``XSpace``.

    Only the first field's tag is read: enough to refuse, before any download, what is plainly no profile
    (zeros, text, an archive).
    """
    if not head:
        raise MalformedXSpace("the file is empty")
    tag, _ = varint(head, 0)
    if tag & 7 not in (VARINT, FIXED64, LENGTH_DELIMITED, FIXED32):
        raise MalformedXSpace(f"wire type {tag & 7} at byte 0")
    _check_field(tag >> 3, tag & 7, 0)


def check_xspace(path: Path) -> None:
    """Raise :class:`MalformedXSpace` unless ``path`` frames as an ``XSpace``.

    Only the top-level tags and lengths are read, a few per plane: every field
    must end within the file, and XSpace's own fields must be length-delimited.
    """
    with open(path, "rb") as file:
        if not file.seek(0, 2):
            raise MalformedXSpace("the file is empty")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for number, tag_at, _, _ in fields(data, 0, len(data)):
                _check_field(number, varint(data, tag_at)[0] & 7, tag_at)


@dataclass(frozen=True)
class Structure:
    """What a file holds besides its events: planes, lines, and metadata entries and stats (descriptions)."""

    planes: int = 0
    lines: int = 0
    descriptions: int = 0

    @property
    def cost(self) -> int:
        """Bytes that reading this much structure takes, whatever the events."""
        return self.planes * PLANE_COST + self.lines * LINE_COST + self.descriptions * DESCRIPTION_COST

    def __add__(self, other: Structure) -> Structure:
        return Structure(self.planes + other.planes, self.lines + other.lines, self.descriptions + other.descriptions)

    def __str__(self) -> str:
        return f"{self.planes:,} planes, {self.lines:,} lines and {self.descriptions:,} metadata entries and stats"


def structure_of(path: Path, *, beyond: int | None = None) -> Structure:
    """The planes, lines and descriptions of the file at ``path``, counted from their tags (no message is parsed).

    Counting stops once the structure costs more than ``beyond`` bytes: a file of millions of empty planes
    is read only as far as it takes to refuse it. Raises :class:`MalformedXSpace` for a file that does not
    frame as protobuf.
    """
    planes = lines = descriptions = 0
    with open(path, "rb") as file:
        if not file.seek(0, 2):
            raise MalformedXSpace("the file is empty")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for number, _, start, end in fields(data, 0, len(data)):
                if number != _XSPACE_PLANES:
                    continue
                planes += 1
                for part, *_ in fields(data, start, end):
                    lines += part == _PLANE_LINES
                    descriptions += part in _PLANE_DESCRIPTIONS
                if beyond is not None and Structure(planes, lines, descriptions).cost > beyond:
                    break
    return Structure(planes, lines, descriptions)
