"""Follow-up checks: proposals naming nothing in the profile are refused, at most four run, XProf answers."""

from __future__ import annotations

import dataclasses
import json

import pytest
from analysis_support import xplane
from investigation_support import on_live_profile

from mldiag.analysis.evidence import ToolStatus
from mldiag.analysis.reasoning.followups import (
    EVENT_FAMILIES,
    MAX_FOLLOWUPS,
    TIMELINE_AGGREGATE_COST,
    XPROF_AGGREGATE_COST,
    FollowupTools,
    Refused,
    _kernel_outcome,
)
from mldiag.analysis.xprof.budget import MemoryBudget

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

WHY = {"why": "a hypothesis"}
# Refused ones first: they do not count against the limit; the valid ones after them use it up.
PROPOSALS = {
    "unknown tool": ("run_shell", {"command": "id", **WHY}),
    "unknown module": ("get_hlo_neighborhood", {"module": "jit_nothing(1)", "instruction": "copy", **WHY}),
    "unknown instruction": ("get_hlo_neighborhood", {"module": "jit_transpose(18)", "instruction": "fusion.999",
                                                     **WHY}),
    "unknown event": ("aggregate_xplane_events", {"events": ["PjitFunction(nothing)"], **WHY}),
    "regex as an event": ("aggregate_xplane_events", {"events": [".*"], **WHY}),
    "events and family": ("aggregate_xplane_events", {"events": ["copy"], "family": "converts", **WHY}),
    "radius out of bounds": ("get_hlo_neighborhood", {"module": "jit_transpose(18)",
                                                      "instruction": "transpose_copy_fusion", "radius": 50, **WHY}),
    "unknown argument": ("get_kernel_stats", {"limit": 5, "session_id": "/etc", **WHY}),
    "no why": ("llo_load", {}),
    "neighbourhood": ("get_hlo_neighborhood", {"module": "jit_convert_element_type(10)",
                                               "instruction": "%wrapped_convert", **WHY}),
    "dispatches": ("aggregate_xplane_events", {"family": "jit_dispatch", **WHY}),
    "named events": ("aggregate_xplane_events", {"events": ["wrapped_convert", "copy"], **WHY}),
    "kernels on a CPU": ("get_kernel_stats", {"limit": 5, **WHY}),
    "over the limit": ("llo_load", WHY),
}
REFUSED = [key for key in PROPOSALS if key not in ("neighbourhood", "dispatches", "named events", "kernels on a CPU")]


def _propose(proposals, budget=None):
    """Run ``proposals`` on the live analysis; ``budget(context)`` is the memory budget bytes, if given."""
    def run(analysis, context):
        if budget is not None:
            context = dataclasses.replace(context, budget=MemoryBudget(budget(context)))
        tools = FollowupTools.of(analysis, context)
        outcomes = {}
        for key, (tool, arguments) in proposals.items():
            try:
                outcomes[key] = tools.run(tool, arguments)
            except Refused as refused:
                outcomes[key] = refused
        return analysis, tools, outcomes

    return run


@pytest.fixture(scope="module")
def unfused():
    return on_live_profile("unfused_small_ops", proposals=_propose(PROPOSALS))["proposals"]


def _timelines_only(context):
    """A budget the saved timelines fit in, XProf's own reading of the profile not."""
    budget = TIMELINE_AGGREGATE_COST * sum(path.stat().st_size for path in context.timelines)
    assert budget < XPROF_AGGREGATE_COST * context.profile_bytes
    return budget


COLLECTIVES = ("aggregate_xplane_events", {"family": "collectives", "group_by": "plane", **WHY})
DISPATCHES = ("aggregate_xplane_events", {"family": "jit_dispatch", **WHY})


@pytest.fixture(scope="module")
def tpu():
    runs = on_live_profile(
        "tpu_v6e4_inference",
        proposals=_propose({
            "kernels": ("get_kernel_stats", {"limit": 3, **WHY}),
            "one kernel": ("get_kernel_stats", {"kernel": "copy-done.2", **WHY}),
            "llo": ("llo_load", WHY),
            "llo query": ("llo_query", {"mode": "list_ops", **WHY}),
        }),
        collectives=_propose({"collectives": COLLECTIVES}),
        within_less_memory=_propose({"collectives": COLLECTIVES}, budget=_timelines_only),
        within_no_memory=_propose({"dispatches": DISPATCHES}, budget=lambda context: 1),
    )
    return {key: outcomes for key, (_, _, outcomes) in runs.items()}


@pytest.mark.parametrize("key", REFUSED)
def test_a_proposal_naming_nothing_in_the_profile_is_refused_and_recorded(unfused, key):
    _, tools, outcomes = unfused
    assert isinstance(outcomes[key], Refused)
    assert str(outcomes[key]) in tools.refused


def test_refusals_say_why(unfused):
    _, _, outcomes = unfused
    assert "unknown tool" in str(outcomes["unknown tool"])
    assert 'no HLO module "jit_nothing(1)"' in str(outcomes["unknown module"])
    assert 'no instruction "fusion.999"' in str(outcomes["unknown instruction"])
    assert "events or family" in str(outcomes["events and family"])
    assert "from 1 to 3" in str(outcomes["radius out of bounds"])
    assert '"session_id"' in str(outcomes["unknown argument"])
    assert "why is required" in str(outcomes["no why"])
    assert f"limit of {MAX_FOLLOWUPS}" in str(outcomes["over the limit"])


def test_at_most_four_follow_ups_run(unfused):
    _, tools, _ = unfused
    assert [f.tool for f in tools.followups] == [
        "get_hlo_neighborhood", "aggregate_xplane_events", "aggregate_xplane_events", "get_kernel_stats"]
    assert tools.remaining == 0
    assert all(f.why == WHY["why"] and f.seconds >= 0 for f in tools.followups)


def test_the_hlo_neighbourhood_shows_what_the_instruction_reads(unfused):
    _, _, outcomes = unfused
    followup = outcomes["neighbourhood"]
    assert followup.status is ToolStatus.OK
    assert followup.arguments == {"module": "jit_convert_element_type(10)", "instruction": "wrapped_convert",
                                  "radius": 2}
    assert '"args_0_.1" = bf16[64,64]{1,0} parameter' in followup.showed
    assert "ROOT wrapped_convert = f32[64,64]{1,0} fusion" in followup.output


def test_dispatch_timings_agree_with_the_raw_event_signals(unfused):
    analysis, _, outcomes = unfused
    followup = outcomes["dispatches"]
    groups = {g["event"]: g for g in json.loads(followup.output)["aggregates"]}
    host = analysis.hosts[0]
    for program in host.dispatched:
        assert groups[program.name]["count"] >= program.count_per_step * host.steps
    assert '"PjitFunction(convert_element_type)"' in followup.showed


def test_named_events_match_exactly_those_events(unfused):
    _, _, outcomes = unfused
    groups = json.loads(outcomes["named events"].output)["aggregates"]
    assert {g["event"] for g in groups} == {"wrapped_convert", "copy"}  # not "copy.1" nor "transpose_copy_fusion"


def test_kernel_statistics_are_empty_on_a_cpu_profile(unfused):
    _, _, outcomes = unfused
    assert outcomes["kernels on a CPU"].status is ToolStatus.NO_DATA
    assert "/tmp" not in outcomes["kernels on a CPU"].showed  # the private copy's path is not reported


def test_kernel_statistics_of_tpu_ops(tpu):
    outcomes = tpu["proposals"]
    kernels = outcomes["kernels"]
    assert kernels.status is ToolStatus.OK and '"%copy-done.2"' in kernels.showed
    one = outcomes["one kernel"].showed
    assert one.startswith('"%copy-done.2": 400 runs') and one.count(" runs, ") == 1


def test_llo_is_reported_not_available_without_llo_data(tpu):
    outcomes = tpu["proposals"]
    for key in ("llo", "llo query"):
        assert outcomes[key].status is ToolStatus.NO_DATA
        assert outcomes[key].showed.startswith("not available")


def test_tpu_events_timed_to_the_picosecond_are_aggregated_as_xprof_aggregates_them(tpu):
    from xprof.cli.internal.oss.xplane_tools import aggregate_xplane_events

    followup = tpu["collectives"]["collectives"]
    assert followup.status is ToolStatus.OK
    assert followup.output == aggregate_xplane_events.__wrapped__(
        str(xplane("tpu_v6e4_inference")), event_regex="(?i)" + EVENT_FAMILIES["collectives"], group_by="plane")


def test_where_xprof_would_not_fit_the_budget_the_timelines_still_answer_exactly(tpu):
    within_less_memory = tpu["within_less_memory"]["collectives"]
    assert within_less_memory.status is ToolStatus.OK
    assert within_less_memory.output == tpu["collectives"]["collectives"].output


def test_an_aggregation_that_does_not_fit_the_budget_is_recorded_not_run(tpu):
    followup = tpu["within_no_memory"]["dispatches"]
    assert followup.status is ToolStatus.ERROR and "ceiling" in followup.showed


def test_kernel_statistics_quote_a_templated_kernel_by_its_whole_name():
    kernel = "void ck_tile::kentry<ck_tile::gfx950_t, 2, ck_tile::FmhaFwdKernel<Pipeline>>(Args)"
    records = [{"short_name": "void", "kernel_name": kernel, "execution_count": 10, "total_duration_us": 4279.0,
                "avg_duration_us": 427.9},
               {"short_name": "gemm_fusion_dot.kd", "kernel_name": "gemm_fusion_dot.kd", "execution_count": 10}]
    showed = _kernel_outcome(json.dumps({"kernel_records": records}), {}).showed
    assert showed.startswith(json.dumps(kernel) + ": 10 runs, 4.279 ms") and '"gemm_fusion_dot.kd": 10 runs' in showed


def test_kernel_statistics_do_not_quote_a_custom_call_share_that_misses_library_kernels():
    # XProf's kernel table counts only kernels named custom-call or pallas: Transformer Engine's read as 0 %.
    records = [{"short_name": "void", "kernel_name": "void ck_tile::kentry<FmhaFwdKernel>(Args)", "execution_count": 2,
                "total_duration_us": 820.0, "avg_duration_us": 410.0}]
    showed = _kernel_outcome(json.dumps({"kernel_records": records, "custom_call_share_pct": 0.0}), {}).showed
    assert "custom calls" not in showed and "0.00%" not in showed
    assert '"void"' not in showed
