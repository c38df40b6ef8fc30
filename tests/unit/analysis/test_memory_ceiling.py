"""The memory ceiling and XProf's size limit: a tool that cannot run is skipped, named with why and with what the
report lacks, and the evidence and findings are still there."""

from __future__ import annotations

import pytest
from analysis_support import xplane

from mldiag.analysis import ToolStatus, analyze_profile
from mldiag.analysis import xprof_tools
from mldiag.analysis.report import write_reports

OP_STATS_TOOLS = {name for name, (converter, _) in xprof_tools.NEEDS.items() if converter == "op_stats"}
HLO_TOOLS = {"list_hlo_modules", "get_peak_allocations"}
# input_bound is a CPU profile: it has no allocator events nor TPU counters, so these two have no input at all.
ABSENT = {"get_memory_profile", "get_utilization_viewer"}


@pytest.fixture(scope="module")
def over_the_ceiling(tmp_path_factory):
    """input_bound analysed under a 1 GiB ceiling, its op_stats conversion said to need 10,000x the profile."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(xprof_tools.CONVERTER_COST, "op_stats", 10_000)
        analysis = analyze_profile([xplane("input_bound")], memory_ceiling_bytes=1 << 30)
    out = tmp_path_factory.mktemp("report")
    write_reports(analysis, out)
    return analysis, out


@pytest.fixture(scope="module")
def past_the_protobuf_limit():
    """input_bound as if its file were past protobuf's 2 GiB limit."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(xprof_tools, "PROTOBUF_LIMIT", 1000)
        return analyze_profile([xplane("input_bound")])


def test_a_tool_over_the_ceiling_is_skipped_with_what_it_needs_and_what_it_costs(over_the_ceiling):
    analysis, _ = over_the_ceiling
    tools = {tool.name: tool for tool in analysis.tools}
    size = xplane("input_bound").stat().st_size
    for name in OP_STATS_TOOLS:
        assert tools[name].status is ToolStatus.SKIPPED, name
        needs = f"{10_000 * size / 2**30:.1f} GiB"
        assert tools[name].reason.startswith(f"skipped: needs ~{needs}, ceiling 1.0 GiB; "), tools[name].reason
        assert tools[name].reason.endswith(xprof_tools.NEEDS[name][1])
    assert {tools[name].status for name in HLO_TOOLS} == {ToolStatus.OK}


def test_the_analysis_over_the_ceiling_still_has_its_evidence_and_findings(over_the_ceiling, analysis_of):
    analysis, _ = over_the_ceiling
    whole = analysis_of("input_bound")
    assert analysis.metrics.steps == whole.metrics.steps > 0
    assert [finding.title for finding in analysis.findings] == [finding.title for finding in whole.findings]


def test_the_report_and_analysis_json_show_a_skipped_tools_reason(over_the_ceiling):
    _, out = over_the_ceiling
    report = (out / "analysis.json").read_text()
    assert '"status": "skipped"' in report and "ceiling 1.0 GiB" in report
    assert "skipped: needs ~" in (out / "summary.html").read_text()


def test_a_file_past_the_protobuf_limit_is_never_given_to_xprofs_converters(past_the_protobuf_limit):
    tools = {tool.name: tool for tool in past_the_protobuf_limit.tools}
    for name in set(xprof_tools.NEEDS) - ABSENT:
        assert tools[name].status is ToolStatus.SKIPPED, name
        assert "past the 2 GiB protobuf limit of XProf's converters" in tools[name].reason
    # The HLO modules come from a copy of the metadata plane alone, which XProf can read.
    assert {tools[name].status for name in HLO_TOOLS} == {ToolStatus.OK}
    assert past_the_protobuf_limit.metrics.steps > 0 and past_the_protobuf_limit.findings
