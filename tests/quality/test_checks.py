"""The harness's own checks catch what they are meant to catch, on hand-made analyses."""

from __future__ import annotations

import copy

import pytest
from quality_checks import (
    INVARIANTS,
    check_kind,
    quoted_numbers,
    run_check,
)

pytestmark = pytest.mark.quality

SOUND = {
    "status": "NEEDS_ATTENTION",
    "summary": "10 profiled steps of 48.3 ms.",
    "metrics": {"steps": 10, "step_time_ms": 48.35, "busy_fraction": 0.135, "roofline_efficiency": None},
    "health": {"compute_fraction": 0.135, "idle_fraction": 0.865, "communication_fraction": 0.0, "optimal": False},
    "hosts": [{"busy_fraction": 0.135, "idle_ms_per_step": 41.8, "step_ms": {"mean": 48.35},
               "top_ops": [{"name": "dot.1", "share_of_busy": 0.2}],
               "host_activities": [{"name": "data_loading", "ms_per_step": 41.58, "share_of_step": 0.86}],
               "attribution": {"loop_ms": 483.5, "steps": 10, "parts": [
                   {"cause": "host_work", "name": "data_loading", "thread": "python3", "ms": 415.8, "share": 0.86,
                    "useful": False},
                   {"cause": "device_compute", "name": "dot", "thread": "", "ms": 65.3, "share": 0.135,
                    "useful": True},
                   {"cause": "untraced", "name": "", "thread": "", "ms": 2.4, "share": 0.005, "useful": False}]}}],
    "findings": [
        {"priority": "P0", "category": "input_bound", "title": "Host-bound input: compute idle 87% of each step",
         "what": "The device waits for the host.",
         "evidence": ['host work inside steps: "data_loading" 41.58 ms per step (86.0%)',
                      "busy fraction 0.135, step time 48.35 ms, 9 of 20 steps above 3x the median"],
         "impact": "", "fix": "Prefetch."},
        {"priority": "P2", "category": "other", "title": "Outlier steps", "what": "", "evidence": []},
    ],
    "followups": [{"tool": "aggregate_xplane_events", "output": "10 events, mean 41.583 ms"}],
    "comparison": {"headline": ["Step time rose from 37.0 ms to 48.3 ms (+31%).",
                                "The largest growth is 'data_loading': 30.1 → 41.6 ms per step."]},
    "tools": [{"name": "get_peak_allocations", "data": {"top_buffers": [{"size_mib": 0.09375}]}}],
}
TRUTH = {"steps": {"value": 10, "abs": 0, "how": "-"}, "step_ms": {"value": 48.4, "rel": 0.1, "how": "-"}}


def broken(change) -> dict:
    analysis = copy.deepcopy(SOUND)
    change(analysis)
    return analysis


@pytest.mark.parametrize("name", list(INVARIANTS))
def test_every_invariant_holds_on_a_sound_analysis(name):
    assert INVARIANTS[name](SOUND) is None


@pytest.mark.parametrize(("name", "change"), [
    ("fractions_in_unit_range", lambda a: a["health"].update(communication_fraction=3.07)),
    ("fractions_in_unit_range", lambda a: a["hosts"][0]["host_activities"][0].update(share_of_step=1.4)),
    ("fractions_in_unit_range", lambda a: a["comparison"].update(busy_fraction={"before": 0.2, "after": 1.3})),
    ("busy_plus_idle_is_one", lambda a: a["health"].update(idle_fraction=0.5)),
    ("busy_plus_idle_is_one", lambda a: a["hosts"][0].update(idle_ms_per_step=10.0)),
    ("titles_within_a_step", lambda a: a["findings"][0].update(title="Communication takes 307% of each step")),
    ("optimal_matches_status", lambda a: a["health"].update(optimal=True)),
    ("attribution_sums_to_loop", lambda a: a["hosts"][0]["attribution"]["parts"].pop(1)),
    ("quoted_numbers_exist", lambda a: a["findings"][0]["evidence"].append("custom calls 12.50 % of device time")),
    ("quoted_numbers_exist", lambda a: a["findings"][0]["evidence"].append("a copy (16 KiB moved each run)")),
    ("no_huge_ratio_in_titles",
     lambda a: a["findings"][1].update(title="Temporaries are 24995375x the program's inputs and outputs")),
    ("no_huge_ratio_in_titles", lambda a: a["findings"][1].update(title="Copies take 1,250× the math")),
    ("time_weighted_fractions", lambda a: _parts(a)[1].update(share=0.3)),  # busy 0.135 of the mean step only
    ("time_weighted_fractions", lambda a: _parts(a)[2].update(share=0.1)),  # idle stated 0.865, attributed 0.96
    ("time_weighted_fractions", lambda a: (a["metrics"].update(busy_fraction=None),
                                           a["health"].update(compute_fraction=None, idle_fraction=None))),
    ("time_weighted_fractions", lambda a: a["hosts"].append(  # a second host, idle half the time, ignored
        {**copy.deepcopy(a["hosts"][0]), "attribution": {"loop_ms": 483.5, "steps": 10, "parts": [
            {"cause": "collectives", "name": "all-reduce", "thread": "", "ms": 241.0, "share": 0.5, "useful": True},
            {"cause": "waiting", "name": "", "thread": "python3", "ms": 241.0, "share": 0.5, "useful": False}]}})),
])
def test_every_invariant_catches_its_violation(name, change):
    assert INVARIANTS[name](broken(change)) is not None


def _parts(analysis: dict) -> list[dict]:
    return analysis["hosts"][0]["attribution"]["parts"]


@pytest.mark.parametrize("title", ["Op-by-op execution: 21x the fused step", "Copies take 1000x the math",
                                   'Program "jit_f_4096x" is slow', "A f32[1024x1024] temporary",
                                   "Step 2 is 3.5 x the median"])
def test_ratios_up_to_a_thousand_shapes_and_names_are_no_huge_ratio(title):
    assert INVARIANTS["no_huge_ratio_in_titles"](broken(lambda a: a["findings"][1].update(title=title))) is None


def test_fractions_are_compared_with_the_mean_attribution_of_the_hosts_that_state_one():
    def two_hosts(analysis):
        second = copy.deepcopy(analysis["hosts"][0])
        _parts({"hosts": [second]})[1].update(share=0.335)  # busy 0.335 over the loop: the two average 0.235
        _parts({"hosts": [second]})[0].update(share=0.66)
        analysis["hosts"].append(second)
        analysis["metrics"]["busy_fraction"] = analysis["health"]["compute_fraction"] = 0.235
        analysis["health"]["idle_fraction"] = 0.765

    assert INVARIANTS["time_weighted_fractions"](broken(two_hosts)) is None
    without = broken(lambda a: (a["hosts"][0].pop("attribution"), a["health"].update(compute_fraction=0.9)))
    assert INVARIANTS["time_weighted_fractions"](without) is None  # nothing to compare with


def test_quoted_numbers_are_measurements_not_names_counts_or_ratios():
    line = ('"jit_f(12)" on GPU:4 gfx942 f32[5,1024] ran 20 steps, 21x the median, 0.50 ms (75.6%) '
            "of 1.5 GiB, busy 0.419")
    assert [(written, unit) for written, _, _, unit in quoted_numbers(line)] == [
        ("0.50 ms", "ms"), ("75.6%", "%"), ("1.5 GiB", "GiB"), ("0.419", None)]


@pytest.mark.parametrize(("line", "holds"), [
    ("mean 41.583 ms", True),  # a follow-up's answer
    ("idle 86.5% of each step", True),  # health.idle_fraction, in percent
    ("step time 48.4 ms", True),  # 48.35 rounded as shown
    ("step time 48.6 ms", False),
    ("step time 0.0484 s", True),  # the same figure in seconds
    ("buffer 96.00 KiB", True),  # a tool's size_mib, in bytes
    ("buffer 96.00 MiB", False),
])
def test_a_quoted_number_is_found_in_its_unit_up_to_the_rounding_shown(line, holds):
    analysis = broken(lambda a: a["findings"][0]["evidence"].append(line))
    assert (INVARIANTS["quoted_numbers_exist"](analysis) is None) is holds


@pytest.mark.parametrize(("spec", "holds"), [
    ({"status": ["NEEDS_ATTENTION"]}, True),
    ({"status": ["OPTIMAL"]}, False),
    ({"p0_p1_categories": ["input_bound"]}, True),
    ({"p0_p1_categories": ["dispatch_overhead"]}, False),
    ({"never_p0_p1": ["input_bound"]}, False),
    ({"never_p0_p1": ["compute"]}, True),
    ({"top_mentions": ["DATA_LOADING"]}, True),
    ({"top_mentions": ["load_batch"]}, False),
    ({"finding": {"category": "other", "priorities": ["P2"]}}, True),
    ({"finding": {"category": "memory"}}, False),
    ({"never_says": ["outlier"]}, False),
    ({"never_says": ["compute capability"]}, True),
    ({"value": "metrics.steps", "truth": "steps"}, True),
    ({"value": "metrics.step_time_ms", "truth": "step_ms"}, True),
    ({"value": "metrics.busy_fraction", "at_least": 0.5}, False),
    ({"value": "hosts.0.idle_ms_per_step", "at_most": "step_ms"}, True),
    ({"value": "metrics.roofline_efficiency", "at_least": 0}, False),  # None is not a number
    ({"text": "hosts.0.top_ops.0.name", "mentions": ["dot"]}, True),
    ({"text": "hosts.0.top_ops.0.name", "mentions": ["convert"]}, False),
    ({"text": "comparison.headline", "mentions": ["data_loading"]}, True),
    ({"text": "comparison.headline", "mentions": ["load_batch"]}, False),
    ({"text": "hosts.0.attribution.parts[useful=true].0.name", "mentions": ["dot"]}, True),
    ({"text": "hosts.0.attribution.parts[useful=true].0.name", "mentions": ["data_loading"]}, False),
    ({"value": "hosts.0.attribution.parts[cause=untraced].0.share", "at_most": 0.01}, True),
    ({"text": "hosts.0.attribution.parts[cause=compilation].0.name", "mentions": [""]}, False),  # none
])
def test_each_expectation_check(spec, holds):
    assert (run_check(SOUND, {"id": "x", **spec}, TRUTH) is None) is holds


def test_an_expectation_has_exactly_one_check():
    with pytest.raises(ValueError, match="exactly one"):
        check_kind({"id": "x", "status": ["OPTIMAL"], "never_says": ["a"]})
    with pytest.raises(ValueError, match="exactly one"):
        check_kind({"id": "x"})


def test_a_size_quoted_from_an_hlo_issue_is_stored():
    analysis = copy.deepcopy(SOUND)
    detail = "copy rewrites bf16[32,64,64,3]{0,3,2,1} from layout {2,1,3,0} (768 KiB moved each run)"
    analysis["hlo_issues"] = {"detect_layout_mismatch_copies": [{"detail": detail}]}
    analysis["findings"][0]["evidence"].append(f'"jit_step" "copy": {detail}')
    assert INVARIANTS["quoted_numbers_exist"](analysis) is None
