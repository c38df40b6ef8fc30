"""What an analysis job does, wherever a runner runs it: analyse, investigate, compare, write the reports.

A session's job analyses its host files (or, with ``merge``, merges the hosts'
evidence and runs the follow-up checks on one host's file), investigates with
the reasoner it is given, compares with the baseline when there is one, and
writes ``analysis.json`` and ``summary.html`` into the job's ``out``; a host's
job writes that host's evidence (``host.json``). The inputs are the runner's
own copies, so the private copy of them is a link where it can be. An
unreadable profile raises :class:`~mldiag.analysis.profile.profiles.UnreadableProfile`.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from mldiag.analysis import Analysis, analyze_profile
from mldiag.analysis.comparison import compare
from mldiag.analysis.report import write_reports
from mldiag.ports import AnalysisJob

if TYPE_CHECKING:
    from mldiag.analysis.fanout import HostAnalysis
    from mldiag.analysis.reasoning.investigation import Investigator


def analyse(job: AnalysisJob, investigate: Investigator) -> Analysis:
    """The session's analysis, its reports written into ``job.out``."""
    if job.merge:
        analysis = _merged(job, investigate)
    else:
        analysis = analyze_profile(list(job.inputs), job.scratch, source=job.source, investigate=investigate,
                                   memory_ceiling_bytes=job.memory_ceiling_bytes, owned_inputs=True)
    if job.baseline is not None:
        try:
            baseline = Analysis.model_validate_json(job.baseline.read_text("utf-8"))
        except ValueError as error:  # an old or damaged baseline costs the comparison, not the analysis
            print(f"baseline {job.baseline_session} not used: {error}", file=sys.stderr)
        else:
            analysis.comparison = compare(analysis, baseline, job.baseline_session)
    write_reports(analysis, job.out, dashboard_uri=job.dashboard_uri)
    return analysis


def analyse_host(job: AnalysisJob) -> HostAnalysis:
    """One host file's evidence (the merge investigates), written to ``host.json`` in ``job.out``."""
    from mldiag.analysis.engine import analyze_host
    from mldiag.analysis.fanout import HOST_EVIDENCE_FILE

    if len(job.inputs) != 1:
        raise ValueError(f"a host's analysis reads one host file, not {len(job.inputs)}")
    part = analyze_host(job.inputs[0], job.scratch, memory_ceiling_bytes=job.memory_ceiling_bytes, owned_inputs=True)
    job.out.mkdir(parents=True, exist_ok=True)
    (job.out / HOST_EVIDENCE_FILE).write_text(part.model_dump_json(), "utf-8")
    return part


def _merged(job: AnalysisJob, investigate: Investigator) -> Analysis:
    from mldiag.analysis import start_analysis
    from mldiag.analysis.evidence import Investigation
    from mldiag.analysis.fanout import HostAnalysis, merge_hosts
    from mldiag.domain.resources import HealthStatus

    started = time.perf_counter()
    parts = [HostAnalysis.model_validate_json(path.read_text("utf-8")) for path in job.inputs]
    analysis = merge_hosts(parts, source=job.source, session=job.source.rstrip("/").rsplit("/", 1)[-1],
                           missing=job.missing_hosts)
    if analysis.status is HealthStatus.OPTIMAL or job.followups_on is None:
        note = ("The health snapshot is OPTIMAL: no follow-up checks were needed."
                if analysis.status is HealthStatus.OPTIMAL else
                "No follow-up checks: every host's own analysis was OPTIMAL, so no host file was read for them.")
        analysis.investigation = Investigation(reasoner=investigate.reasoner.name, note=note)
    else:
        with start_analysis([job.followups_on], job.scratch, memory_ceiling_bytes=job.memory_ceiling_bytes,
                            owned_inputs=True) as running:
            analysis = running.follow_up(analysis, investigate)
    analysis.seconds = time.perf_counter() - started
    return analysis
