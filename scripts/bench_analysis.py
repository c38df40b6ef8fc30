#!/usr/bin/env python3
"""Benchmark ``mldiag analyze`` against the XProf CLI way of running the same tools.

The XProf CLI way is what the XProf agent skills do: one ``xprof <subcommand>``
process per tool, one after the other. Of the 15 managed tools, 11 have a
subcommand; the other four (smart suggestions and the three detectors) have
none, so the CLI side runs fewer tools than ours does.

Three sides are timed on the two traced workloads (``large``, a training loop,
and ``large_op_by_op``, JAX ops dispatched one by one): ``mldiag analyze`` as
a user runs it (the 15 tools, the analyst, then the follow-up investigation),
``analyze_profile`` alone (the 15 tools and the analyst, no follow-ups), and
the XProf CLI.

The sides start cold, alternately, ``--repeat`` times in one run (wall and CPU
times are given as the median and the range; memory as the largest and the
range): each gets a fresh copy of the session folder (XProf caches op_stats
next to the profile) and a fresh ``TMPDIR`` (where the XProf CLI keeps its
result cache and ``mldiag analyze`` its scratch copy). Wall time is the
commands'. CPU time is theirs too, user and system, of every process and
thread: ``mldiag analyze`` runs on more than one core, the XProf CLI on about
one, so where another load takes a core the wall ratio moves while the CPU
figures do not.

Memory is the peak total PSS of the process tree (``/proc/PID/smaps_rollup``
of every descendant, summed), sampled every 20 ms: PSS shares each page among
the processes that map it, so the sum is what the tree holds. Sampling reads
every page table of a process holding GBs, which slows it (sampled runs took
1.3-2.3x the wall time of unsampled ones), so each side runs twice per repeat:
once unsampled for its wall and CPU time, once sampled for its memory. Each of
mldiag's sides is printed against the XProf CLI's runs of the same repeat, as
ratios of wall time and of peak PSS. Peak total RSS is
reported beside it (it counts shared pages once per process, and is never less
than the largest ``ru_maxrss`` of a single process). Descendants are followed
through ``/proc/PID/task/TID/children``, which Linux has when built with
CONFIG_PROC_CHILDREN.

Three generated workloads show what happens past XProf's appetite:
``scaled_300mb`` (a single host's 300 MB xplane at the default settings),
``scaled_1gb`` (1 GB, analysed under a memory ceiling of 8 GiB) and
``scaled_over_2gb`` (2.2 GB, past protobuf's 2 GiB limit). Each is
the ``large`` profile's host lines repeated, each copy later in time than the
last, as one long capture of the same loop would be. Only ``mldiag analyze``
runs on them, once per ``--repeat``: the XProf CLI would need 17x to 41x the file.

Usage::

    .venv/bin/python scripts/bench_analysis.py                     # both traced workloads, 3 runs
    .venv/bin/python scripts/bench_analysis.py --workload scaled_300mb scaled_1gb scaled_over_2gb --repeat 1
    .venv/bin/python scripts/bench_analysis.py --profile path/to/session_or_file

Generated profiles are cached in ``--cache`` (default ``.benchmarks/profiles``).
``--baseline`` times ``mldiag analyze`` of another checkout (``git worktree add``
of the commit to compare with) in the same runs, alternately with the others, so
that a change is measured before and after under the same load::

    .venv/bin/python scripts/bench_analysis.py --workload large_op_by_op --baseline ../mldiag-main
"""

from __future__ import annotations

import argparse
import compileall
import json
import mmap
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
BASELINE_SIDE = "baseline_analyze"
SIDES = {  # what is timed -> how it is printed
    "mldiag_analyze": "mldiag analyze (with follow-ups)",
    "analyze_profile": "analyze_profile (15 tools + analyst)",
    CLI_SIDE: "xprof CLI, 11 tools sequentially",
}
# What a side's processes import mldiag from, where it is not this checkout (the baseline's shared/ folder).
PYTHONPATHS: dict[str, str] = {}
# The evidence pass alone, as the engine runs it before any follow-up investigation.
EVIDENCE_ONLY = (
    "import sys; from pathlib import Path; from mldiag.analysis import analyze_profile; "
    "analyze_profile(sorted(Path(sys.argv[1]).glob('*.xplane.pb')), Path(sys.argv[2]))"
)
TRACED = ("large", "large_op_by_op")
SCALED = {  # generated workload -> (bytes at least, the memory ceiling it is analysed under, or "" for the default)
    "scaled_300mb": (300_000_000, ""),
    "scaled_1gb": (1_000_000_000, "8GiB"),
    "scaled_over_2gb": (2_200_000_000, ""),
}
WALL_TARGET = 0.15  # mldiag analyze / sequential XProf CLI
PSS_TARGET = 12  # peak PSS of the tree / xplane size


@dataclass
class Run:
    seconds: float
    peak_pss: int
    peak_rss: int
    failures: list[str]
    cpu_seconds: float  # user + system time of the commands, every process and thread
    report: dict | None = None  # mldiag analyze's analysis.json


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


def _memory_of(pid: int) -> tuple[int, int]:
    """``(Pss, Rss)`` of one process in bytes, from its smaps_rollup; zeros once it has gone."""
    found = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                key, _, value = line.partition(":")
                if key in ("Pss", "Rss"):
                    found[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return found.get("Pss", 0), found.get("Rss", 0)


def _descendants_memory(root: int) -> tuple[int, int]:
    """Total ``(Pss, Rss)`` of ``root``'s descendants (``root`` itself excluded)."""
    pss = rss = 0
    todo = _children(root)
    while todo:
        pid = todo.pop()
        process_pss, process_rss = _memory_of(pid)
        pss, rss = pss + process_pss, rss + process_rss
        todo.extend(_children(pid))
    return pss, rss


class _Sampler:
    """Samples the total PSS and RSS of a process's descendants while it runs."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.peak_pss = self.peak_rss = 0
        self._process = process
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while self._process.poll() is None:
            pss, rss = _descendants_memory(self._process.pid)
            self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)
            time.sleep(0.02)

    def join(self) -> None:
        self._thread.join()


def _run(commands: list[list[str]], env: dict[str, str], report: Path | None = None, *, sampled: bool) -> Run:
    """Run ``commands`` one after the other under a runner process of their own: its children's
    ``ru_maxrss`` and, ``sampled``, the memory of its descendants then cover exactly them (unsampled, the
    peak PSS is 0)."""
    started = time.perf_counter()
    runner = subprocess.Popen([sys.executable, __file__, "--run-commands", json.dumps(commands)],
                              env=env, stdout=subprocess.PIPE, text=True)
    sampler = _Sampler(runner) if sampled else None
    stdout, _ = runner.communicate()
    seconds = time.perf_counter() - started
    if sampler is not None:
        sampler.join()
    if runner.returncode != 0:
        raise RuntimeError(f"the benchmark runner failed with exit {runner.returncode}")
    outcome = json.loads(stdout)
    analysis = json.loads(report.read_text()) if report is not None and report.is_file() else None
    peak_pss, peak_rss = (sampler.peak_pss, sampler.peak_rss) if sampler is not None else (0, 0)
    return Run(seconds, peak_pss, max(peak_rss, outcome["largest_child_rss"]), outcome["failures"],
               outcome["cpu_seconds"], analysis)


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
    if side in ("mldiag_analyze", BASELINE_SIDE):
        return [[str(BIN / "mldiag"), "analyze", str(session), "--out", str(out), "--format", "json", "--timeout",
                 "2h"]]
    if side == "analyze_profile":
        return [[sys.executable, "-c", EVIDENCE_ONLY, str(session), str(out)]]
    return [[str(BIN / "xprof"), subcommand, str(session)] for _, subcommand in CLI_TOOLS]


def _fresh_copy(session: Path, into: Path) -> Path:
    copy = into / session.name
    shutil.copytree(session, copy)
    return copy


def _session(cache: Path, workload: str) -> Path:
    return cache / workload / "plugins" / "profile" / workload


def _traced(cache: Path, workload: str, min_mb: float) -> Path:
    session = _session(cache, workload)
    xplanes = list(session.glob("*.xplane.pb"))
    if not xplanes or xplanes[0].stat().st_size < min_mb * 1e6:
        print(f"generating the {workload} profile (>= {min_mb:.0f} MB) in {cache}", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_profile_fixtures.py"), "--out", str(cache),
                        "--only", workload, "--min-mb", str(min_mb)], check=True)
    return session


# --- generated profiles past XProf's appetite --------------------------------------------------------


def _scaled(source: Path, target: Path, at_least: int) -> None:
    """Write ``target``: ``source`` with its host plane's lines repeated until the file has ``at_least`` bytes,
    each copy of a line a new thread (its own id) and later than the last copy by the source's whole span."""
    from mldiag.analysis.profile.wire import encode_varint, field_head, fields, varint
    from mldiag.analysis.profile.xspace import read_planes

    planes = read_planes(source)
    host = next(plane for plane in planes if plane.name == "/host:CPU")
    span = max(int((line.starts_ns + line.durations_ns).max()) for line in host.lines if len(line)) - min(
        int(line.starts_ns.min()) for line in host.lines if len(line)) + 1_000_000
    with open(source, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        planes_at = [(start, end) for number, _, start, end in fields(data, 0, len(data)) if number == 1]
        host_at = next((start, end) for start, end in planes_at if any(
            n == 2 and bytes(data[s:e]) == b"/host:CPU" for n, _, s, e in fields(data, start, end)))
        lines = [(start, end) for number, _, start, end in fields(data, *host_at) if number == 3]
        rest = [(tag, end) for number, tag, _, end in fields(data, *host_at) if number != 3]
        lines_bytes = sum(end - start for start, end in lines)
        copies = max(1, -(-(at_least - (len(data) - lines_bytes)) // lines_bytes))

        def line_copy(start: int, end: int, copy: int) -> list[bytes]:
            """A line's fields with its id and timestamp moved on by ``copy`` copies."""
            parts = []
            for number, tag, value_start, value_end in fields(data, start, end):
                if number == 1:  # XLine.id
                    parts.append(b"\x08" + encode_varint(varint(data, value_start)[0] + (copy << 32)))
                elif number == 3:  # XLine.timestamp_ns
                    parts.append(b"\x18" + encode_varint(varint(data, value_start)[0] + copy * span))
                else:
                    parts.append(data[tag:value_end])
            return parts

        with open(target, "wb") as out:
            for start, end in planes_at:
                if (start, end) != host_at:
                    out.write(field_head(1, end - start) + data[start:end])
                    continue
                header = b"".join(data[tag:end] for tag, end in rest)
                line_sizes = [[sum(map(len, line_copy(s, e, copy))) for s, e in lines] for copy in range(copies)]
                plane_length = len(header) + sum(len(field_head(3, size)) + size
                                                 for sizes in line_sizes for size in sizes)
                out.write(field_head(1, plane_length) + header)
                for copy in range(copies):
                    for (line_start, line_end), size in zip(lines, line_sizes[copy]):
                        out.write(field_head(3, size))
                        out.write(b"".join(line_copy(line_start, line_end, copy)))


def _generated(cache: Path, workload: str, min_mb: float) -> Path:
    session = _session(cache, workload)
    at_least, _ = SCALED[workload]
    xplane = session / "host.xplane.pb"
    if not xplane.is_file() or xplane.stat().st_size < at_least:
        source = next(_traced(cache, "large", min_mb).glob("*.xplane.pb"))
        print(f"generating the {workload} profile (>= {at_least / 1e9:.1f} GB) from {source}", file=sys.stderr)
        session.mkdir(parents=True, exist_ok=True)
        _scaled(source, xplane, at_least)
    return session


# --- figures ------------------------------------------------------------------------------------------


def _spread(values: list[float], digits: int = 2) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if round(low, digits) == round(high, digits) else f"{low:.{digits}f}-{high:.{digits}f}"


def _bench(session: Path, sides: dict[str, str], repeat: int, ceiling: str) -> dict[str, object]:
    """Run ``sides`` on ``session`` ``repeat`` times, alternately; print and return the figures."""
    xplane_bytes = sum(p.stat().st_size for p in session.glob("*.xplane.pb"))
    print(f"\nprofile: {session} ({xplane_bytes / 1e6:,.1f} MB of xplane)"
          + (f", memory ceiling {ceiling}" if ceiling else ""))
    for xplane in session.glob("*.xplane.pb"):  # both sides read it from the page cache
        with open(xplane, "rb") as file:
            while file.read(64 << 20):
                pass
    runs: dict[str, list[Run]] = {side: [] for side in sides}  # unsampled: wall and CPU time
    memory: dict[str, list[Run]] = {side: [] for side in sides}  # sampled: memory
    for _ in range(repeat):  # alternate the sides so that load on a shared machine hits them all
        for sampled, into in ((False, runs), (True, memory)):
            for side in sides:
                into[side].append(_cold_run(session, side, ceiling, sampled=sampled))

    cli, cli_memory = runs.get(CLI_SIDE), memory.get(CLI_SIDE)
    figures: dict[str, object] = {"profile": str(session), "xplane_bytes": xplane_bytes, "repeats": repeat,
                                  "memory_ceiling": ceiling or "default"}
    for side, results in runs.items():
        sampled = memory[side]
        seconds = [r.seconds for r in results]
        pss = [r.peak_pss / xplane_bytes for r in sampled]
        rss = [r.peak_rss / xplane_bytes for r in sampled]
        figure: dict[str, object] = {
            "seconds": [round(r.seconds, 2) for r in results],
            "cpu_seconds": [round(r.cpu_seconds, 2) for r in results],
            "sampled_seconds": [round(r.seconds, 2) for r in sampled],
            "peak_pss_bytes": [r.peak_pss for r in sampled],
            "peak_rss_bytes": [r.peak_rss for r in sampled],
            "peak_pss_over_xplane": [round(x, 1) for x in pss],
            "nonzero_exits": sorted({f for r in results + sampled for f in r.failures}),
        }
        line = (f"{sides[side]:<38} {statistics.median(seconds):7.2f} s (range {_spread(seconds)}, "
                f"CPU {statistics.median(r.cpu_seconds for r in results):5.1f} s)  peak PSS "
                f"{max(r.peak_pss for r in sampled) / 2**20:7,.0f} MiB = {_spread(pss, 1)}x the xplane "
                f"(RSS {_spread(rss, 1)}x)")
        if cli and side != CLI_SIDE:
            ratios = [r.seconds / c.seconds for r, c in zip(results, cli)]
            pss_ratios = [r.peak_pss / c.peak_pss for r, c in zip(sampled, cli_memory) if c.peak_pss]
            figure["wall_ratio_to_cli"] = [round(x, 3) for x in ratios]
            figure["pss_ratio_to_cli"] = [round(x, 3) for x in pss_ratios]
            line += (f"\n{'':<38} wall / XProf CLI {_spread(ratios, 3)} (target <= {WALL_TARGET}: "
                     f"{'met' if max(ratios) <= WALL_TARGET else 'missed'}); peak PSS / XProf CLI "
                     f"{_spread(pss_ratios, 3)}; PSS target <= {PSS_TARGET}x the xplane: "
                     f"{'met' if max(pss) <= PSS_TARGET else 'missed'}")
        print(line)
        for failure in figure["nonzero_exits"]:
            print(f"    exited non-zero: {failure}")
        report = next((r.report for r in results + sampled if r.report), None)
        if report:
            tools = {tool["name"]: tool["reason"] if tool["status"] == "skipped" else tool["status"]
                     for tool in report["tools"]}
            figure["report"] = {"status": report["status"], "steps": report["metrics"].get("steps"),
                                "findings": [f"{f['priority']} {f['title']}" for f in report["findings"]],
                                "tools": tools}
            print(f"    report: {report['status']}, {report['metrics'].get('steps')} steps, "
                  f"{len(report['findings'])} findings; tools: "
                  f"{sum(t == 'ok' for t in tools.values())} ok, "
                  f"{sum(t.startswith('skipped') for t in tools.values())} skipped")
            for name, status in tools.items():
                if status.startswith("skipped"):
                    print(f"      {name}: {status}")
        figures[side] = figure
    return figures


def _cold_run(session: Path, side: str, ceiling: str, *, sampled: bool) -> Run:
    """One run of ``side`` on a fresh copy of ``session`` with a fresh ``TMPDIR`` (XProf caches beside both)."""
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as work:
        work_dir = Path(work)
        (work_dir / "tmp").mkdir()
        copy = _fresh_copy(session, work_dir / "profile")
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TMPDIR": str(work_dir / "tmp")}
        if side in PYTHONPATHS:
            env["PYTHONPATH"] = PYTHONPATHS[side]
        if ceiling:  # both of mldiag's sides read it (mldiag analyze's --memory-ceiling says the same)
            env["MLDIAG_ANALYSIS_MEMORY_CEILING"] = ceiling
        out = work_dir / "out"
        return _run(_commands(side, copy, out), env,
                    out / "analysis.json" if side in ("mldiag_analyze", BASELINE_SIDE) else None,
                    sampled=sampled)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", type=Path, help="a session folder or .xplane.pb to use instead")
    parser.add_argument("--workload", nargs="+", default=list(TRACED), choices=(*TRACED, *SCALED))
    parser.add_argument("--min-mb", type=float, default=40.0, help="size of the traced profiles")
    parser.add_argument("--cache", type=Path, default=ROOT / ".benchmarks" / "profiles")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side")
    parser.add_argument("--memory-ceiling", default="", help="the analysis's memory ceiling, as "
                        "MLDIAG_ANALYSIS_MEMORY_CEILING (the scaled workloads set their own)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--baseline", type=Path, help="another checkout of mldiag (its root folder), whose "
                        "mldiag analyze is timed beside this one's in the same runs")
    parser.add_argument("--run-commands", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists():
        parser.error("sampling memory needs /proc/PID/task/TID/children (Linux built with CONFIG_PROC_CHILDREN)")
    if args.run_commands:
        _run_commands(json.loads(args.run_commands))
        return
    # Both sides run from compiled bytecode, as pip leaves an installed package (xprof's is);
    # an editable checkout under PYTHONDONTWRITEBYTECODE would otherwise compile mldiag on every run.
    compileall.compile_dir(ROOT / "shared" / "mldiag", quiet=1)
    sides = dict(SIDES)
    if args.baseline:
        baseline = args.baseline.resolve() / "shared"
        if not (baseline / "mldiag").is_dir():
            parser.error(f"{args.baseline} is not a checkout of mldiag (no shared/mldiag in it)")
        compileall.compile_dir(baseline / "mldiag", quiet=1)
        PYTHONPATHS[BASELINE_SIDE] = str(baseline)
        sides = {"mldiag_analyze": SIDES["mldiag_analyze"], BASELINE_SIDE: f"mldiag analyze of {args.baseline.name}",
                 **{side: label for side, label in SIDES.items() if side != "mldiag_analyze"}}

    figures = {}
    if args.profile:
        profile = args.profile.resolve()
        figures["profile"] = _bench(profile if profile.is_dir() else profile.parent, sides, args.repeat,
                                    args.memory_ceiling)
    for workload in [] if args.profile else args.workload:
        if workload in SCALED:
            session = _generated(args.cache, workload, args.min_mb)
            scaled_sides = {side: label for side, label in sides.items() if side in ("mldiag_analyze", BASELINE_SIDE)}
            figures[workload] = _bench(session, scaled_sides, args.repeat, args.memory_ceiling or SCALED[workload][1])
        else:
            figures[workload] = _bench(_traced(args.cache, workload, args.min_mb), sides, args.repeat,
                                       args.memory_ceiling)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
