#!/usr/bin/env python3
"""Benchmark ``mldiag analyze`` against the XProf CLI way of running the same tools.

The XProf CLI way is what the XProf agent skills do: one ``xprof <subcommand>``
process per tool, one after the other. Of the 15 managed tools, 11 have a
subcommand; the other four (smart suggestions and the three detectors) have
none, so the CLI side runs fewer tools than ours does.

Three sides are timed: ``mldiag analyze`` as a user runs it (the 15 tools, the
analyst, then the follow-up investigation), ``analyze_session`` alone (the 15
tools and the analyst, no follow-ups), and the XProf CLI.

The sides start cold, alternately, ``--repeat`` times in one run (the wall and
CPU times reported are medians; peak RSS is the largest seen): each gets a fresh
copy of the session folder (XProf caches op_stats next to the profile) and a
fresh ``TMPDIR`` (where the XProf CLI keeps its result cache and ``mldiag
analyze`` its scratch copy). Wall time is the commands'. CPU time is theirs too,
user and system, of every process and thread: ``mldiag analyze`` runs on more
than one core, the XProf CLI on about one, so where another load takes a core
the wall ratio moves while the CPU figures do not. Peak RSS is the largest
total resident memory of their process trees, sampled every 20 ms (following
``/proc/PID/task/TID/children``, which Linux has when built with
CONFIG_PROC_CHILDREN, so that sampling costs the machine little), and never
less than the largest ``ru_maxrss`` of a single process.

Usage::

    .venv/bin/python scripts/bench_analysis.py                     # the >= 40 MB training profile
    .venv/bin/python scripts/bench_analysis.py --workload large_op_by_op
    .venv/bin/python scripts/bench_analysis.py --profile path/to/session_or_file

Generated profiles are cached in ``--cache`` (default ``.benchmarks/profiles``).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CLI_TOOLS = (  # managed name -> xprof subcommand, for the 11 that have one
    ("get_xprof_overview", "get_overview"),
    ("get_step_trace", "get_step_trace"),
    ("get_kpi_metrics", "get_kpi_metrics"),
    ("get_device_information", "get_device_information"),
    ("get_hosts", "get_hosts"),
    ("get_utilization_viewer", "get_utilization_viewer"),
    ("get_roofline_model", "get_roofline_model"),
    ("get_hlo_op_profile", "get_hlo_op_profile"),
    ("list_hlo_modules", "list_hlo_modules"),
    ("get_memory_profile", "get_memory_profile"),
    ("get_peak_allocations", "get_peak_allocations"),
)
CLI_SIDE = "xprof_cli_sequential"
SIDES = {  # what is timed -> how it is printed
    "mldiag_analyze": "mldiag analyze (with follow-ups)",
    "analyze_session": "analyze_session (15 tools + analyst)",
    CLI_SIDE: "xprof CLI, 11 tools sequentially",
}
# The evidence pass alone, as the engine runs it before any follow-up investigation.
EVIDENCE_ONLY = (
    "import sys; from pathlib import Path; from mldiag.analysis import analyze_session; "
    "analyze_session(sorted(Path(sys.argv[1]).glob('*.xplane.pb')), Path(sys.argv[2]))"
)
WALL_TARGET = 0.3  # mldiag analyze / sequential XProf CLI
RSS_TARGET = 20  # peak RSS / xplane size


@dataclass
class Run:
    seconds: float
    peak_rss: int
    failures: list[str]
    cpu_seconds: float  # user + system time of the commands, every process and thread


def _children(pid: int) -> list[int]:
    """The children of ``pid`` (of each of its threads), from /proc: a few reads, not a scan of every process."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as children:
                found.extend(int(child) for child in children.read().split())
        except OSError:
            continue
    return found


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants, from /proc."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _rss_of(pid)
        todo.extend(_children(pid))
    return total


class _Sampler:
    """Samples the total RSS of a process's descendants (the process itself excluded) while it runs."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.peak = 0
        self._process = process
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while self._process.poll() is None:
            runner = self._process.pid
            self.peak = max(self.peak, _tree_rss(runner) - _rss_of(runner))
            time.sleep(0.02)

    def join(self) -> None:
        self._thread.join()


def _rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _run(commands: list[list[str]], env: dict[str, str]) -> Run:
    """Run ``commands`` one after the other under a runner process of their own: its children's
    ``ru_maxrss`` and the sampled RSS of its descendants then cover exactly them."""
    started = time.perf_counter()
    runner = subprocess.Popen([sys.executable, __file__, "--run-commands", json.dumps(commands)],
                              env=env, stdout=subprocess.PIPE, text=True)
    sampler = _Sampler(runner)
    stdout, _ = runner.communicate()
    seconds = time.perf_counter() - started
    sampler.join()
    if runner.returncode != 0:
        raise RuntimeError(f"the benchmark runner failed with exit {runner.returncode}")
    outcome = json.loads(stdout)
    return Run(seconds, max(sampler.peak, outcome["largest_child_rss"]), outcome["failures"], outcome["cpu_seconds"])


def _run_commands(commands: list[list[str]]) -> None:
    failures = []
    for command in commands:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            failures.append(f"{' '.join(command[:2])}: exit {done.returncode}: {done.stderr.strip()[-200:]}")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"largest_child_rss": children.ru_maxrss * 1024, "failures": failures,
                      "cpu_seconds": children.ru_utime + children.ru_stime}))


def _commands(side: str, session: Path, out: Path) -> list[list[str]]:
    if side == "mldiag_analyze":
        return [[str(BIN / "mldiag"), "analyze", str(session), "--out", str(out), "--format", "json"]]
    if side == "analyze_session":
        return [[sys.executable, "-c", EVIDENCE_ONLY, str(session), str(out)]]
    return [[str(BIN / "xprof"), subcommand, str(session)] for _, subcommand in CLI_TOOLS]


def _fresh_copy(session: Path, into: Path) -> Path:
    copy = into / session.name
    shutil.copytree(session, copy)
    return copy


def _profile(args: argparse.Namespace) -> Path:
    if args.profile:
        return args.profile.resolve()
    session = args.cache / args.workload / "plugins" / "profile" / args.workload
    xplanes = list(session.glob("*.xplane.pb"))
    if not xplanes or xplanes[0].stat().st_size < args.min_mb * 1e6:
        print(f"generating the {args.workload} profile (>= {args.min_mb:.0f} MB) in {args.cache}", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_profile_fixtures.py"), "--out", str(args.cache),
                        "--only", args.workload, "--min-mb", str(args.min_mb)], check=True)
    return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", type=Path, help="a session folder or .xplane.pb to use instead")
    parser.add_argument("--workload", default="large", choices=("large", "large_op_by_op"))
    parser.add_argument("--min-mb", type=float, default=40.0)
    parser.add_argument("--cache", type=Path, default=ROOT / ".benchmarks" / "profiles")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side; wall times are medians")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--run-commands", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists():
        parser.error("sampling memory needs /proc/PID/task/TID/children (Linux built with CONFIG_PROC_CHILDREN)")
    if args.run_commands:
        _run_commands(json.loads(args.run_commands))
        return

    profile = _profile(args)
    session = profile if profile.is_dir() else profile.parent
    xplane_bytes = sum(p.stat().st_size for p in session.glob("*.xplane.pb"))
    print(f"profile: {session} ({xplane_bytes / 1e6:.1f} MB of xplane)")
    for xplane in session.glob("*.xplane.pb"):  # both sides read it from the page cache
        xplane.read_bytes()
    # Both sides run from compiled bytecode, as pip leaves an installed package (xprof's is);
    # an editable checkout under PYTHONDONTWRITEBYTECODE would otherwise compile mldiag on every run.
    compileall.compile_dir(ROOT / "shared" / "mldiag", quiet=1)

    runs: dict[str, list[Run]] = {side: [] for side in SIDES}
    for _ in range(args.repeat):  # alternate the sides so that load on a shared machine hits them all
        for side in SIDES:
            with tempfile.TemporaryDirectory(prefix="bench-analysis-") as work:
                work_dir = Path(work)
                (work_dir / "tmp").mkdir()
                copy = _fresh_copy(session, work_dir / "profile")
                env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TMPDIR": str(work_dir / "tmp")}
                runs[side].append(_run(_commands(side, copy, work_dir / "out"), env))

    cli = runs[CLI_SIDE]
    cli_seconds = statistics.median(r.seconds for r in cli)
    figures: dict[str, object] = {"profile": str(session), "xplane_bytes": xplane_bytes, "repeats": args.repeat}
    median = f"median of {args.repeat}" if args.repeat > 1 else "one run"
    for side, results in runs.items():
        seconds = statistics.median(r.seconds for r in results)
        cpu_seconds = statistics.median(r.cpu_seconds for r in results)
        peak = max(r.peak_rss for r in results)
        figures[side] = {
            "seconds": [round(r.seconds, 2) for r in results],
            "peak_rss_bytes": peak,
            "peak_rss_over_xplane": round(peak / xplane_bytes, 1),
            "wall_ratio_to_cli": round(seconds / cli_seconds, 3),
            "cpu_seconds": [round(r.cpu_seconds, 2) for r in results],
            "nonzero_exits": sorted({f for r in results for f in r.failures}),
        }
        verdict = "" if side == CLI_SIDE else (
            f"  ratio {seconds / cli_seconds:.3f} (target <= {WALL_TARGET}, "
            f"{'met' if seconds / cli_seconds <= WALL_TARGET else 'missed'}); RSS target <= {RSS_TARGET}x "
            f"{'met' if peak / xplane_bytes <= RSS_TARGET else 'missed'}"
        )
        print(f"{SIDES[side]:<38} {seconds:7.2f} s ({median}, CPU {cpu_seconds:5.1f} s)  "
              f"peak RSS {peak / 2**20:6.0f} MiB ({peak / xplane_bytes:4.1f}x the xplane){verdict}")
        for failure in figures[side]["nonzero_exits"]:
            print(f"    exited non-zero: {failure}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
