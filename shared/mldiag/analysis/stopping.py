"""Stopping an analysis at once: on SIGTERM, SIGINT or a time limit, its processes killed and its scratch removed.

An analysis runs XProf's tools on threads, which Python cannot interrupt: an
exception raised in the main thread would wait for every running tool before
the ``finally`` blocks that remove the private copy ran, however long that
takes. So a stop kills the processes the analysis started, removes its scratch
folders, says why in one line on stderr and exits without waiting for the
threads.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import NoReturn

REMOVE_ATTEMPTS = 20
PRIVATE_FOLDER_PREFIX = "mldiag-analysis-"  # the engine's private copy, in the scratch folder it is given
TIMED_OUT_EXIT = 124  # as timeout(1) exits
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
def stopping(stop: Stop, *, timeout_s: float | None = None, limit: str = "") -> Iterator[None]:
    """While inside, SIGTERM, SIGINT and (after ``timeout_s``; ``limit`` says it as given) the time limit
    call ``stop(why, exit status)``."""
    def signalled(signum: int, frame: FrameType | None) -> None:
        stop(f"stopped by {signal.Signals(signum).name}", SIGNALLED_EXIT + signum)

    def timed_out(signum: int, frame: FrameType | None) -> None:
        stop(f"the analysis did not finish within {limit or f'{timeout_s:g}s'}", TIMED_OUT_EXIT)

    previous = {number: signal.signal(number, signalled) for number in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, timed_out)
    if timeout_s is not None:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for number, handler in previous.items():
            signal.signal(number, handler)


def _kill_descendants(root: int) -> None:
    """SIGKILL every process below ``root`` (XProf's converters, the raw-event reader), as /proc shows them."""
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
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
