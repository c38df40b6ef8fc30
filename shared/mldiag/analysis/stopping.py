"""Stopping an analysis at once: on SIGTERM, SIGINT, a time limit or its memory ceiling, its processes killed and
its scratch removed.

An analysis runs XProf's tools on threads, which Python cannot interrupt: an
exception raised in the main thread would wait for every running tool before
the ``finally`` blocks that remove the private copy ran, however long that
takes. So a stop kills the processes the analysis started, removes its scratch
folders, says why in one line on stderr and exits without waiting for the
threads.

The memory budget (:mod:`mldiag.analysis.xprof.budget`) keeps the steps it
knows of under the ceiling by their estimates; a watchdog holds the whole
process tree to it whatever the estimates say: every quarter second it sums
the proportional set size (shared pages split between the processes sharing
them) of the analysing process and its descendants, and stops the analysis
once that passes the ceiling.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import NoReturn

REMOVE_ATTEMPTS = 20
PRIVATE_FOLDER_PREFIX = "mldiag-analysis-"  # the engine's private copy, in the scratch folder it is given
TIMED_OUT_EXIT = 124  # as timeout(1) exits
OVER_CEILING_EXIT = 4  # the analysis's processes held more memory than its ceiling
WATCH_INTERVAL_S = 0.25
SIGNALLED_EXIT = 128  # plus the signal's number, as a shell reports it

Stop = Callable[[str, int], NoReturn]  # (why, exit status)


def stop_now(folders: Iterable[Path], message: str, code: int) -> NoReturn:
    """Kill this process's descendants, remove ``folders``, print ``message`` and exit with ``code``."""
    _kill_descendants(os.getpid())
    for folder in folders:
        _remove(folder)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(code)


def _remove(folder: Path) -> None:
    """Remove ``folder``, again while the analysis's threads (still running until the exit) write into it."""
    for _ in range(REMOVE_ATTEMPTS):
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            return
        time.sleep(0.05)


@contextlib.contextmanager
def stopping(stop: Stop, *, timeout_s: float | None = None, limit: str = "",
             memory_ceiling_bytes: int | None = None) -> Iterator[None]:
    """While inside, SIGTERM, SIGINT, (after ``timeout_s``; ``limit`` says it as given) the time limit and
    (given ``memory_ceiling_bytes``) this process tree's memory passing it call ``stop(why, exit status)``."""
    def signalled(signum: int, frame: FrameType | None) -> None:
        stop(f"stopped by {signal.Signals(signum).name}", SIGNALLED_EXIT + signum)

    def timed_out(signum: int, frame: FrameType | None) -> None:
        stop(f"the analysis did not finish within {limit or f'{timeout_s:g}s'}", TIMED_OUT_EXIT)

    previous = {number: signal.signal(number, signalled) for number in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, timed_out)
    if timeout_s is not None:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    watched = threading.Event()
    if memory_ceiling_bytes is not None:
        threading.Thread(target=_watch_memory, args=(memory_ceiling_bytes, stop, watched), daemon=True,
                         name="mldiag-memory-watchdog").start()
    try:
        yield
    finally:
        watched.set()
        signal.setitimer(signal.ITIMER_REAL, 0)
        for number, handler in previous.items():
            signal.signal(number, handler)


def _watch_memory(ceiling_bytes: int, stop: Stop, ended: threading.Event) -> None:
    from mldiag.analysis.xprof.budget import gib

    while not ended.wait(WATCH_INTERVAL_S):
        held = sum(map(_proportional_memory, [os.getpid(), *_descendants(os.getpid())]))
        if held > ceiling_bytes:
            stop(f"the analysis's processes held {gib(held)}, over its memory ceiling of {gib(ceiling_bytes)}",
                 OVER_CEILING_EXIT)


def _proportional_memory(pid: int) -> int:
    """The proportional set size of process ``pid`` in bytes (its resident size where the kernel gives no
    ``smaps_rollup``), 0 once it has ended."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (XProf's converters, the raw-event reader), as /proc shows them."""
    parent_of = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        parent_of[int(stat.parent.name)] = int(fields[1])
    below, frontier = [], [root]
    while frontier:
        children = [pid for pid, parent in parent_of.items() if parent in frontier]
        below.extend(children)
        frontier = children
    return below


def _kill_descendants(root: int) -> None:
    """SIGKILL every process below ``root``."""
    for pid in _descendants(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
