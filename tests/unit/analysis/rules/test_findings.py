"""What the offline analyst concludes on real CPU profiles, checked against the facts measured when they were made."""

from __future__ import annotations

import re

import pytest
from analysis_support import GENERATED, facts

from mldiag.domain import FindingCategory, HealthStatus, Priority

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

URGENT = (Priority.P0, Priority.P1)


def _findings(analysis, category):
    return [f for f in analysis.findings if f.category is category]


@pytest.mark.parametrize("name", GENERATED)
def test_step_time_is_within_five_percent_of_the_step_markers(analysis_of, name):
    measured = facts(name)["step_ms_from_markers"]["mean"]
    analysis = analysis_of(name)
    assert analysis.metrics.steps == facts(name)["steps"]
    assert analysis.metrics.step_time_ms == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("name", GENERATED)
def test_busy_fraction_matches_the_xla_threads(analysis_of, name):
    assert analysis_of(name).metrics.busy_fraction == pytest.approx(facts(name)["xla_busy_fraction_mean"], abs=0.02)


def test_input_starved_loop_needs_attention_with_a_p0_input_finding_quoting_the_idle_fraction(analysis_of):
    analysis = analysis_of("input_bound")
    assert analysis.status is HealthStatus.NEEDS_ATTENTION
    (finding,) = _findings(analysis, FindingCategory.INPUT_BOUND)
    assert finding.priority is Priority.P0
    assert analysis.findings[0] is finding
    idle = 1 - facts("input_bound")["xla_busy_fraction_mean"]
    quoted_idle = [float(m) / 100 for e in finding.evidence for m in re.findall(r"idle ([\d.]+)% of each step", e)]
    assert quoted_idle and quoted_idle[0] == pytest.approx(idle, abs=0.02)
    assert any('"data_loading"' in e for e in finding.evidence)
    assert re.search(r"\d+\.\d ms of each \d+\.\d ms step is idle", finding.impact)


def test_busy_compute_loop_is_optimal_and_not_input_bound(analysis_of):
    analysis = analysis_of("compute_bound")
    assert not [f for f in _findings(analysis, FindingCategory.INPUT_BOUND) if f.priority in URGENT]
    assert analysis.status is HealthStatus.OPTIMAL
    assert analysis.health.optimal and analysis.health.compute_fraction > 0.9


def test_op_by_op_loop_with_converts_is_dispatch_or_compiler_bound(analysis_of):
    analysis = analysis_of("unfused_small_ops")
    assert analysis.status is HealthStatus.NEEDS_ATTENTION
    urgent = {f.category for f in analysis.findings if f.priority in URGENT}
    assert urgent & {FindingCategory.DISPATCH_OVERHEAD, FindingCategory.COMPILER}
    (dispatch,) = _findings(analysis, FindingCategory.DISPATCH_OVERHEAD)
    assert any('"PjitFunction(convert_element_type)"' in e for e in dispatch.evidence)
    assert not _findings(analysis, FindingCategory.INPUT_BOUND)  # busy dispatching, not loading data
    host = analysis.hosts[0]
    assert host.op_families["converts"].dispatches_per_step >= 50


def test_op_by_op_converts_reshapes_and_layout_copies_are_detected_in_the_hlo(analysis_of):
    issues = analysis_of("unfused_small_ops").hlo_issues
    round_trips = issues["detect_unnecessary_convert_reduce"]
    assert {i.shapes[0].split("[")[0] for i in round_trips} == {"f32", "bf16"}
    assert all("converts it back" in i.detail for i in round_trips)
    assert {i.module.split("(")[0] for i in issues["detect_unfused_reshapes"]} == {"jit_reshape", "jit_transpose"}
    (copy,) = issues["detect_layout_mismatch_copies"]
    assert copy.runs_as == "transpose_copy_fusion" and copy.shapes == ["f32[128,32]{0,1}", "f32[128,32]{1,0}"]
    # On a CPU, a bf16 round trip's first fix is to compute in float32.
    (converts,) = [f for f in analysis_of("unfused_small_ops").findings if f.title.startswith("Dtype conversions")]
    assert converts.fix.startswith("On a CPU, where the converts are to and from bfloat16 or float16")


def test_compiling_every_step_is_a_recompilation_finding_not_an_input_one(analysis_of):
    analysis = analysis_of("recompiling")
    (finding,) = _findings(analysis, FindingCategory.RECOMPILATION)
    assert finding.priority is Priority.P0
    compiles = facts("recompiling")["compiles_in_steps"]
    (host,) = analysis.hosts
    # The first step compiles each function for the first time (the warm-up); every later compilation recompiles.
    assert host.warmup.steps == 1 and host.recompiles_in_steps + host.warmup.compiles == compiles
    assert f"{host.recompiles_in_steps} XLA recompilations inside" in finding.evidence[0]
    assert not _findings(analysis, FindingCategory.INPUT_BOUND)


@pytest.mark.parametrize("name", GENERATED)
def test_findings_are_sorted_by_priority_and_titles_hold_no_profile_strings(analysis_of, name):
    analysis = analysis_of(name)
    order = [f.priority.value for f in analysis.findings]
    assert order == sorted(order)
    for finding in analysis.findings:
        assert '"' not in finding.title and "<" not in finding.title
    assert 3 <= analysis.summary.count(". ") + 1 <= 6
