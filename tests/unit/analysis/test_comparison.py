"""What changed: an analysis against an earlier one of the run, named for what that one was."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from mldiag.analysis.comparison import compare
from mldiag.analysis.host_evidence import HostActivity
from mldiag.domain import AnalysisState, AnalysisStatus, HealthStatus, ProfilerSession
from mldiag.services.baselines import find_baseline

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

RUN = "projects/p/locations/l/machineLearningRuns/r1"


def slowed_down(analysis, factor=1.3, extra_gap_ms=60.0, activity="data_loading"):
    """The same profile with the step stretched by host time, as a slower input pipeline would."""
    slower = analysis.model_copy(deep=True)
    slower.metrics.step_time_ms = analysis.metrics.step_time_ms * factor
    slower.metrics.busy_fraction = analysis.metrics.busy_fraction / factor
    for host in slower.hosts:
        host.gap_ms_per_step = (host.gap_ms_per_step or 0.0) + extra_gap_ms
        for item in host.host_activities:
            if item.name == activity:
                item.ms_per_step += extra_gap_ms
    return slower


def test_comparison_names_the_slowdown_and_where_it_went(analysis_of):
    baseline = analysis_of("input_bound")
    activity = baseline.hosts[0].host_activities[0].name
    comparison = compare(slowed_down(baseline, activity=activity), baseline, f"{RUN}/profilerSessions/snap-1")
    assert round(comparison.step_time_ms.ratio, 2) == 0.30
    assert comparison.headline[0].startswith("Step time rose from")
    assert comparison.baseline_status is HealthStatus.NEEDS_ATTENTION
    assert "(+30%) against the earlier session snap-1 (itself NEEDS_ATTENTION)." in comparison.headline[0]
    assert any("host time between steps grew by 60.0 ms" in line for line in comparison.headline)
    assert [c.name for c in comparison.grown_host_activities][:1] == [activity]
    assert comparison.new_ops == [] and comparison.grown_ops == []


def test_host_work_that_appears_between_steps_is_named(analysis_of):
    healthy = analysis_of("input_bound")
    slower = slowed_down(healthy, activity="")
    slower.hosts[0].between_steps = [HostActivity(name="$time sleep", count_per_step=1.0, ms_per_step=57.0,
                                                  share_of_step=0.5)]
    comparison = compare(slower, healthy, "s")
    assert [c.name for c in comparison.grown_host_activities] == ["$time sleep"]
    assert "The largest growth is '$time sleep': 0.0 → 57.0 ms per step." in comparison.headline


def test_identical_profiles_show_no_growth(analysis_of):
    healthy = analysis_of("compute_bound")
    comparison = compare(healthy, healthy, f"{RUN}/profilerSessions/same")
    assert comparison.step_time_ms.ratio == 0
    assert not (comparison.new_ops or comparison.grown_ops or comparison.grown_host_activities)
    assert comparison.headline[0].startswith("Step time is unchanged at")


def test_only_an_optimal_baseline_is_called_healthy(analysis_of):
    optimal = analysis_of("compute_bound")
    assert optimal.status is HealthStatus.OPTIMAL
    assert "against the healthy session ok-1." in compare(optimal, optimal, f"{RUN}/profilerSessions/ok-1").headline[0]
    attention = analysis_of("input_bound")
    assert attention.status is HealthStatus.NEEDS_ATTENTION
    for current in (optimal, attention):
        headline = compare(current, attention, f"{RUN}/profilerSessions/snap-1").headline
        assert "healthy" not in " ".join(headline) and "the earlier session snap-1" in headline[0]


def test_ops_that_appear_are_new(analysis_of):
    baseline = analysis_of("compute_bound")
    current = baseline.model_copy(deep=True)
    current.hosts[0].top_ops[0].name = "fusion.injected"
    comparison = compare(current, baseline, "s")
    assert comparison.new_ops[0].name == "fusion.injected"


def test_find_baseline_takes_the_latest_earlier_healthy_session(embedded, clock, analysis_of):
    healthy = analysis_of("compute_bound")

    def session(session_id, auto=False, state=AnalysisState.DONE, health=HealthStatus.OPTIMAL):
        uri = f"gs://profiles/exp/r1/plugins/profile/{session_id}/mldiag/analysis.json"
        embedded.blobs.write_bytes(uri, json.dumps(healthy.to_json_dict()).encode())
        created = embedded.sessions.create(ProfilerSession(
            name=f"{RUN}/profilerSessions/{session_id}", auto_captured=auto,
            analysis=AnalysisStatus(state=state, analysis_uri=uri, health=health)))
        clock.advance(60)
        return created

    session("old")
    session("recent")
    session("still-running", state=AnalysisState.RUNNING)
    session("earlier-auto", auto=True)
    current = session("auto-degradation-1", auto=True)
    assert find_baseline(embedded, current).id == "recent"
    clock.advance(-timedelta(hours=1).total_seconds())
    first = embedded.sessions.create(ProfilerSession(name=f"{RUN}/profilerSessions/first", auto_captured=True))
    assert find_baseline(embedded, first) is None


def test_find_baseline_prefers_an_optimal_session_over_a_later_one_needing_attention(embedded, clock):
    def session(session_id, health):
        created = embedded.sessions.create(ProfilerSession(
            name=f"{RUN}/profilerSessions/{session_id}",
            analysis=AnalysisStatus(state=AnalysisState.DONE, health=health,
                                    analysis_uri=f"gs://profiles/r1/plugins/profile/{session_id}/mldiag/a.json")))
        clock.advance(60)
        return created

    session("programmatic", HealthStatus.NEEDS_ATTENTION)
    assert find_baseline(embedded, session("on-demand", HealthStatus.NEEDS_ATTENTION)).id == "programmatic"
    session("ok-1", HealthStatus.OPTIMAL)
    session("snap-1", HealthStatus.NEEDS_ATTENTION)
    current = embedded.sessions.create(ProfilerSession(name=f"{RUN}/profilerSessions/auto-1", auto_captured=True))
    assert find_baseline(embedded, current).id == "ok-1"
