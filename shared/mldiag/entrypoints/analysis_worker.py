"""``python -m mldiag.entrypoints.analysis_worker``: one session's analysis in a process of its own.

The ``analyze_session`` function starts it for each request, so that a timeout
really stops the work and running out of memory ends this process rather than
the function. It analyses the files it is given (downloaded for it, so its
private copy of them is a link where it can be), investigates with the
reasoner the environment configures, and writes ``analysis.json`` and
``summary.html`` into ``--out``. Exit 3 (with the reason on stderr) means the
profile cannot be read, exit 4 that its processes went over the memory ceiling.
SIGTERM or SIGINT stop it at once (exit 143 or 130), its private copies removed.

A multi-host session fanned out over function instances uses two more modes:
``--host-evidence`` analyses one host file and writes its evidence
(``host.json``, a :class:`~mldiag.analysis.fanout.HostAnalysis`); ``--merge``
reads the hosts' ``host.json`` files, merges them into the session's analysis,
investigates it (the follow-up checks run on ``--followups-on``, one host's
file) and writes the two reports.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from mldiag.analysis import Analysis
    from mldiag.analysis.reasoning.investigation import Investigator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path,
                        help="the session's <host>.xplane.pb files (with --merge, the hosts' host.json files)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--host-evidence", action="store_true", help="analyse one host file; write host.json")
    mode.add_argument("--merge", action="store_true", help="merge the hosts' host.json files into the reports")
    parser.add_argument("--missing", type=Path, help="with --merge: JSON object, each host left out -> why")
    parser.add_argument("--followups-on", type=Path, help="with --merge: the host file the follow-ups read")
    parser.add_argument("--out", type=Path, required=True, help="where to write the two reports")
    parser.add_argument("--scratch", type=Path, help="where the private copy may live")
    parser.add_argument("--source", default="", help="where the session is kept, for the report")
    parser.add_argument("--dashboard-uri", default="", help="the session in the XProf viewer")
    parser.add_argument("--baseline", type=Path, help="analysis.json of an earlier session of the run")
    parser.add_argument("--baseline-session", default="", help="that session's name")
    args = parser.parse_args(argv)

    from mldiag.analysis.stopping import PRIVATE_FOLDER_PREFIX, stop_now, stopping
    from mldiag.analysis.xprof.budget import enforced_ceiling

    own_scratch = args.scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="mldiag-worker-")) if own_scratch else args.scratch

    def stop(why: str, code: int) -> NoReturn:
        stop_now([scratch] if own_scratch else scratch.glob(f"{PRIVATE_FOLDER_PREFIX}*"), why, code)

    try:
        with stopping(stop, memory_ceiling_bytes=enforced_ceiling()):  # before the imports, which take seconds
            return _analyse(args, scratch)
    finally:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _analyse(args: argparse.Namespace, scratch: Path) -> int:
    from mldiag import bootstrap
    from mldiag.analysis import Analysis, analyze_profile
    from mldiag.analysis.comparison import compare
    from mldiag.analysis.profile.profiles import UNREADABLE_EXIT, UnreadableProfile
    from mldiag.analysis.report import write_reports
    from mldiag.config import Settings

    try:
        if args.host_evidence:  # the evidence alone: the merge investigates
            return _host_evidence(args, scratch)
        investigate = bootstrap.build_investigator(Settings.from_env())
        if args.merge:
            analysis = _merged(args, scratch, investigate)
        else:
            analysis = analyze_profile(args.files, scratch, source=args.source, investigate=investigate,
                                       owned_inputs=True)
    except UnreadableProfile as error:
        print(error, file=sys.stderr)
        return UNREADABLE_EXIT
    if args.baseline:
        try:
            baseline = Analysis.model_validate_json(args.baseline.read_text("utf-8"))
        except ValueError as error:  # an old or damaged baseline costs the comparison, not the analysis
            print(f"baseline {args.baseline_session} not used: {error}", file=sys.stderr)
        else:
            analysis.comparison = compare(analysis, baseline, args.baseline_session)
    write_reports(analysis, args.out, dashboard_uri=args.dashboard_uri)
    return 0


def _host_evidence(args: argparse.Namespace, scratch: Path) -> int:
    from mldiag.analysis.engine import analyze_host
    from mldiag.analysis.fanout import HOST_EVIDENCE_FILE

    if len(args.files) != 1:
        print(f"--host-evidence analyses one host file, not {len(args.files)}", file=sys.stderr)
        return 2
    part = analyze_host(args.files[0], scratch, owned_inputs=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / HOST_EVIDENCE_FILE).write_text(part.model_dump_json(), "utf-8")
    return 0


def _merged(args: argparse.Namespace, scratch: Path, investigate: Investigator) -> Analysis:
    import time

    from mldiag.analysis import start_analysis
    from mldiag.analysis.evidence import Investigation
    from mldiag.analysis.fanout import HostAnalysis, merge_hosts
    from mldiag.domain.resources import HealthStatus

    started = time.perf_counter()
    parts = [HostAnalysis.model_validate_json(path.read_text("utf-8")) for path in args.files]
    missing = json.loads(args.missing.read_text("utf-8")) if args.missing else {}
    analysis: Analysis = merge_hosts(parts, source=args.source, session=args.source.rstrip("/").rsplit("/", 1)[-1],
                                     missing=missing)
    if analysis.status is HealthStatus.OPTIMAL or args.followups_on is None:
        note = ("The health snapshot is OPTIMAL: no follow-up checks were needed."
                if analysis.status is HealthStatus.OPTIMAL else
                "No follow-up checks: every host's own analysis was OPTIMAL, so no host file was read for them.")
        analysis.investigation = Investigation(reasoner=investigate.reasoner.name, note=note)
    else:
        with start_analysis([args.followups_on], scratch, owned_inputs=True) as running:
            analysis = running.follow_up(analysis, investigate)
    analysis.seconds = time.perf_counter() - started
    return analysis

if __name__ == "__main__":
    sys.exit(main())
