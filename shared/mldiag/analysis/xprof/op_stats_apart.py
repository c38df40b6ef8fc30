"""XProf's op_stats of files, built one after the other in a process of their own:
``python -m mldiag.analysis.xprof.op_stats_apart FILE...``.

The time slices of a host file are converted this way, by as many such processes
at once as the analysis may use cores and its memory budget allows, each given its
share of the slices (a process's start, its interpreter and XProf's library, costs
about as much CPU as converting a slice of a few MB, so it is paid once per core,
not once per slice). Each child's memory (XProf's peak, and what its allocator
keeps after it) goes back to the system when it exits, so the analysing process
stays as lean as its budget measured it; a conversion that crashes or runs out of
memory takes down its child, not the analysis. XProf writes each file's op_stats
into its cache beside the file, where the caller reads it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OP_STATS_CACHE = "ALL_HOSTS.op_stats_v2.pb"  # where XProf caches a session's op_stats, beside its files
# What one child holds beyond XProf's conversion: the interpreter and XProf's library (measured 40 to 50 MB
# resident, xprof 2.24).
PROCESS_COST = 64 << 20


def op_stats_apart(xplanes: list[Path]) -> list[bytes]:
    """XProf's op_stats of each of ``xplanes``, serialized, built by one child process in each file's folder
    (which should hold nothing else: XProf converts the folder's session)."""
    done = subprocess.run([sys.executable, "-m", __name__, *map(str, xplanes)], capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3")})
    caches = [xplane.parent / OP_STATS_CACHE for xplane in xplanes]
    if done.returncode != 0 or not all(cache.is_file() for cache in caches):
        names = ", ".join(xplane.name for xplane in xplanes)
        raise RuntimeError(f"XProf's op_stats of {names} failed (exit {done.returncode}): "
                           f"{done.stderr.strip()[-500:]}")
    return [cache.read_bytes() for cache in caches]


def main(argv: list[str]) -> None:
    from xprof.convert import raw_to_tool_data

    from mldiag.analysis.xprof.budget import release_freed_memory

    for xplane in argv:
        # Any op_stats converter builds the cache; op_profile's own output, computed from it, is small.
        raw_to_tool_data.xspace_to_tool_data([xplane], "op_profile", {"use_saved_result": True})
        release_freed_memory()  # the next file starts from what this process held before


if __name__ == "__main__":
    main(sys.argv[1:])
