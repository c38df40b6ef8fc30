#!/usr/bin/env python3
"""Benchmark ``mldiag analyze`` against the XProf CLI way of running the same tools.

The XProf CLI way is what the XProf agent skills do: one ``xprof <subcommand>``
process per tool, one after the other. Of the 15 managed tools, 11 have a
subcommand; the other four (smart suggestions and the three detectors) have
none, so the CLI side runs fewer tools than ``mldiag analyze`` does.

Both sides start cold, in one run: each gets a fresh copy of the session folder
(XProf caches op_stats next to the profile) and a fresh ``TMPDIR`` (where the
XProf CLI keeps its result cache and ``mldiag analyze`` its scratch copy).
Wall time is the commands'; peak RSS is the largest total resident memory of
their process trees, sampled every 20 ms, and never less than the largest
``ru_maxrss`` of a single process.

Usage::

    .venv/bin/python scripts/bench_analysis.py                     # the >= 40 MB training profile
    .venv/bin/python scripts/bench_analysis.py --workload large_op_by_op
    .venv/bin/python scripts/bench_analysis.py --profile path/to/session_or_file

Generated profiles are cached in ``--cache`` (default ``.benchmarks/profiles``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
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
WALL_TARGET = 0.3  # mldiag analyze / sequential XProf CLI
RSS_TARGET = 20  # peak RSS / xplane size


@dataclass
class Run:
    seconds: float
    peak_rss: int
    failures: list[str]


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * page
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
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
    return Run(seconds, max(sampler.peak, outcome["largest_child_rss"]), outcome["failures"])


def _run_commands(commands: list[list[str]]) -> None:
    failures = []
    for command in commands:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            failures.append(f"{' '.join(command[:2])}: exit {done.returncode}: {done.stderr.strip()[-200:]}")
    largest_child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(json.dumps({"largest_child_rss": largest_child_rss, "failures": failures}))


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
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--run-commands", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_commands:
        _run_commands(json.loads(args.run_commands))
        return

    profile = _profile(args)
    session = profile if profile.is_dir() else profile.parent
    xplane_bytes = sum(p.stat().st_size for p in session.glob("*.xplane.pb"))
    print(f"profile: {session} ({xplane_bytes / 1e6:.1f} MB of xplane)")
    for xplane in session.glob("*.xplane.pb"):  # both sides read it from the page cache
        xplane.read_bytes()

    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as work:
        work_dir = Path(work)
        ours_tmp, cli_tmp = work_dir / "tmp-mldiag", work_dir / "tmp-xprof"
        ours_tmp.mkdir()
        cli_tmp.mkdir()
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        ours = _run([[str(BIN / "mldiag"), "analyze", str(_fresh_copy(session, work_dir / "mldiag")),
                      "--out", str(work_dir / "out"), "--format", "json"]], {**env, "TMPDIR": str(ours_tmp)})
        cli_session = _fresh_copy(session, work_dir / "xprof")
        cli = _run([[str(BIN / "xprof"), subcommand, str(cli_session)] for _, subcommand in CLI_TOOLS],
                   {**env, "TMPDIR": str(cli_tmp)})
        report = json.loads((work_dir / "out" / "analysis.json").read_text())

    wall_ratio = ours.seconds / cli.seconds
    rss_factor = ours.peak_rss / xplane_bytes
    figures = {
        "xplane_bytes": xplane_bytes,
        "mldiag_analyze": {"seconds": round(ours.seconds, 2), "peak_rss_bytes": ours.peak_rss,
                           "tools": len(report["tools"]), "failures": ours.failures},
        "xprof_cli_sequential": {"seconds": round(cli.seconds, 2), "peak_rss_bytes": cli.peak_rss,
                                 "tools": len(CLI_TOOLS), "failures": cli.failures},
        "wall_ratio": round(wall_ratio, 3),
        "peak_rss_over_xplane": round(rss_factor, 1),
        "cli_peak_rss_over_xplane": round(cli.peak_rss / xplane_bytes, 1),
        "targets_met": {"wall_ratio<=0.3": wall_ratio <= WALL_TARGET, "peak_rss<=20x": rss_factor <= RSS_TARGET},
    }
    print(f"mldiag analyze        {ours.seconds:7.2f} s  peak RSS {ours.peak_rss / 2**20:7.0f} MiB "
          f"({rss_factor:.1f}x the xplane)  {len(report['tools'])} tools")
    print(f"xprof CLI, sequential {cli.seconds:7.2f} s  peak RSS {cli.peak_rss / 2**20:7.0f} MiB "
          f"({cli.peak_rss / xplane_bytes:.1f}x the xplane)  {len(CLI_TOOLS)} tools")
    print(f"wall ratio {wall_ratio:.3f} (target <= {WALL_TARGET}); "
          f"peak RSS {rss_factor:.1f}x the xplane (target <= {RSS_TARGET}x)")
    for failure in ours.failures + cli.failures:
        print(f"failed: {failure}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
