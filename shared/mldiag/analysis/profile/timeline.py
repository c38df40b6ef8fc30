"""Every event of a profile, kept by the raw-event read, and XProf's event aggregation answered from it.

The ``aggregate_xplane_events`` follow-up asks for the count, mean,
percentiles and maximum of the events whose names match a regular expression,
grouped by event, plane or line. XProf's own implementation reads the whole
profile again through its pure-Python reader (20 to 25 s and 37x the file's
size in memory for a 44 MB profile). The raw-event reader visits every event anyway, so
it keeps each line's event names (as ids into one list of names) and
durations, in file order, and saves them beside the private copy
(:meth:`Timeline.save`). :func:`aggregate_events` answers from those arrays
with XProf's rules: the same grouping and group order, the same limit on the
events scanned, and XProf's own summary of each group, so the answer is the
one XProf gives.

Durations are kept as XProf computes them, from the picoseconds in the file
(its reader's nanoseconds, times 1000, truncated), so TPU events, timed to the
picosecond, count exactly as XProf counts them.

One answer the timeline cannot give exactly is left to XProf
(:func:`aggregate_events` answers None) unless the caller accepts an
approximation: XProf renames an event whose name is only a number after the
value of its ``msg`` (or ``message``, ``annotation``, ``label``) stat as its own
reader shows it, the id of the interned string rather than the text, which the
reader here does not see.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAX_EVENTS_SCANNED = 5_000_000  # XProf stops after this many events and marks its answer truncated


@dataclass
class TimelineLine:
    plane: str
    name: str
    ids: np.ndarray  # each event's index into Timeline.names, in file order
    durations_ps: np.ndarray  # each event's duration, as XProf computes it


@dataclass
class Timeline:
    """The events of one profile file, line by line in file order."""

    names: list[str]
    lines: list[TimelineLine]

    def save(self, path: Path) -> None:
        labels = {"names": self.names, "planes": [line.plane for line in self.lines],
                  "lines": [line.name for line in self.lines]}
        with open(path, "wb") as file:  # a file object: np.savez would add ".npz" to a name without it
            np.savez(
                file,
                labels=np.frombuffer(json.dumps(labels).encode("utf-8"), dtype=np.uint8),
                lengths=np.array([len(line.ids) for line in self.lines], dtype=np.int64),
                ids=np.concatenate([line.ids for line in self.lines] or [np.zeros(0, np.int32)], dtype=np.int32),
                durations_ps=np.concatenate([line.durations_ps for line in self.lines] or [np.zeros(0, np.int64)],
                                            dtype=np.int64),
            )

    @staticmethod
    def saved_names(path: Path) -> list[str]:
        """The names of the events saved at ``path``, without loading the events."""
        with np.load(path, allow_pickle=False) as saved:
            return json.loads(saved["labels"].tobytes().decode("utf-8"))["names"]

    @classmethod
    def load(cls, path: Path) -> Timeline:
        with np.load(path, allow_pickle=False) as saved:
            labels = json.loads(saved["labels"].tobytes().decode("utf-8"))
            bounds = np.cumsum(saved["lengths"])[:-1]
            ids, durations = np.split(saved["ids"], bounds), np.split(saved["durations_ps"], bounds)
        lines = [TimelineLine(plane, name, line_ids, line_durations) for plane, name, line_ids, line_durations
                 in zip(labels["planes"], labels["lines"], ids, durations)]
        return cls(labels["names"], lines)


def _first_seen_groups(ids: np.ndarray, durations: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """The durations of each id, the ids in the order they first occur."""
    unique, first, counts = np.unique(ids, return_index=True, return_counts=True)
    chunks = np.split(durations[np.argsort(ids, kind="stable")], np.cumsum(counts)[:-1])
    return [(int(unique[i]), chunks[i]) for i in np.argsort(first)]


def aggregate_events(timelines: Sequence[Timeline], event_regex: str, group_by: str = "event", *,
                     approximate: bool = False) -> str | None:
    """XProf's ``aggregate_xplane_events(session, event_regex=..., group_by=...)`` answer, as JSON text.

    ``timelines`` are the session's files in the order XProf reads them (sorted by path). None
    where the timelines cannot give XProf's exact answer (see the module's notes), unless
    ``approximate``: then numbered events count by their number.
    """
    from xprof.cli.internal import xplane_event_query

    if not approximate and any(name.isdigit() for timeline in timelines for name in timeline.names):
        return None

    fields = xplane_event_query.parse_group_by(group_by)
    pattern = re.compile(event_regex)
    grouped: dict[tuple[str, ...], list[np.ndarray]] = {}
    left = MAX_EVENTS_SCANNED + 1  # XProf takes in the event past its limit, then stops
    for timeline in timelines:
        matches = np.fromiter((bool(pattern.search(name)) for name in timeline.names), dtype=bool,
                              count=len(timeline.names))
        for line in timeline.lines:
            if left <= 0:
                break
            ids, durations = line.ids[:left], line.durations_ps[:left]
            left -= len(ids)
            chosen = matches[ids]
            ids, durations = ids[chosen], durations[chosen]
            if not len(ids):
                continue
            labels = {"plane": line.plane, "line": line.name}
            groups = _first_seen_groups(ids, durations) if "event" in fields else [(-1, durations)]
            for name_id, group in groups:
                key = tuple(timeline.names[name_id] if field == "event" else labels[field] for field in fields)
                grouped.setdefault(key, []).append(group)
    scanned = MAX_EVENTS_SCANNED + 1 - left
    results = xplane_event_query.summarize_groups(
        {key: np.concatenate(chunks).tolist() for key, chunks in grouped.items()}, fields)
    return json.dumps({
        "aggregates": results,
        "returned": len(results),
        "total_matched": len(results),
        "events_scanned": scanned,
        "truncated": scanned > MAX_EVENTS_SCANNED,
    }, indent=2)
