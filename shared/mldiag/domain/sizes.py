"""Memory sizes in one syntax wherever they are given: ``8GiB``, ``512MiB``, ``1.5G``, or a number of bytes.

Standard library only: the analysis's memory budget reads it in processes that load no pydantic.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``"8GiB"``, ``"512MiB"``, ``"8G"``, ``"1.5GB"`` (binary units all) or a plain number of bytes."""
    match = _SIZE.match(str(text))
    if not match or (match.group(3) and not match.group(2)):
        raise ValueError(f"{text!r} is not a memory size (say 8GiB, 512MiB or a number of bytes)")
    number, unit = float(match.group(1)), match.group(2).upper()
    size = int(number * (1 << (10 * " KMGT".index(unit or " "))))
    if size <= 0:
        raise ValueError(f"{text!r}: a memory size must be more than 0 bytes")
    return size
