"""``python -m mldiag.entrypoints.analysis_worker``: one session's analysis in a process of its own.

The ``analyze_session`` function starts it for each request, so that a timeout
really stops the work and running out of memory ends this process rather than
the function. It analyses the files it is given, investigates with the
reasoner the environment configures, and writes ``analysis.json`` and
``summary.html`` into ``--out``. Exit 3 (with the reason on stderr) means the
profile cannot be read. SIGTERM or SIGINT stop it at once (exit 143 or 130),
its private copies removed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import NoReturn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="the session's <host>.xplane.pb files")
    parser.add_argument("--out", type=Path, required=True, help="where to write the two reports")
    parser.add_argument("--scratch", type=Path, help="where the private copy may live")
    parser.add_argument("--source", default="", help="where the session is kept, for the report")
    parser.add_argument("--dashboard-uri", default="", help="the session in the XProf viewer")
    parser.add_argument("--baseline", type=Path, help="analysis.json of an earlier session of the run")
    parser.add_argument("--baseline-session", default="", help="that session's name")
    args = parser.parse_args(argv)

    from mldiag.analysis.stopping import PRIVATE_FOLDER_PREFIX, stop_now, stopping

    own_scratch = args.scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="mldiag-worker-")) if own_scratch else args.scratch

    def stop(why: str, code: int) -> NoReturn:
        stop_now([scratch] if own_scratch else scratch.glob(f"{PRIVATE_FOLDER_PREFIX}*"), why, code)

    try:
        with stopping(stop):  # before the imports, which take seconds
            return _analyse(args, scratch)
    finally:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _analyse(args: argparse.Namespace, scratch: Path) -> int:
    from mldiag.analysis import Analysis, analyze_session
    from mldiag.analysis.comparison import compare
    from mldiag.analysis.profiles import UNREADABLE_EXIT, UnreadableProfile
    from mldiag.analysis.report import write_reports
    from mldiag import bootstrap
    from mldiag.config import Settings

    try:
        analysis = analyze_session(args.files, scratch, source=args.source,
                                   investigate=bootstrap.build_investigator(Settings.from_env()))
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

if __name__ == "__main__":
    sys.exit(main())
