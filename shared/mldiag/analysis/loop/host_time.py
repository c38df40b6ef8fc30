"""What the host's functions cost the loop: their own time while the devices idle, and who owns it.

A host function that runs the step (it dispatches jit programs, compiles, copies
to or from the device, waits on the device or on another thread) is host work
only for the part of its time that is none of those calls. And host work costs
the loop only while the devices idle: the same function overlapped with device
work is free. So each event's *own idle time* is the time the devices idle
while it runs, less that of the device calls and waits it makes (the outermost
ones); the rest of its callees' time stays with it.

Names come from nested Python-tracer frames (``$file.py:line fn``), the C
calls they make (``$module fn``, leaves that say *how* but rarely *what*) and
TraceMe scopes. A top-level event's own time is owned by the innermost frames
or scopes inside it that hold a good share of it, each with the part no owner
inside it takes, so that a step function that makes its batch and then logs is
reported as its batch-making and its logging, not as the step function.

Every operation here is on one line's arrays (events in start order, each with
its enclosing event's index), so that it costs a few array passes per line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

OWNER_SHARE = 0.2  # a function inside a top-level event that holds this share of its own time owns it
_PYTHON_FRAME = re.compile(r"^\$\S+:\d+ ")


def is_named_work(name: str) -> bool:
    """Whether an event names work a person wrote: a Python frame or a scope, not a C call (``$time sleep``)."""
    return not name.startswith("$") or bool(_PYTHON_FRAME.match(name))


def intersection(a_starts: np.ndarray, a_ends: np.ndarray, b_starts: np.ndarray,
                 b_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where two sets of disjoint, sorted intervals overlap, as disjoint sorted intervals."""
    first = np.searchsorted(b_ends, a_starts, side="right")
    last = np.searchsorted(b_starts, a_ends, side="left")
    counts = np.maximum(last - first, 0)
    a_index = np.repeat(np.arange(len(a_starts)), counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    b_index = np.repeat(first, counts) + offsets
    starts = np.maximum(a_starts[a_index], b_starts[b_index])
    ends = np.minimum(a_ends[a_index], b_ends[b_index])
    kept = ends > starts
    return starts[kept], ends[kept]


def _add_to_ancestors(parents: np.ndarray, chosen: np.ndarray, amounts: np.ndarray) -> np.ndarray:
    """For each event, the sum of ``amounts`` over the ``chosen`` events it encloses (one pass per level)."""
    total = np.zeros(len(parents), dtype=np.float64)
    current, carried = np.flatnonzero(chosen), amounts[chosen].astype(np.float64)
    while len(current):
        current = parents[current]
        above = current >= 0
        current, carried = current[above], carried[above]
        np.add.at(total, current, carried)
    return total


def own_idle(parents: np.ndarray, idle: np.ndarray, outermost_calls: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """Each event's idle time (``idle``: the devices idle while it runs) less that of the device calls and waits
    it encloses (``outermost_calls``); zero for those calls and everything inside them (``calls``)."""
    # Computed in the array of what the calls take: a column per event of a line of up to millions.
    own = _add_to_ancestors(parents, outermost_calls, idle)
    np.subtract(idle, own, out=own)
    np.maximum(own, 0.0, out=own)
    own[calls] = 0.0
    return own


def nearest(parents: np.ndarray, flagged: np.ndarray) -> np.ndarray:
    """For each event, the nearest of itself and its ancestors that is ``flagged`` (-1: none).

    Pointer doubling: after k passes each unresolved event looks 2**k levels up.
    """
    found = np.full(len(parents), -1, dtype=parents.dtype)
    found[flagged] = np.flatnonzero(flagged)
    up = parents.copy()
    todo = np.flatnonzero((found < 0) & (up >= 0))
    while len(todo):
        above = up[todo]
        found[todo] = found[above]
        up[todo] = up[above]
        todo = todo[(found[todo] < 0) & (up[todo] >= 0)]
    return found


def nearest_flagged(parents: np.ndarray, flagged: np.ndarray) -> np.ndarray:
    """For each event, the nearest event enclosing it that is ``flagged`` (itself not counted), -1 when none."""
    found = nearest(parents, flagged)[np.maximum(parents, 0)]
    found[parents < 0] = -1
    return found


@dataclass
class Owners:
    """Who owns the own time of each top-level event: the event itself and the named events inside it whose
    name holds at least ``OWNER_SHARE`` of the own time of the top-level events of its top's name."""

    top: np.ndarray  # per event: its top-level event, -1 outside every one
    holder: np.ndarray  # per event: whether it owns time (a top-level event, or a function that holds enough)
    exclusive: np.ndarray  # per holder: its own time less that of the holders inside it
    reads: np.ndarray  # per holder: whether a device read happens in the time it owns


def owners(parents: np.ndarray, ids: np.ndarray, names: int, own: np.ndarray, named: np.ndarray, tops: np.ndarray,
           reads: np.ndarray) -> Owners:
    """Split each top-level event's own time among the functions that hold it: a step function that makes its
    batch and then logs is owned by both, each with its share; a function too small to matter stays with the
    one that called it. ``reads`` flags the events that read device values back."""
    top = nearest_flagged(parents, tops)
    top[tops] = np.flatnonzero(tops)
    inside = (top >= 0) & ~tops & named & (own > 0)
    keys = ids[top[inside]].astype(np.int64) * names + ids[inside]
    distinct, inverse = np.unique(keys, return_inverse=True)
    inclusive = np.bincount(inverse, weights=own[inside], minlength=len(distinct))
    total = np.bincount(ids[tops], weights=own[tops], minlength=names)
    holds = inclusive[inverse] >= OWNER_SHARE * total[distinct[inverse] // names]
    holder = tops.copy()
    holder[np.flatnonzero(inside)[holds]] = True
    above = nearest_flagged(parents, holder)
    inner = holder & ~tops
    taken = np.zeros(len(parents), dtype=np.float64)
    np.add.at(taken, above[inner], own[inner])
    exclusive = taken  # computed in place: a column per event of a line of up to millions
    np.subtract(own, taken, out=exclusive)
    np.maximum(exclusive, 0.0, out=exclusive)
    exclusive[~holder] = 0.0
    reading = np.flatnonzero(reads & (top >= 0))
    read_by = np.where(holder[reading], reading, above[reading])
    read = np.zeros(len(parents), dtype=bool)
    read[read_by[read_by >= 0]] = True
    return Owners(top, holder, exclusive, read)


def to_innermost_named(parents: np.ndarray, self_time: np.ndarray, named: np.ndarray) -> np.ndarray:
    """Each event's ``self_time`` moved to its nearest ``named`` event (itself, or the frame that called the C
    function); per event, the time it then owns."""
    holder = np.where(named, np.arange(len(parents)), parents)
    while (unnamed := (holder >= 0) & ~named[np.maximum(holder, 0)]).any():
        holder = np.where(unnamed, parents[np.maximum(holder, 0)], holder)
    owned = np.zeros(len(parents), dtype=np.float64)
    kept = holder >= 0
    np.add.at(owned, holder[kept], self_time[kept])
    return owned


def self_of(parents: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each event's value less its direct children's (the part no callee accounts for)."""
    own = values.astype(np.float64).copy()
    nested = parents >= 0
    np.subtract.at(own, parents[nested], values[nested])
    return np.maximum(own, 0.0)
