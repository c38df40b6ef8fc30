"""The memory ceiling and XProf's size limit: a tool that cannot run is skipped, named with why and with what the
report lacks, and the evidence and findings are still there."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from analysis_support import xplane

from mldiag.analysis import ToolStatus, analyze_profile
from mldiag.analysis.report import write_reports
from mldiag.analysis.xprof import xprof_tools

OP_STATS_TOOLS = {name for name, (converter, _) in xprof_tools.NEEDS.items() if converter == "op_stats"}
HLO_TOOLS = {"list_hlo_modules", "get_peak_allocations"}
# input_bound is a CPU profile: it has no allocator events nor TPU counters, so these two have no input at all.
ABSENT = {"get_memory_profile", "get_utilization_viewer"}

MIB = 1 << 20


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
    """input_bound as if its file were past protobuf's 2 GiB limit, by so much that slices of at least
    MIN_SLICE_BYTES cannot bring it under."""
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


def test_a_file_past_the_protobuf_limit_that_slices_cannot_bring_under_it_is_never_converted(past_the_protobuf_limit):
    tools = {tool.name: tool for tool in past_the_protobuf_limit.tools}
    for name in set(xprof_tools.NEEDS) - ABSENT:
        assert tools[name].status is ToolStatus.SKIPPED, name
        assert "past the 2 GiB protobuf limit of XProf's converters" in tools[name].reason
    # The HLO modules come from a copy of the metadata plane alone, which XProf can read.
    assert {tools[name].status for name in HLO_TOOLS} == {ToolStatus.OK}
    assert past_the_protobuf_limit.metrics.steps > 0 and past_the_protobuf_limit.findings



def _analysed_in_slices(name: str):
    """Profile ``name`` under a ceiling its whole op_stats conversion does not fit but slices of it do (the
    conversion is said to need 512 MiB, the budget is 460 MiB), every conversion XProf was asked for, and each
    overview XProf made from copies without events beside the one it makes from every slice (the slices, the
    merged op_stats beside them, are there while the analysis runs)."""
    from xprof.convert import raw_to_tool_data

    from mldiag.analysis.xprof import op_stats_apart
    from mldiag.analysis.xprof.budget import PROCESS_GROWTH, resident_memory

    profile = xplane(name)
    convert, process, conversions = raw_to_tool_data.xspace_to_tool_data, op_stats_apart.op_stats_process, []
    overviews = []

    def recorded(paths, tool, options):
        conversions.append((tool, [Path(path) for path in paths]))
        converted = convert(paths, tool, options)
        folder = Path(paths[0]).parent
        if tool == "overview_page" and folder.name.endswith(".without-events"):
            slices = folder.with_name(folder.name.replace(".without-events", ".op-stats-slices"))
            every_slice = sorted(map(str, slices.glob("*.slice-*.xplane.pb")), key=lambda path: int(
                path.rsplit(".slice-", 1)[1].split(".")[0]))
            overviews.append((converted, convert(every_slice, tool, options)))
        return converted

    @contextlib.contextmanager
    def recorded_process():
        with process() as op_stats:
            def recorded_op_stats(path):
                conversions.append(("op_stats apart", [path]))
                return op_stats(path)

            yield recorded_op_stats

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(xprof_tools.CONVERTER_COST, "op_stats", (512 << 20) // profile.stat().st_size)
        patch.setattr(xprof_tools, "MIN_SLICE_BYTES", 1 << 10)
        patch.setattr(raw_to_tool_data, "xspace_to_tool_data", recorded)
        patch.setattr(op_stats_apart, "op_stats_process", recorded_process)
        analysis = analyze_profile([profile], memory_ceiling_bytes=resident_memory() + PROCESS_GROWTH + (460 << 20))
    return analysis, conversions, overviews


@pytest.fixture(scope="module")
def sliced():
    """ondemand_mlp (a CPU training loop, 119 steps as XProf counts them; 30% of the file is metadata every slice
    carries) analysed in time slices (:func:`_analysed_in_slices`)."""
    analysis, conversions, _ = _analysed_in_slices("ondemand_mlp")
    return analysis, conversions


def _slices_of(conversions) -> int:
    (count,) = {len(paths) for tool, paths in conversions if tool == "op_profile"}
    return count


def test_where_the_raw_event_read_needs_the_whole_budget_the_slices_op_stats_are_built_first():
    """The slices' conversions queue only once the file is cut; the read, which could queue meanwhile, waits
    for them: they run on every core, it on one."""
    from mldiag.analysis import engine
    from mldiag.analysis.xprof import op_stats_apart
    from mldiag.analysis.xprof.budget import PROCESS_GROWTH, resident_memory

    profile = xplane("ondemand_mlp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "RAW_EVENTS_BASE", 1 << 40)  # more than the budget: the read runs alone
        analysis, steps = _slices_and_read(patch)
    assert analysis.metrics.steps > 0
    assert steps.count("op_stats of slices") >= 1
    assert steps.index("raw-event read") > max(at for at, step in enumerate(steps) if step == "process ends"), steps


def _slices_and_read(patch: pytest.MonkeyPatch, around_op_stats=lambda op_stats: op_stats):
    """ondemand_mlp analysed in time slices (:func:`_analysed_in_slices`) by up to two processes at once, and
    when each process and the raw-event read began and ended and each slice's conversion ended, in order;
    ``around_op_stats`` wraps each process's conversion of a slice."""
    from mldiag.analysis import engine
    from mldiag.analysis.xprof import op_stats_apart
    from mldiag.analysis.xprof.budget import PROCESS_GROWTH, resident_memory

    profile = xplane("ondemand_mlp")
    process, read_apart, steps = op_stats_apart.op_stats_process, engine.read_events_apart, []

    @contextlib.contextmanager
    def recorded_process():
        steps.append("process begins")
        with process() as op_stats:
            convert = around_op_stats(op_stats)

            def recorded_op_stats(path):
                converted = convert(path)
                steps.append("op_stats of slices")
                return converted

            yield recorded_op_stats
        steps.append("process ends")

    def recorded_read(xplane):
        steps.append("raw-event read")
        try:
            return read_apart(xplane)
        finally:
            steps.append("read ends")

    patch.setitem(xprof_tools.CONVERTER_COST, "op_stats", (512 << 20) // profile.stat().st_size)
    patch.setattr(xprof_tools, "MIN_SLICE_BYTES", 1 << 10)
    patch.setattr(xprof_tools, "usable_cores", lambda: 2)
    patch.setattr(op_stats_apart, "op_stats_process", recorded_process)
    patch.setattr(engine, "read_events_apart", recorded_read)
    analysis = analyze_profile([profile], memory_ceiling_bytes=resident_memory() + PROCESS_GROWTH + (460 << 20))
    return analysis, steps


@pytest.mark.parametrize("events_a_step", [0, 1 << 40])
def test_where_the_raw_event_read_fits_beside_one_process_it_runs_beside_the_first_if_it_is_the_longer_work(
        events_a_step):
    """Six slices for two processes: two processes converting slices (200 MiB each) and the read (200 MiB) do
    not fit in the 460 MiB budget together, one process and the read do. Where the profile has more events a
    step than READ_FIRST_EVENTS_PER_STEP (the read outlasts the tools' work on op_stats) the read begins with the
    first process's slices, and a second process starts only once the read has ended, to take the slices still
    waiting; where it has fewer, both processes go first."""
    from mldiag.analysis import engine

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(xprof_tools, "slicing_plan", lambda *planned, **by: (6, 2))
        patch.setattr(xprof_tools, "op_stats_cost", lambda largest_file_bytes: 200 * MIB)
        patch.setattr(engine, "raw_events_cost", lambda *counted: 200 * MIB)
        patch.setattr(xprof_tools, "READ_FIRST_EVENTS_PER_STEP", events_a_step)
        analysis, steps = _slices_and_read(patch)
    assert analysis.metrics.steps > 0
    assert steps.count("op_stats of slices") == _slices_of_analysis(analysis)
    if events_a_step:
        assert steps[:2] == ["process begins", "process begins"], steps
        assert steps.index("raw-event read") > steps.index("process ends"), steps
    else:
        assert steps.index("raw-event read") < steps.index("process ends"), steps
        assert steps[:steps.index("read ends")].count("process begins") == 1, steps  # never two beside the read


def test_where_the_processes_converting_slices_take_every_core_the_read_waits_for_the_first_to_end():
    """Both processes and the read fit in the budget together (10 MiB each), but the two processes take the two
    cores and the read is not the longer work (few events a step): it begins once one of them has no slice left
    and has ended, while the other converts its last slice (held here until the read begins, 30 s at most)."""
    import threading

    from mldiag.analysis import engine

    read_began, holding = threading.Event(), threading.Lock()
    held = []

    def slice_held_for_the_read(op_stats):
        def converted(path):
            if holding.acquire(blocking=False):  # the first slice: its process waits, the other takes the rest
                held.append(read_began.wait(timeout=30))
            return op_stats(path)

        return converted

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(xprof_tools, "slicing_plan", lambda *planned, **by: (6, 2))
        patch.setattr(xprof_tools, "op_stats_cost", lambda largest_file_bytes: 10 * MIB)
        patch.setattr(engine, "raw_events_cost", lambda *counted: 10 * MIB)
        patch.setattr(xprof_tools, "READ_FIRST_EVENTS_PER_STEP", 1 << 40)
        read = engine.read_events_apart
        patch.setattr(engine, "read_events_apart", lambda xplane: (read_began.set(), read(xplane))[1])
        analysis, steps = _slices_and_read(patch, around_op_stats=slice_held_for_the_read)
    assert analysis.metrics.steps > 0
    assert held == [True], "the read waited for both processes"
    assert steps.count("process begins") == 2, steps
    assert steps.index("process ends") < steps.index("raw-event read") < len(steps) - 1 - steps[::-1].index(
        "process ends"), steps


def _slices_of_analysis(analysis) -> int:
    note = {tool.name: tool.note for tool in analysis.tools}["get_kpi_metrics"]
    return int(note.removeprefix("from XProf's op_stats of ").split()[0])


def test_op_stats_too_large_for_the_ceiling_is_built_from_time_slices_and_every_tool_runs(sliced):
    analysis, conversions = sliced
    tools = {tool.name: tool for tool in analysis.tools}
    count = _slices_of(conversions)
    assert count >= 2
    for name in OP_STATS_TOOLS | {"get_smart_suggestions"}:
        assert tools[name].status in (ToolStatus.OK, ToolStatus.NO_DATA), (name, tools[name].reason)
        assert tools[name].note.startswith(f"from XProf's op_stats of {count} time slices"), tools[name].note
    # Each slice converted on its own, in a process of its own, then never the whole file.
    assert not any(tool == "op_profile" and len(paths) == 1 for tool, paths in conversions)
    alone = [paths for tool, paths in conversions if tool == "op_stats apart"]
    assert len(alone) == count and all(".slice-" in paths[0].name for paths in alone)
    assert not any(path.name == xplane("ondemand_mlp").name for tool, paths in conversions
                   if tool in xprof_tools.OP_STATS_CONVERTERS for path in paths if ".op-stats-slices" in str(path))


def test_the_tools_built_from_slices_say_what_the_whole_file_says_but_for_the_steps_beside_each_cut(
        sliced, analysis_of):
    analysis, conversions = sliced
    cuts = _slices_of(conversions) - 1
    whole = {tool.name: tool.data for tool in analysis_of("ondemand_mlp").tools}
    merged = {tool.name: tool.data for tool in analysis.tools}
    steps, merged_steps = whole["get_step_trace"]["summary"], merged["get_step_trace"]["summary"]
    assert steps["total_steps"] - 2 * cuts <= merged_steps["total_steps"] <= steps["total_steps"]
    assert merged_steps["step_time_ms_average"] == pytest.approx(steps["step_time_ms_average"], rel=0.05)
    assert merged["get_kpi_metrics"] == whole["get_kpi_metrics"]
    assert merged["get_hlo_op_profile"] == whole["get_hlo_op_profile"]
    assert analysis.metrics.steps == analysis_of("ondemand_mlp").metrics.steps  # the evidence reads every event


def test_smart_suggestions_reads_no_event_again_where_the_raw_events_show_it_would_find_none(sliced):
    _, conversions = sliced
    (paths,) = [paths for tool, paths in conversions if tool == "smart_suggestion"]
    assert [path.parent.name for path in paths] == ["ondemand_mlp.without-events"]


@pytest.mark.parametrize("name", ["ondemand_mlp", "unfused_small_ops"])
def test_the_overview_from_slices_reads_no_event_again_and_says_what_it_says_from_every_slice(name):
    """unfused_small_ops, ops dispatched one by one, is not a training profile: the overview's inference latency
    would read every slice again, for a table no tool reads."""
    analysis, conversions, overviews = _analysed_in_slices(name)
    (paths,) = [paths for tool, paths in conversions if tool == "overview_page"]
    assert [path.parent.name for path in paths] == [f"{name}.without-events"]
    ((without_events, from_every_slice),) = overviews
    assert without_events == from_every_slice
    assert {tool.name: tool.status for tool in analysis.tools}["get_xprof_overview"] is ToolStatus.OK


@pytest.mark.parametrize("name", ["input_bound", "ondemand_mlp", "unfused_small_ops", "collectives"])
def test_without_events_xprofs_memory_profile_of_a_profile_without_allocator_events_is_the_same(tmp_path, name,
                                                                                                analysis_of):
    from xprof.convert import raw_to_tool_data

    from mldiag.analysis.profile.slices import without_events

    assert analysis_of(name).hosts[0].memory_allocator_events == 0
    profile = xplane(name)
    without_events(profile, tmp_path / profile.name)
    assert (tmp_path / profile.name).stat().st_size < profile.stat().st_size
    whole, _ = raw_to_tool_data.xspace_to_tool_data([str(profile)], "memory_profile", {})
    light, _ = raw_to_tool_data.xspace_to_tool_data([str(tmp_path / profile.name)], "memory_profile", {})
    assert light == whole and b'"numHosts":1' in whole


def test_a_profile_with_allocator_events_has_its_memory_profile_read_from_the_whole_file(tmp_path):
    from xprof.convert import raw_to_tool_data

    from mldiag.analysis.profile.slices import without_events

    profile = xplane("mi300x_gemm")
    without_events(profile, tmp_path / profile.name)
    whole, _ = raw_to_tool_data.xspace_to_tool_data([str(profile)], "memory_profile", {})
    light, _ = raw_to_tool_data.xspace_to_tool_data([str(tmp_path / profile.name)], "memory_profile", {})
    assert b"GPU_0_bfc" in whole and light != whole  # why the copies are given only where there are none


def test_a_file_past_the_protobuf_limit_is_converted_in_slices_under_it():
    profile = xplane("ondemand_mlp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(xprof_tools, "PROTOBUF_LIMIT", profile.stat().st_size // 3)
        patch.setattr(xprof_tools, "MIN_SLICE_BYTES", 1 << 10)
        analysis = analyze_profile([profile])
    tools = {tool.name: tool for tool in analysis.tools}
    for name in OP_STATS_TOOLS:
        assert tools[name].status in (ToolStatus.OK, ToolStatus.NO_DATA), (name, tools[name].reason)
        assert "(the file is past protobuf's 2 GiB limit)" in tools[name].note, tools[name].note


def test_how_many_slices_the_budget_and_the_protobuf_limit_ask_for_and_how_many_processes_convert_them(
        monkeypatch):
    from mldiag.analysis.xprof.budget import MemoryBudget

    monkeypatch.setattr(xprof_tools, "usable_cores", lambda: 2)
    monkeypatch.setattr(xprof_tools, "PLANNED_PROCESS_COST", 64 * MIB)
    monkeypatch.setitem(xprof_tools.CONVERTER_COST, "op_stats", 10)
    plan = xprof_tools.slicing_plan
    assert plan(1, 100 * MIB, MemoryBudget(1000 * MIB)) == (1, 1)  # the whole conversion fits
    assert plan(3, 100 * MIB, MemoryBudget(1000 * MIB)) == (1, 1)
    # 2 processes at once, each 64 MiB and 10x its slice, whose events are up to 1.25x an equal share.
    assert plan(1, 100 * MIB, MemoryBudget(500 * MIB)) == (7, 2)  # 2 x 10 x 1.25 x 100 MiB in 372 MiB
    assert plan(1, 100 * MIB, MemoryBudget(500 * MIB), shared_bytes=10 * MIB) == (14, 2)  # 90 MiB in 172 MiB
    assert plan(1, 100 * MIB, MemoryBudget(500 * MIB), shared_bytes=25 * MIB) == (6, 1)  # no room for two
    assert plan(1, 100 * MIB, MemoryBudget(500 * MIB), shared_bytes=50 * MIB) == (0, 0)  # the metadata fills it
    assert plan(2, 100 * MIB, MemoryBudget(500 * MIB)) == (0, 0)  # several hosts are never cut
    monkeypatch.setattr(xprof_tools, "PROTOBUF_LIMIT", 30 * MIB)
    assert plan(1, 100 * MIB, MemoryBudget(10_000 * MIB), shared_bytes=5 * MIB) == (4, 2)  # 95 MiB in 25 MiB
    monkeypatch.setattr(xprof_tools, "MIN_SLICE_BYTES", 30 * MIB)
    assert plan(1, 100 * MIB, MemoryBudget(10_000 * MIB), shared_bytes=5 * MIB) == (0, 0)  # too small to pay


def test_the_processes_at_once_are_the_cores_within_the_containers_cpu_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(xprof_tools, "conversion_threads", lambda: 8)
    cpu_max = tmp_path / "cpu.max"
    for written, cores in (("max 100000", 8), ("250000 100000", 3), ("50000 100000", 1), ("1600000 100000", 8)):
        cpu_max.write_text(written + "\n")
        assert xprof_tools.usable_cores(str(cpu_max)) == cores, written
    assert xprof_tools.usable_cores(str(tmp_path / "none")) == 8  # no cgroup v2 file: the cores it may run on


def test_a_conversion_of_op_stats_that_neither_fits_nor_can_be_cut_is_skipped_whoever_asks():
    from mldiag.analysis.engine import start_analysis

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(xprof_tools.CONVERTER_COST, "op_stats", 10_000)  # its metadata alone would fill the budget
        with start_analysis([xplane("input_bound")], memory_ceiling_bytes=1 << 30) as running:
            with pytest.raises(xprof_tools.Skipped, match="needs ~2.5 GiB, ceiling 1.0 GiB"):  # a follow-up's ask
                running.context.client.fetch(tool_name="kernel_stats", session_id=running.context.session_id)


def test_the_report_says_which_tools_were_built_from_time_slices(sliced, tmp_path):
    analysis, conversions = sliced
    write_reports(analysis, tmp_path)
    note = f"from XProf&#39;s op_stats of {_slices_of(conversions)} time slices of the profile, merged"
    assert note in (tmp_path / "summary.html").read_text()
    assert '"note": "from XProf\'s op_stats of' in (tmp_path / "analysis.json").read_text()


@pytest.mark.parametrize("fixture", ["tpu_v5e/lm_train_bf16", "tpu_v5e/worker_process_loader", "ondemand_mlp"])
def test_a_process_converting_a_slice_holds_no_more_than_it_reserves(tmp_path, fixture):
    """Measured: the child's own high-water mark (``ru_maxrss`` would carry this process's across exec) while
    XProf builds the op_stats of the larger of two slices (lm_train_bf16's is the most by the byte of those
    measured: 45 MiB of interpreter and XProf, and 23x its slice), on the allocator the children preload."""
    import subprocess
    import sys

    from mldiag.analysis.profile.slices import slice_by_time
    from mldiag.analysis.xprof.op_stats_apart import child_environment, op_stats_cost

    largest = max(slice_by_time(xplane(fixture), 2, tmp_path).paths, key=lambda path: path.stat().st_size)
    alone = tmp_path / "alone" / largest.name
    alone.parent.mkdir()
    largest.rename(alone)
    peak = subprocess.run(
        [sys.executable, "-c", "import sys; from xprof.convert import raw_to_tool_data; "
         "raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], 'op_profile', {'use_saved_result': True}); "
         "print(next(int(line.split()[1]) * 1024 for line in open('/proc/self/status') if line.startswith('VmHWM')))",
         str(alone)],
        capture_output=True, text=True, timeout=120, check=True, env=child_environment(),
    )
    assert (alone.parent / "ALL_HOSTS.op_stats_v2.pb").is_file()
    assert int(peak.stdout) <= op_stats_cost(alone.stat().st_size)
