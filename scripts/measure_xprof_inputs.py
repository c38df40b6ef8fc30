#!/usr/bin/env python3
"""Measure which parts of a profile XProf's converters read: remove them, convert again, compare.

For each way of trimming the profile below, a trimmed copy is written (at the
wire level: the planes and lines kept are copied byte for byte) and every
converter the 15 managed tools call on the profile is run on it, in a folder of
its own, then compared with its answer on the whole profile:

* ``no_task_environment``: the ``Task Environment`` plane dropped;
* ``no_host_plane``: ``/host:CPU`` dropped (device profiles keep their planes);
* ``metadata_only``: only ``/host:metadata`` (what the HLO dump is given);
* ``no_python_thread``: the host's ``python`` line dropped;
* ``no_xla_threads``: the host's ``tf_XLA*`` lines dropped;
* ``no_stat_less_nested_events``: every host event that carries no stats and
  is nested in another event of its line dropped.

A converter "reads" a part when removing it changes the answer. Answers that
differ only in the order of a JSON object's keys (``pod_viewer`` prints a hash
map) count as the same; a converter whose answer on the whole profile changes
from one run to the next is reported as unstable and not compared.

Usage::

    python scripts/measure_xprof_inputs.py PROFILE.xplane.pb [--only no_host_plane,no_python_thread]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from mldiag.analysis.loop.raw_events import _parents  # noqa: E402 - after XProf's log level is set
from mldiag.analysis.profile.wire import delimited, fields  # noqa: E402
from mldiag.analysis.profile.xspace import read_planes  # noqa: E402

CONVERTERS = ("overview_page", "pod_viewer", "input_pipeline_analyzer", "roofline_model", "op_profile",
              "smart_suggestion", "memory_profile", "utilization_viewer")
KeepPlane = Callable[[str], bool]
KeepLine = Callable[[str, str], bool]
TRIMS: dict[str, tuple[KeepPlane, KeepLine, bool]] = {  # name -> planes kept, lines kept, drop stat-less nested
    "no_task_environment": (lambda plane: plane != "Task Environment", lambda plane, line: True, False),
    "no_host_plane": (lambda plane: plane != "/host:CPU", lambda plane, line: True, False),
    "metadata_only": (lambda plane: plane == "/host:metadata", lambda plane, line: True, False),
    "no_python_thread": (lambda plane: True, lambda plane, line: line != "python", False),
    "no_xla_threads": (lambda plane: True, lambda plane, line: not line.startswith("tf_XLA"), False),
    "no_stat_less_nested_events": (lambda plane: True, lambda plane, line: True, True),
}


def _name(data: mmap.mmap, start: int, end: int) -> str:
    return next((bytes(data[s:e]).decode("utf-8", "replace") for n, _, s, e in fields(data, start, end) if n == 2), "")


def _stat_less_nested_dropped(data: mmap.mmap, start: int, end: int, line: object) -> bytes:
    """The line's fields with every event that has no stats (of its own or its metadata's) and a parent left out."""
    events = [(tag, value_start, value_end) for number, tag, value_start, value_end in fields(data, start, end)
              if number == 4]
    has_stats = np.array([any(n == 4 for n, *_ in fields(data, s, e)) for _, s, e in events], dtype=bool)
    has_stats |= np.array([bool(line.plane.metadata_stats(int(i))) for i in line.metadata_ids], dtype=bool)
    ends = line.starts_ns + line.durations_ns
    order = np.lexsort((-ends, line.starts_ns))
    nested = np.zeros(len(events), dtype=bool)
    nested[order] = _parents(line.starts_ns[order], ends[order]) >= 0
    dropped = {events[i][0] for i in np.flatnonzero(nested & ~has_stats)}
    return b"".join(data[tag:value_end] for number, tag, _, value_end in fields(data, start, end) if tag not in dropped)


def trim(source: Path, target: Path, keep_plane: KeepPlane, keep_line: KeepLine, drop_stat_less: bool) -> None:
    planes = iter(read_planes(source)) if drop_stat_less else None
    with open(source, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data, \
            open(target, "wb") as out:
        for number, tag, start, end in fields(data, 0, len(data)):
            if number != 1:
                out.write(data[tag:end])
                continue
            plane_name = _name(data, start, end)
            read = next(planes) if planes else None
            if not keep_plane(plane_name):
                continue
            parts, line_index = [], 0
            for field, field_tag, value_start, value_end in fields(data, start, end):
                if field != 3:
                    parts.append(data[field_tag:value_end])
                    continue
                line_name = _name(data, value_start, value_end)
                if keep_line(plane_name, line_name):
                    if read is not None and plane_name == "/host:CPU":
                        parts.append(delimited(3, _stat_less_nested_dropped(data, value_start, value_end,
                                                                             read.lines[line_index])))
                    else:
                        parts.append(data[field_tag:value_end])
                line_index += 1
            out.write(delimited(1, b"".join(parts)))


def convert_all(xplane: Path) -> dict[str, str]:
    """Every converter's answer on ``xplane`` (a fresh copy each time: XProf caches beside its input)."""
    from xprof.convert import raw_to_tool_data

    answers = {}
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "session" / xplane.name
        copy.parent.mkdir()
        shutil.copy(xplane, copy)
        for converter in CONVERTERS:
            try:
                data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], converter, {"use_saved_result": True})
            except Exception as error:  # noqa: BLE001 - a converter that fails on the trimmed copy is an answer
                data = f"{type(error).__name__}: {error}"
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
            answers[converter] = text.replace(str(copy.parent), "SESSION")
    return answers


def _same(first: str, second: str) -> bool:
    if first == second:
        return True
    try:
        return json.loads(first) == json.loads(second)
    except ValueError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--only", default=",".join(TRIMS), help="trims to measure, comma-separated")
    args = parser.parse_args()
    whole = convert_all(args.profile)
    again = convert_all(args.profile)
    unstable = [converter for converter in CONVERTERS if not _same(whole[converter], again[converter])]
    print(f"{args.profile} ({args.profile.stat().st_size:,} bytes); unstable: {', '.join(unstable) or 'none'}")
    for name in filter(None, args.only.split(",")):
        with tempfile.TemporaryDirectory() as folder:
            trimmed = Path(folder) / args.profile.name
            trim(args.profile, trimmed, *TRIMS[name])
            answers = convert_all(trimmed)
            size = trimmed.stat().st_size
        changed = [converter for converter in CONVERTERS
                   if converter not in unstable and not _same(whole[converter], answers[converter])]
        print(f"  {name:<28} {size:>12,} bytes  changes: {', '.join(changed) or 'nothing'}")


if __name__ == "__main__":
    main()
