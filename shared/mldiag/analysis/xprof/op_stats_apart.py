"""XProf's op_stats of files, built one after the other in a process of their own:
``python -m mldiag.analysis.xprof.op_stats_apart``, given the files' paths on its standard input, one a line.

The time slices of a host file are converted this way, by as many such processes
at once as the analysis may use cores and its memory budget allows, each taking
the next slice that no process has taken yet (a process's start, its interpreter
and XProf's library, costs about as much CPU as converting a slice of a few MB, so
it is paid once per process, not once per slice; and a process that starts late,
once memory frees up, takes only what is left). Each child's memory (XProf's
peak, and what its allocator keeps after it) goes back to the system when it
exits, so the analysing process stays as lean as its budget measured it; a
conversion that crashes or runs out of memory takes down its child, not the
analysis. XProf writes each file's op_stats into its cache beside the file, where
the caller reads it; the child answers each path with the same line once done.

XProf's conversion spends about a third of its time in ``malloc`` and ``free``.
Where the machine has a faster allocator than glibc's (tcmalloc, mimalloc or
jemalloc), the child preloads it (:func:`converter_allocator`); a child keeps the
memory one conversion freed for the next, which reuses it, rather than handing it
back to the system between files and faulting it in again.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

OP_STATS_CACHE = "ALL_HOSTS.op_stats_v2.pb"  # where XProf caches a session's op_stats, beside its files
# What one child holds at its peak: its interpreter and XProf's library, and XProf's conversion of the file it
# converts, in multiples of the file's size. Measured (xprof 2.24, peak resident memory of the child): 45 MiB and
# 13x to 22x the file for slices of 1.2 to 11 MB of the benchmark profiles and CPU and TPU fixtures, 27x for
# the TPU fixture lm_train_bf16 (2.5 MB; 109 MiB); this reserves 4-18 % more.
PROCESS_COST = 48 << 20
OP_STATS_PER_BYTE = 28
ALLOCATOR_VARIABLE = "MLDIAG_CONVERTER_ALLOCATOR"  # a library to preload in the children instead, or "none"
# Allocators a child preloads where the machine has one, the first found. Converting five 31 MB slices of the 300 MB
# benchmark profile in one process took, against glibc's allocator, 0.68-0.76x the CPU with tcmalloc, 0.67-0.73x
# with mimalloc and 0.72-0.90x with jemalloc, at 1.05x, 1.10x and 1.17-1.19x its peak resident memory.
FASTER_ALLOCATORS = ("tcmalloc_minimal", "mimalloc", "jemalloc")


def op_stats_cost(largest_file_bytes: int) -> int:
    """What a child converting files of up to ``largest_file_bytes`` each holds at its peak."""
    return PROCESS_COST + OP_STATS_PER_BYTE * largest_file_bytes


@functools.cache
def _installed_allocator() -> str:
    return next(filter(None, map(ctypes.util.find_library, FASTER_ALLOCATORS)), "")


def converter_allocator(environ: dict[str, str] | None = None) -> str:
    """The allocator library a child preloads, "" for glibc's: ``MLDIAG_CONVERTER_ALLOCATOR`` (a library's path or
    name, or "none"), else the first of :data:`FASTER_ALLOCATORS` the machine has."""
    configured = (os.environ if environ is None else environ).get(ALLOCATOR_VARIABLE, "").strip()
    if configured:
        return "" if configured.lower() == "none" else configured
    return _installed_allocator()


def child_environment() -> dict[str, str]:
    """The environment a child runs in: this process's, XProf's native logs quiet, and :func:`converter_allocator`
    preloaded."""
    environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3")}
    allocator = converter_allocator(environ)
    if allocator:
        environ["LD_PRELOAD"] = " ".join(filter(None, (allocator, environ.get("LD_PRELOAD", ""))))
    return environ


@contextlib.contextmanager
def op_stats_process() -> Iterator[Callable[[Path], bytes]]:
    """A child process, and a function that has it build XProf's op_stats of a file and returns them, serialized.
    The file's folder should hold nothing else: XProf converts the folder's session."""
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
            text=True, env=child_environment(),
        )
        assert child.stdin is not None and child.stdout is not None

        def op_stats(xplane: Path) -> bytes:
            cache = xplane.parent / OP_STATS_CACHE
            try:
                child.stdin.write(f"{xplane}\n")
                child.stdin.flush()
                done = child.stdout.readline().rstrip("\n") == str(xplane)
            except BrokenPipeError:
                done = False
            if not done or not cache.is_file():
                child.kill()
                errors.seek(0)
                raise RuntimeError(f"XProf's op_stats of {xplane.name} failed (exit {child.wait()}): "
                                   f"{errors.read().decode(errors='replace').strip()[-500:]}")
            return cache.read_bytes()

        try:
            yield op_stats
        finally:
            with contextlib.suppress(BrokenPipeError):
                child.stdin.close()
            child.wait()


def main() -> None:
    from xprof.convert import raw_to_tool_data

    for line in sys.stdin:
        xplane = line.rstrip("\n")
        # Any op_stats converter builds the cache; op_profile's own output, computed from it, is small.
        raw_to_tool_data.xspace_to_tool_data([xplane], "op_profile", {"use_saved_result": True})
        print(xplane, flush=True)


if __name__ == "__main__":
    main()
