"""The demo's automatic step says what each of its numbers measured, so that different numbers agree."""

from __future__ import annotations

import json

from rich.console import Console

from mldiag.local.demo.walkthrough import (
    AUTOMATIC_STEP,
    SessionSummary,
    analysed_change,
    detected_slowdown,
    injected_slowdown,
    print_summary,
    read_what_changed,
)
from mldiag.domain import AnalysisState, AnalysisStatus, HealthStatus, ProfilerSession

RUN = "projects/local-project/locations/local/machineLearningRuns/demo"
EVENT = {"name": f"{RUN}/monitoredEvents/degradation-1",
         "analyzerReports": [{"details": "step time 121.5 ms is 18% above the baseline 103.2 ms"}]}
HEADLINE = ("Step time rose from 103.1 ms to 133.9 ms (+30%) against the earlier session snapshot "
            "(itself NEEDS_ATTENTION).")


def test_the_step_title_does_not_claim_the_injected_slowdown_was_measured():
    assert "%" not in AUTOMATIC_STEP and "opened an event" in AUTOMATIC_STEP


def test_the_injected_slowdown_is_host_sleep_per_step():
    line = injected_slowdown(60)
    assert line.startswith("injected: from step 60 the workload sleeps 30% longer per step, in host time")
    assert "100 → 130 ms" in line


def test_the_analyzers_measurement_names_its_window_and_the_event():
    line = detected_slowdown(EVENT)
    assert line.startswith("measured by the degradation analyzer: the level of the last 7 reported step times "
                           "(some from before the slowdown) against its baseline, the median of the healthy ones")
    assert "step time 121.5 ms is 18% above the baseline 103.2 ms; it opened event degradation-1" in line


def test_the_analysed_change_is_labelled_as_xprofs_measurement_of_the_captured_steps():
    line = analysed_change({"headline": [HEADLINE, "The devices were busy 3% of each step (was 4%)."]})
    assert line == f"measured by XProf in the captured session's steps: s{HEADLINE[1:]}"
    assert analysed_change(None) == "" and analysed_change({"headline": []}) == ""


def test_the_summary_shows_what_changed_from_the_local_analysis_json(tmp_path):
    uri = "gs://mldiag-profiles/demo/plugins/profile/auto-1/mldiag/analysis.json"
    written = tmp_path / "demo/plugins/profile/auto-1/mldiag/analysis.json"
    written.parent.mkdir(parents=True)
    written.write_text(json.dumps({"status": "NEEDS_ATTENTION", "comparison": {"headline": [HEADLINE]}}))
    session = ProfilerSession(name=f"{RUN}/profilerSessions/auto-1", auto_captured=True, analysis=AnalysisStatus(
        state=AnalysisState.DONE, health=HealthStatus.NEEDS_ATTENTION, analysis_uri=uri))

    summary = SessionSummary("automatic", session, what_changed=read_what_changed(tmp_path, session))
    assert summary.what_changed.endswith("against the earlier session snapshot (itself NEEDS_ATTENTION).")
    assert summary.to_json()["whatChanged"] == summary.what_changed
    console = Console(record=True, width=300)
    print_summary(console, [summary])
    assert summary.what_changed in console.export_text()
    assert read_what_changed(tmp_path / "elsewhere", session) == ""
