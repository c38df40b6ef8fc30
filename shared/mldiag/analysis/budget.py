"""A memory budget that the parallel parts of an analysis reserve from before they run.

Reading a profile costs a multiple of its size (XProf's converters 18x to 27x,
the raw-event reader about 7x), so running everything at once would multiply
that. Each heavy step reserves its estimate and waits while the budget is
spent: small profiles run fully in parallel, large ones one heavy step at a
time. Large reservations are granted in the order they were asked for, so the
caller decides which heavy step runs first. A small one (at most a sixteenth
of the budget) is granted as soon as it fits, even while a large one waits for
its turn: short steps such as a view of one HLO module run beside a long
conversion rather than behind it, and they hold a large step up only until
they end. An optional step that could not fit even alone is refused
(:class:`OverBudget`) rather than allowed to take the machine down; after each
heavy step the freed memory goes back to the system, so the next one starts
from a low base.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import threading
from collections.abc import Callable, Iterator

MIB = 1 << 20
DEFAULT_SIZE_FACTOR = 20  # the budget scales with the profile: one converter (~18x) fits in it
MIN_BUDGET = 768 * MIB  # small profiles run in parallel anyway
AVAILABLE_SHARE = 0.8
TRIM_AFTER = 64 * MIB  # reservations from this size up give their memory back when they end
SMALL_SHARE = 16  # a reservation of at most 1/16 of the budget does not wait in line


class OverBudget(Exception):
    """A step needs more memory than the whole budget."""


def release_freed_memory() -> None:
    """Hand memory that was freed back to the system (glibc keeps it in its arenas otherwise)."""
    libc = ctypes.util.find_library("c")
    if libc:
        with contextlib.suppress(OSError, AttributeError):  # not glibc
            ctypes.CDLL(libc).malloc_trim(0)


def available_memory() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo``, or None where there is no such file."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class MemoryBudget:
    """Bytes that concurrent steps reserve; a reservation waits until it fits and, unless it is small,
    until every earlier large one is granted."""

    def __init__(self, limit_bytes: int):
        self.limit = max(1, int(limit_bytes))
        self._reserved = 0
        self._tickets = itertools.count()
        self._next_granted = 0  # the ticket whose turn it is
        self._changed = threading.Condition()

    @classmethod
    def for_profile(cls, profile_bytes: int) -> MemoryBudget:
        """The default: ``DEFAULT_SIZE_FACTOR`` times the profile, within what the machine has free."""
        limit = max(MIN_BUDGET, DEFAULT_SIZE_FACTOR * profile_bytes)
        free = available_memory()
        return cls(min(limit, int(free * AVAILABLE_SHARE)) if free else limit)

    def reserve(self, nbytes: int, what: str = "this step", *,
                queued: Callable[[], None] | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold ``nbytes`` while the block runs; :class:`OverBudget` if it exceeds the whole budget.

        ``queued`` is called once the request has its place in line, before it waits.
        """
        if nbytes > self.limit:
            raise OverBudget(f"{what} needs about {nbytes / MIB:,.0f} MiB, more than the analysis's memory "
                             f"budget of {self.limit / MIB:,.0f} MiB")
        return self._held(int(nbytes), queued)

    def reserve_all_needed(self, nbytes: int, *,
                           queued: Callable[[], None] | None = None) -> contextlib.AbstractContextManager[None]:
        """For a step the analysis cannot do without: at most the whole budget, so it runs alone."""
        return self._held(min(int(nbytes), self.limit), queued)

    @contextlib.contextmanager
    def _held(self, nbytes: int, queued: Callable[[], None] | None = None) -> Iterator[None]:
        small = nbytes * SMALL_SHARE <= self.limit
        with self._changed:
            ticket = None if small else next(self._tickets)
            if queued is not None:
                queued()
            self._changed.wait_for(
                lambda: (small or ticket == self._next_granted) and self._reserved + nbytes <= self.limit
            )
            self._reserved += nbytes
            if not small:
                self._next_granted += 1
            self._changed.notify_all()
        try:
            yield
        finally:
            if nbytes >= TRIM_AFTER:
                release_freed_memory()
            with self._changed:
                self._reserved -= nbytes
                self._changed.notify_all()
