#!/usr/bin/env python3
"""Benchmark: upload to report on ``mldiag up``, against the analysis of the same profile alone.

Starts ``mldiag up`` with its default settle window and maintenance interval
(``MLDIAG_SETTLE_SECONDS`` and ``MLDIAG_MAINTENANCE_INTERVAL_SECONDS`` are
unset for it) on a data directory of its own, then, ``--repeat`` times and
alternately:

* uploads a single-host session into its local bucket, as an uploader finishes
  a file (written beside, then renamed into place), and times the upload to
  the moment the session's ``summary.html`` exists;
* runs ``mldiag analyze`` on a fresh copy of the same session folder (XProf
  caches its op_stats beside the profile), the standalone analysis time.

Both sides run in the same run, so that other load on the machine moves both.
It prints each side's median and range, the ratio of upload-to-report to the
standalone analysis, and their difference (the target: at most 5 s). From the
log of ``mldiag up`` it also parts the upload-to-report time into the wait
until the session is registered, the wait until its analysis starts (the
settle window), and the analysis itself (worker start-up included).

    python scripts/bench_upload_to_report.py                      # 3 runs of the demo_healthy fixture
    python scripts/bench_upload_to_report.py --profile path/to/host.xplane.pb --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DEFAULT_PROFILE = (ROOT / "tests" / "fixtures" / "profiles" / "demo_healthy" / "plugins" / "profile"
                   / "demo_healthy" / "fixture-host.xplane.pb")
RUN = "bench"  # the run folder the uploads go under
DIFFERENCE_TARGET_S = 5.0  # upload to report, less the standalone analysis
READY_LINE = "Full log, as JSON lines: "
REPORT_WAIT_S = 300


@dataclass
class Upload:
    seconds: float  # upload to summary.html
    registered_s: float  # upload to the session's registration, from the log
    started_s: float  # upload to the analysis's start, from the log
    analysis_s: float  # the analysis's start to its end, from the log


class LocalUp:
    """``mldiag up`` in a process of its own, its output kept line by line."""

    def __init__(self, data: Path):
        environment = {key: value for key, value in os.environ.items()
                       if key not in ("MLDIAG_SETTLE_SECONDS", "MLDIAG_MAINTENANCE_INTERVAL_SECONDS")}
        self.data, self.lines = data, []
        self.process = subprocess.Popen(
            [str(BIN / "mldiag"), "up", "--port", "0", "--data", str(data), "--no-otlp"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True)
        self.reader.start()

    @property
    def log_file(self) -> Path:
        return self.data / "logs" / "mldiag.log"

    @property
    def bucket(self) -> Path:
        return self.data / "buckets" / "mldiag-profiles"

    def wait_until_ready(self, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while not any(READY_LINE in line for line in self.lines):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("mldiag up did not start:\n" + "".join(self.lines[-20:]))
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join(timeout=10)


def _log_time(record: dict) -> float:
    return datetime.fromisoformat(str(record["time"]).replace("Z", "+00:00")).timestamp()


def _marks(log_file: Path, session: str) -> dict[str, float]:
    """When ``mldiag up`` logged the session registered, and its analysis started and done (epoch seconds)."""
    marks: dict[str, float] = {}
    for line in log_file.read_text("utf-8").splitlines():
        record = json.loads(line)
        message = str(record.get("message") or record.get("event") or "")
        if message.startswith(f"session {RUN}/{session} registered"):
            marks.setdefault("registered", _log_time(record))
        elif message.startswith(f"analysis of {RUN}/{session} started"):
            marks.setdefault("started", _log_time(record))
        elif message.startswith(f"analysis of {RUN}/{session} done"):
            marks.setdefault("done", _log_time(record))
    return marks


def _upload(up: LocalUp, profile: Path, session: str) -> Upload:
    folder = up.bucket / RUN / "plugins" / "profile" / session
    folder.mkdir(parents=True)
    partial = folder / f"{profile.name}.part"
    shutil.copyfile(profile, partial)
    uploaded_at, uploaded = time.time(), time.monotonic()
    partial.rename(folder / profile.name)
    deadline = uploaded + REPORT_WAIT_S
    while not any(folder.glob("mldiag/*/summary.html")):
        if time.monotonic() > deadline or up.process.poll() is not None:
            raise RuntimeError(f"no report {REPORT_WAIT_S} s after the upload of {session}:\n"
                               + "".join(up.lines[-20:]))
        time.sleep(0.02)
    seconds = time.monotonic() - uploaded
    wanted = {"registered", "started", "done"}
    for _ in range(50):  # the "done" line is written just after the report
        marks = _marks(up.log_file, session)
        if wanted <= set(marks):
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"{up.log_file} does not say when {session} was {', '.join(sorted(wanted - set(marks)))}")
    return Upload(seconds, marks["registered"] - uploaded_at, marks["started"] - uploaded_at,
                  marks["done"] - marks["started"])


def _standalone(profile: Path) -> float:
    """``mldiag analyze`` on a fresh copy of the session folder, wall seconds."""
    with tempfile.TemporaryDirectory(prefix="bench-upload-analyze-") as work:
        session = Path(work) / "session"
        session.mkdir()
        shutil.copyfile(profile, session / profile.name)
        started = time.monotonic()
        done = subprocess.run([str(BIN / "mldiag"), "analyze", str(session), "--out", str(Path(work) / "out"),
                               "--format", "json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"mldiag analyze exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return seconds


def _spread(values: list[float], digits: int = 2) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if round(low, digits) == round(high, digits) else f"{low:.{digits}f}-{high:.{digits}f}"


def _line(label: str, values: list[float], unit: str = " s") -> str:
    return f"  {label:<46} {statistics.median(values):6.2f}{unit} (range {_spread(values)})"


def bench(profile: Path, repeat: int) -> dict[str, object]:
    uploads: list[Upload] = []
    standalone: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-upload-") as data:
        up = LocalUp(Path(data))
        try:
            up.wait_until_ready()
            for run in range(repeat):  # alternately, so that load on a shared machine hits both sides
                standalone.append(_standalone(profile))
                uploads.append(_upload(up, profile, f"s{run + 1}"))
        finally:
            up.stop()

    to_report = [u.seconds for u in uploads]
    ratios = [u / s for u, s in zip(to_report, standalone)]
    differences = [u - s for u, s in zip(to_report, standalone)]
    print(f"profile: {profile} ({profile.stat().st_size / 1e6:,.2f} MB), {repeat} runs, mldiag up at its defaults")
    print(_line("upload -> summary.html on mldiag up", to_report))
    print(_line("  upload -> session registered", [u.registered_s for u in uploads]))
    print(_line("  upload -> analysis started", [u.started_s for u in uploads]))
    print(_line("  analysis in mldiag up (start to end)", [u.analysis_s for u in uploads]))
    print(_line("mldiag analyze alone", standalone))
    print(_line("ratio: upload -> report / analysis alone", ratios, "x"))
    print(_line("difference: upload -> report - analysis alone", differences))
    print(f"  target: difference <= {DIFFERENCE_TARGET_S:.0f} s: "
          f"{'met' if max(differences) <= DIFFERENCE_TARGET_S else 'missed'}")
    return {"profile": str(profile), "xplane_bytes": profile.stat().st_size, "repeats": repeat,
            "upload_to_report_s": [round(x, 2) for x in to_report],
            "upload_to_registered_s": [round(u.registered_s, 2) for u in uploads],
            "upload_to_analysis_start_s": [round(u.started_s, 2) for u in uploads],
            "analysis_in_up_s": [round(u.analysis_s, 2) for u in uploads],
            "analyze_alone_s": [round(x, 2) for x in standalone],
            "ratio": [round(x, 2) for x in ratios], "difference_s": [round(x, 2) for x in differences]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", type=Path, default=DEFAULT_PROFILE, help="one host's .xplane.pb")
    parser.add_argument("--repeat", type=int, default=3, help="uploads, and standalone analyses")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not args.profile.name.endswith(".xplane.pb") or not args.profile.is_file():
        parser.error(f"{args.profile} is not an .xplane.pb file")
    figures = bench(args.profile.resolve(), args.repeat)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
