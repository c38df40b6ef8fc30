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
TraceMe scopes. The function that owns a top-level event's time is the
innermost frame or scope that still holds most of it, so that a step function
that makes its batch and then dispatches is reported by the batch-making
function inside it.

Every operation here is on one line's arrays (events in start order, each with
its enclosing event's index), so that it costs a few array passes per line.
"""

from __future__ import annotations

import re

import numpy as np

OWNER_SHARE = 0.5  # a callee that holds this share of a top-level event's own time owns it
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
    inside = _add_to_ancestors(parents, outermost_calls, idle)
    return np.where(calls, 0.0, np.maximum(idle - inside, 0.0))


def owners(parents: np.ndarray, own: np.ndarray, named: np.ndarray) -> np.ndarray:
    """For each event, the innermost ``named`` event under it that holds at least ``OWNER_SHARE`` of its own
    time, following at each level the callee that holds the most; the event itself when none does."""
    count = len(parents)
    best_child = np.full(count, -1, dtype=np.int64)
    children = np.flatnonzero(parents >= 0)
    if len(children):
        order = children[np.lexsort((-own[children], parents[children]))]
        firsts = np.ones(len(order), dtype=bool)
        firsts[1:] = parents[order[1:]] != parents[order[:-1]]
        best_child[parents[order[firsts]]] = order[firsts]
    owner = np.arange(count, dtype=np.int64)
    need = OWNER_SHARE * own
    moving = np.flatnonzero(best_child >= 0)
    while len(moving):
        child = best_child[owner[moving]]
        steps_down = child >= 0
        steps_down[steps_down] = named[child[steps_down]] & (own[child[steps_down]] >= need[moving[steps_down]]) \
            & (own[child[steps_down]] > 0)
        moving, child = moving[steps_down], child[steps_down]
        owner[moving] = child
    return owner


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
