"""The analysis's memory ceiling, and the budget its parallel parts reserve from before they run.

The ceiling bounds the resident memory of the whole analysis (its process and
the reader processes it starts): :func:`enforced_ceiling` is what the watchdog
of :mod:`mldiag.analysis.stopping` holds the process tree to. By default it is a share of what the machine,
or the container or function it runs in (its cgroup limit), has available;
``MLDIAG_ANALYSIS_MEMORY_CEILING`` or ``mldiag analyze --memory-ceiling`` set it.
The budget is the ceiling less what the analysing process itself holds: what it
holds when the analysis starts, and what it grows by as it loads XProf's library
and its own modules; whenever no step holds a reservation, the budget is measured
again from what the process then holds (conversions leave memory in use behind).
Files in an in-memory filesystem (Cloud Run's, a tmpfs) take memory too: the
analysis's copy of the profile there counts as held (:func:`in_memory_filesystem`). The
one step that may not be refused is the raw-event read, which is the evidence
itself: where it needs more than the budget it runs alone.

Reading a profile costs a multiple of its size (XProf's converters 17x to 41x,
the raw-event reader 3x to 8.5x, measured on CPU and device profiles), so
running everything at once would multiply that. Each heavy step reserves its
estimate and waits while the budget is spent: small profiles run fully in
parallel, large ones one heavy step at a time. Large reservations are granted
in the order they were asked for, so the caller decides which heavy step runs
first. A small one (at most a sixteenth of the budget) is granted as soon as it
fits, even while a large one waits for its turn: short steps such as a view of
one HLO module run beside a long conversion rather than behind it, and they
hold a large step up only until they end. An optional step that could not fit
even alone is refused (:class:`OverBudget`, which says what it needs and what
the ceiling is) rather than allowed to take the machine down; after each heavy
step the freed memory goes back to the system, so the next one starts from a
low base.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import threading
from collections.abc import Callable, Iterator

from mldiag.domain.sizes import parse_size

MIB = 1 << 20
GIB = 1 << 30
CEILING_VARIABLE = "MLDIAG_ANALYSIS_MEMORY_CEILING"
AVAILABLE_SHARE = 0.8  # of the memory available when the analysis starts
TRIM_AFTER = 64 * MIB  # reservations from this size up give their memory back when they end
SMALL_SHARE = 16  # a reservation of at most 1/16 of the budget does not wait in line
# What the analysing process grows by once the analysis starts: XProf's library, numpy, the analysis's own modules
# (measured 110 to 130 MB resident, on CPU and device profiles).
PROCESS_GROWTH = 128 * MIB
# What an analysis holds whatever its ceiling: that growth, and the raw-event reader's interpreter and numpy.
LEAST_ANALYSIS = 512 * MIB
PROFILE_MULTIPLE = 12  # the default ceiling, in multiples of the profile's size
# What the steps of an analysis may hold at the least under the default ceiling: XProf's whole-file conversion
# of a profile up to about 6 MB (op_stats at 41x its size).
SMALL_PROFILE_BUDGET = 256 * MIB
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
# Set by Cloud Run and Cloud Functions (2nd gen), whose writable filesystem is held in the instance's memory.
_CLOUD_RUN_VARIABLE = "K_SERVICE"


def gib(nbytes: float) -> str:
    """Bytes as GiB for a person: "1.6 GiB", two decimals below a tenth."""
    value = nbytes / GIB
    return f"{value:.2f} GiB" if value < 0.1 else f"{value:.1f} GiB"


def beyond_ceiling(needed: int, ceiling: int) -> str:
    """What a step that does not fit needs, against the ceiling: "needs ~1.6 GiB, ceiling 0.4 GiB"."""
    return f"needs ~{gib(needed)}, ceiling {gib(ceiling)}"


class OverBudget(Exception):
    """A step needs more memory than the whole budget."""

    def __init__(self, what: str, needed: int, ceiling: int):
        super().__init__(f"{what} {beyond_ceiling(needed, ceiling)}")
        self.needed, self.ceiling = needed, ceiling


def _cgroup_limit() -> int | None:
    """The memory limit of this process's container or function (cgroup v2 or v1), None when there is none."""
    for path in _CGROUP_LIMITS:
        try:
            with open(path, encoding="ascii") as limit:
                value = limit.read().strip()
        except OSError:
            continue
        if value.isdigit() and int(value) < 1 << 60:  # v1 says "no limit" with a huge number, v2 with "max"
            return int(value)
    return None


def default_ceiling(environ: dict[str, str] | None = None, *, profile_bytes: int = 0) -> int | None:
    """The ceiling when none is given: ``MLDIAG_ANALYSIS_MEMORY_CEILING``, else a share of what is available
    (the cgroup limit or the machine's free memory, the lower), None where neither can be known; given the
    ``profile_bytes`` to analyse, no more than :func:`profile_ceiling` of them."""
    configured = (os.environ if environ is None else environ).get(CEILING_VARIABLE, "").strip()
    if configured:
        return parse_size(configured)
    known = [size for size in (_cgroup_limit(), available_memory()) if size]
    machine = int(min(known) * AVAILABLE_SHARE) if known else None
    if not profile_bytes:
        return machine
    return profile_ceiling(profile_bytes) if machine is None else min(machine, profile_ceiling(profile_bytes))


def profile_ceiling(profile_bytes: int) -> int:
    """:data:`PROFILE_MULTIPLE` times ``profile_bytes``, and at least what this process holds and will grow by
    with :data:`SMALL_PROFILE_BUDGET` to spare."""
    return max(PROFILE_MULTIPLE * profile_bytes, resident_memory() + PROCESS_GROWTH + SMALL_PROFILE_BUDGET)


def enforced_ceiling(ceiling_bytes: int | None = None) -> int | None:
    """The memory the analysis's whole process tree may hold: ``ceiling_bytes`` (by default
    :func:`default_ceiling`), but never less than this process holds now and the least an analysis adds
    to it; None where no ceiling can be known."""
    ceiling = ceiling_bytes or default_ceiling()
    return None if ceiling is None else max(ceiling, resident_memory() + LEAST_ANALYSIS)


def resident_memory() -> int:
    """Resident bytes of this process, 0 where ``/proc`` cannot say."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_freed_memory() -> None:
    """Hand memory that was freed back to the system (glibc keeps it in its arenas otherwise)."""
    with contextlib.suppress(AttributeError):  # not glibc
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols: no search for the library, no subprocess


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

    def __init__(self, limit_bytes: int, ceiling_bytes: int | None = None, *, held_at_least: int | None = None):
        """``limit_bytes`` the steps may hold at once, under a ``ceiling_bytes`` for the whole analysis
        (the limit itself when not given). Given ``held_at_least`` (what this process will hold, at the
        least), the limit is measured again whenever no reservation is held: the ceiling less what the
        process then holds, or less ``held_at_least`` if that is more."""
        self.limit = max(1, int(limit_bytes))
        self.ceiling = int(ceiling_bytes) if ceiling_bytes else self.limit
        self._held_at_least = held_at_least
        self._reserved = 0
        self._tickets = itertools.count()
        self._next_granted = 0  # the ticket whose turn it is
        self._changed = threading.Condition()

    @classmethod
    def under_ceiling(cls, ceiling_bytes: int | None = None, *, profile_bytes: int = 0,
                      held_in_files: int = 0) -> MemoryBudget:
        """The budget under ``ceiling_bytes`` (by default :func:`default_ceiling` for ``profile_bytes``): the
        ceiling less what this process holds and will grow by, and less ``held_in_files`` (files the analysis
        keeps in an in-memory filesystem). Without any ceiling to know, the budget is unbounded."""
        ceiling = ceiling_bytes or default_ceiling(profile_bytes=profile_bytes)
        if ceiling is None:
            return cls(1 << 62)
        held = resident_memory() + PROCESS_GROWTH + held_in_files
        return cls(ceiling - held, ceiling, held_at_least=held)

    def fits(self, nbytes: int) -> bool:
        """Whether a step needing ``nbytes`` can ever run under this budget."""
        return nbytes <= self.limit

    def reserve(self, nbytes: int, what: str = "this step", *,
                queued: Callable[[], None] | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold ``nbytes`` while the block runs; :class:`OverBudget` if it exceeds the whole budget, now or when
        its turn comes.

        ``queued`` is called once the request has its place in line, before it waits.
        """
        if not self.fits(nbytes):
            raise OverBudget(what, nbytes, self.ceiling)
        return self._held(int(nbytes), queued, what)

    def reserve_all_needed(self, nbytes: int, *,
                           queued: Callable[[], None] | None = None) -> contextlib.AbstractContextManager[None]:
        """For a step the analysis cannot do without: at most the whole budget, so it runs alone."""
        return self._held(int(nbytes), queued, None)

    def _measure(self) -> None:
        if self._held_at_least is not None and not self._reserved:
            self.limit = max(1, self.ceiling - max(resident_memory(), self._held_at_least))

    @contextlib.contextmanager
    def _held(self, wanted: int, queued: Callable[[], None] | None, what: str | None) -> Iterator[None]:
        """Hold ``wanted`` bytes; an optional step (``what`` names it) is refused where they no longer fit,
        a required one (``what`` None) holds at most the whole budget."""
        nbytes = wanted
        with self._changed:
            self._measure()
            small = wanted * SMALL_SHARE <= self.limit
            ticket = None if small else next(self._tickets)
            if queued is not None:
                queued()

            def ready() -> bool:
                nonlocal nbytes
                self._measure()
                nbytes = wanted if what is not None else min(wanted, self.limit)
                turn = small or ticket == self._next_granted
                return turn and (nbytes > self.limit or self._reserved + nbytes <= self.limit)

            self._changed.wait_for(ready)
            if not small:
                self._next_granted += 1
            if nbytes > self.limit:
                self._changed.notify_all()
                raise OverBudget(what or "this step", wanted, self.ceiling)
            self._reserved += nbytes
            self._changed.notify_all()
        try:
            yield
        finally:
            if nbytes >= TRIM_AFTER:
                release_freed_memory()
            with self._changed:
                self._reserved -= nbytes
                self._changed.notify_all()


def in_memory_filesystem(path: os.PathLike[str] | str, environ: dict[str, str] | None = None,
                         mount_table: str = "/proc/self/mounts") -> bool:
    """Whether files written at ``path`` are held in memory: on Cloud Run (every writable path is), or in a
    tmpfs or ramfs mount (the one with the longest mount point that holds the path, from the mount table)."""
    if (os.environ if environ is None else environ).get(_CLOUD_RUN_VARIABLE):
        return True
    target = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open(mount_table, encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")  # the table escapes a space in a path
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) > len(best):
                    best, kind = point, fields[2]
    except OSError:
        return False
    return kind in _MEMORY_FILESYSTEMS
