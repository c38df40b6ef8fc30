"""A memory budget that the parallel parts of an analysis reserve from before they run.

Reading a profile costs a multiple of its size (XProf's converters about 18x,
the raw-event reader about 12x), so running everything at once would multiply
that. Each heavy step reserves its estimate and waits while the budget is
spent: small profiles run fully in parallel, large ones one heavy step at a time.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

MIB = 1 << 20
DEFAULT_SIZE_FACTOR = 20  # the budget scales with the profile: one converter (~18x) fits in it
MIN_BUDGET = 768 * MIB  # small profiles run in parallel anyway
AVAILABLE_SHARE = 0.8


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
    """Bytes that concurrent steps reserve; a reservation waits until it fits."""

    def __init__(self, limit_bytes: int):
        self.limit = max(1, int(limit_bytes))
        self._reserved = 0
        self._changed = threading.Condition()

    @classmethod
    def for_profile(cls, profile_bytes: int) -> MemoryBudget:
        """The default: ``DEFAULT_SIZE_FACTOR`` times the profile, within what the machine has free."""
        limit = max(MIN_BUDGET, DEFAULT_SIZE_FACTOR * profile_bytes)
        free = available_memory()
        return cls(min(limit, int(free * AVAILABLE_SHARE)) if free else limit)

    @contextlib.contextmanager
    def reserve(self, nbytes: int) -> Iterator[None]:
        """Hold ``nbytes`` while the block runs. More than the whole budget waits to run alone."""
        nbytes = min(int(nbytes), self.limit)
        with self._changed:
            self._changed.wait_for(lambda: self._reserved + nbytes <= self.limit)
            self._reserved += nbytes
        try:
            yield
        finally:
            with self._changed:
                self._reserved -= nbytes
                self._changed.notify_all()
