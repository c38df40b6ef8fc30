"""Bounded by default: without a memory ceiling given, the analysis plans under about 12x the profile's size, so
that a profile whose whole-file conversion would not fit is converted in time slices, with the same figures."""

from __future__ import annotations

import pytest
from analysis_support import xplane

from mldiag.analysis import ToolStatus, analyze_profile
from mldiag.analysis.xprof import budget, xprof_tools
from mldiag.analysis.xprof.budget import PROCESS_GROWTH, SMALL_PROFILE_BUDGET, default_ceiling

MIB = 1 << 20


@pytest.fixture
def machine(monkeypatch):
    """A machine with 10 GiB available, whose process holds 200 MiB."""
    monkeypatch.setattr(budget, "available_memory", lambda: 10 << 30)
    monkeypatch.setattr(budget, "_cgroup_limit", lambda: None)
    monkeypatch.setattr(budget, "resident_memory", lambda: 200 * MIB)


def test_the_default_ceiling_is_twelve_times_a_large_profile(machine):
    assert default_ceiling({}, profile_bytes=300 * MIB) == 3600 * MIB


def test_the_default_ceiling_of_a_small_profile_leaves_room_for_its_whole_file_conversion(machine):
    assert default_ceiling({}, profile_bytes=2 * MIB) == 200 * MIB + PROCESS_GROWTH + SMALL_PROFILE_BUDGET


def test_the_default_ceiling_stays_within_the_machine_and_the_setting_wins(machine):
    assert default_ceiling({}, profile_bytes=2 << 30) == 8 << 30  # 80% of what is available
    assert default_ceiling({"MLDIAG_ANALYSIS_MEMORY_CEILING": "1GiB"}, profile_bytes=2 << 30) == 1 << 30
    assert default_ceiling({}) == 8 << 30  # no profile known: what the machine has


# A CPU loop whose host marks its steps, a TPU loop whose device marks them, and TPU decoding that marks none.
PROFILES = ("ondemand_mlp", "tpu_v5e/sync_every_step", "tpu_v5e/decode_memory_bound")


@pytest.fixture(scope="module", params=PROFILES)
def sliced_by_default(request):
    """A profile analysed with no ceiling given, its whole-file op_stats conversion said to need 300 MiB:
    more than 12x its size and more than the default ceiling leaves for a small profile."""
    profile = xplane(request.param)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(xprof_tools.CONVERTER_COST, "op_stats", (300 * MIB) // profile.stat().st_size)
        patch.setattr(xprof_tools, "MIN_SLICE_BYTES", 1 << 10)
        return request.param, analyze_profile([profile])


def test_the_default_settings_slice_a_profile_whose_whole_conversion_does_not_fit(sliced_by_default):
    _, analysis = sliced_by_default
    tools = {tool.name: tool for tool in analysis.tools}
    assert tools["get_xprof_overview"].status is ToolStatus.OK
    assert tools["get_xprof_overview"].note.startswith("from XProf's op_stats of "), tools["get_xprof_overview"].note


def test_the_sliced_answer_quotes_the_whole_files_figures(sliced_by_default, analysis_of):
    name, analysis = sliced_by_default
    whole = analysis_of(name)
    assert analysis.metrics.model_dump(mode="json") == whole.metrics.model_dump(mode="json")
    assert [finding.model_dump(mode="json") for finding in analysis.findings] == [
        finding.model_dump(mode="json") for finding in whole.findings]


def test_the_tool_table_says_what_a_sliced_step_figure_leaves_out_where_the_host_marks_the_steps(
        sliced_by_default, analysis_of):
    name, analysis = sliced_by_default
    tools = {tool.name: tool for tool in analysis.tools}
    whole = {tool.name: tool for tool in analysis_of(name).tools}
    if name == "ondemand_mlp":  # XProf drops the first and last step of each slice
        for tool, difference in xprof_tools.SLICED_DIFFERENCES.items():
            assert tools[tool].note.endswith(difference), tools[tool].note
        assert tools["get_step_trace"].data["summary"]["total_steps"] < whole["get_step_trace"].data["summary"][
            "total_steps"]
    else:  # cut at the device's step starts, or no step at all: the step figures are the whole file's
        assert not any(tools[tool].note.endswith(difference)
                       for tool, difference in xprof_tools.SLICED_DIFFERENCES.items())
        assert _without_message(tools["get_step_trace"].data) == _without_message(whole["get_step_trace"].data)
        assert tools["get_kpi_metrics"].data == whole["get_kpi_metrics"].data


def _without_message(data: dict) -> dict:
    """A tool's answer less its message, which names the analysis's private folder."""
    return {key: value for key, value in data.items() if key != "message"}
