"""The engine's guarantees: a tool that breaks never breaks the analysis, and the memory budget holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from analysis_support import xplane

from mldiag.analysis import MANAGED_TOOLS, analyze_profile
from mldiag.analysis.engine import raw_events_cost, start_analysis
from mldiag.analysis.evidence import ToolStatus
from mldiag.analysis.profile.slices import slice_by_time
from mldiag.analysis.report import render_summary
from mldiag.analysis.xprof import hlo, xprof_tools
from mldiag.analysis.xprof.budget import PROCESS_GROWTH, MemoryBudget, OverBudget, default_ceiling
from mldiag.domain.sizes import parse_size

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs


def test_a_failing_tool_is_recorded_and_the_analysis_goes_on(monkeypatch, tmp_path):
    def broken(context):
        raise RuntimeError("converter crashed")

    monkeypatch.setitem(xprof_tools.TOOLS, "get_roofline_model", broken)
    messages = []
    analysis = analyze_profile([xplane("input_bound")], tmp_path / "scratch", progress=messages.append)
    roofline = next(t for t in analysis.tools if t.name == "get_roofline_model")
    assert roofline.status is ToolStatus.ERROR and roofline.reason == "RuntimeError: converter crashed"
    assert [t.name for t in analysis.tools] == list(MANAGED_TOOLS)
    assert analysis.findings and analysis.findings[0].category.value == "input_bound"
    assert any(m.startswith("get_roofline_model: error") for m in messages)
    assert list((tmp_path / "scratch").iterdir()) == []  # the private copy is gone


def test_a_failing_kernel_detector_is_recorded_and_only_its_findings_are_lost(monkeypatch, tmp_path):
    def broken(module):
        raise RuntimeError("<mask> evaluator crashed")

    monkeypatch.setitem(hlo._MODULE_DETECTORS, "computed_per_kept", broken)
    analysis = analyze_profile([xplane("cpu/diag_of_full_product")], tmp_path / "scratch")
    assert analysis.missing_evidence  # one entry a program
    for what, why in analysis.missing_evidence.items():
        assert what.startswith("kernel detector computed_per_kept in jit_")
        assert why == "RuntimeError: <mask> evaluator crashed"
    assert not analysis.subsampled_results  # the one finding that reads it
    assert analysis.kernels and analysis.roofline  # every other use of the kernels' HLO remains
    page = render_summary(analysis)
    assert 'id="missing-evidence"' in page and "&lt;mask&gt; evaluator crashed" in page


def test_a_session_of_two_hosts_reads_each_and_runs_the_tools_on_both(tmp_path):
    session = tmp_path / "logdir" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    for host, fixture in (("host-a", "input_bound"), ("host-b", "compute_bound")):
        shutil.copy(xplane(fixture), session / f"{host}.xplane.pb")
    analysis = analyze_profile(sorted(session.glob("*.xplane.pb")), tmp_path / "scratch")
    assert [host.host for host in analysis.hosts] == ["host-a", "host-b"]
    assert analysis.hosts[0].busy_fraction < analysis.hosts[1].busy_fraction
    tools = {tool.name: tool for tool in analysis.tools}
    assert tools["get_hosts"].data == {"hosts": [{"hostname": "host-a"}, {"hostname": "host-b"}]}
    assert tools["get_xprof_overview"].status is ToolStatus.OK
    assert analysis.findings[0].category.value == "input_bound"


def test_reservations_wait_while_the_budget_is_spent():
    budget = MemoryBudget(100)
    inside, overlap = [], []

    def hold(nbytes):
        with budget.reserve(nbytes):
            inside.append(nbytes)
            overlap.append(len(inside))
            time.sleep(0.05)
            inside.remove(nbytes)

    threads = [threading.Thread(target=hold, args=(60,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(overlap) == 1


@pytest.mark.parametrize("limit, held, granted_while_held, granted", [
    # 10 of 100 would fit beside the 50 held, but it was asked after the large one: it waits its turn.
    (100, 50, [], [80, 10]),
    # 10 of 160 is a sixteenth of the budget: it does not queue, so it goes ahead of the large one waiting.
    (160, 100, [10], [10, 80]),
])
def test_large_reservations_are_granted_in_the_order_asked_and_small_ones_as_soon_as_they_fit(
        limit, held, granted_while_held, granted):
    budget = MemoryBudget(limit)
    seen, large_queued = [], threading.Event()

    def reserve(nbytes, queued=None):
        with budget.reserve(nbytes, queued=queued):
            seen.append(nbytes)

    with budget.reserve(held):
        large = threading.Thread(target=reserve, args=(80, large_queued.set))
        large.start()
        assert large_queued.wait(1)
        small = threading.Thread(target=reserve, args=(10,))
        small.start()
        small.join(1 if granted_while_held else 0.05)  # a granted one ends at once
        assert seen == granted_while_held
    large.join(1)
    small.join(1)
    assert seen == granted


def test_a_view_of_one_hlo_module_reserves_for_that_module_not_for_the_profile(monkeypatch, tmp_path):
    from xprof.convert import raw_to_tool_data

    profile = xplane("input_bound")
    dumped = tmp_path / "dumped"
    dumped.mkdir()
    shutil.copy(profile, dumped)
    raw_to_tool_data.xspace_to_tool_names([str(dumped / profile.name)])
    module_bytes = {p.stat().st_size for p in dumped.glob("*.hlo_proto.pb")}
    asked = []
    reservation = xprof_tools._reservation

    def recorded(state, converter, module):
        asked.append((converter, reservation(state, converter, module)))
        return asked[-1][1]

    monkeypatch.setattr(xprof_tools, "_reservation", recorded)
    monkeypatch.setattr(xprof_tools, "HLO_VIEW_FLOOR", 0)
    analyze_profile([profile], tmp_path / "scratch")
    views = [nbytes for converter, nbytes in asked if converter in ("graph_viewer", "memory_viewer")]
    assert len(views) >= 2 * len(module_bytes) > 0  # the text of each module, and its memory view
    per_module = {xprof_tools.HLO_VIEW_COST * size for size in module_bytes}
    assert per_module <= set(views)
    # The one call that names no module (XProf's memory viewer asks for a list first) counts as light.
    assert set(views) <= per_module | {xprof_tools.LIGHT_COST * profile.stat().st_size}


def test_a_step_the_analysis_needs_runs_alone_when_larger_than_the_budget():
    budget = MemoryBudget(100)
    entered = threading.Event()

    def big():
        with budget.reserve_all_needed(1000):
            entered.set()

    with budget.reserve(10):
        thread = threading.Thread(target=big)
        thread.start()
        assert not entered.wait(0.05)
    assert entered.wait(1)
    thread.join()


def test_an_optional_step_larger_than_the_budget_is_refused_with_what_it_needs():
    with pytest.raises(OverBudget, match=r"smart suggestions needs ~1.0 GiB, ceiling 0.10 GiB"):
        MemoryBudget(100 << 20).reserve(1000 << 20, "smart suggestions")


def test_the_ceiling_comes_from_the_setting_else_from_what_is_available(monkeypatch):
    monkeypatch.setattr("mldiag.analysis.xprof.budget.available_memory", lambda: 10 << 30)
    monkeypatch.setattr("mldiag.analysis.xprof.budget._cgroup_limit", lambda: None)
    assert default_ceiling({}) == 8 << 30
    monkeypatch.setattr("mldiag.analysis.xprof.budget._cgroup_limit", lambda: 4 << 30)  # a function of 4 GiB
    assert default_ceiling({}) == int(3.2 * (1 << 30))
    assert default_ceiling({"MLDIAG_ANALYSIS_MEMORY_CEILING": "1.5GiB"}) == 3 << 29


def test_the_budget_is_the_ceiling_less_what_the_analysing_process_holds_and_will_grow_by(monkeypatch):
    monkeypatch.setattr("mldiag.analysis.xprof.budget.resident_memory", lambda: 300 << 20)
    budget = MemoryBudget.under_ceiling(2 << 30)
    assert (budget.ceiling, budget.limit) == (2 << 30, (2 << 30) - (300 << 20) - PROCESS_GROWTH)


def test_the_budget_is_measured_again_from_what_the_process_holds_whenever_no_step_holds_any(monkeypatch):
    held = {"now": 100 << 20}
    monkeypatch.setattr("mldiag.analysis.xprof.budget.resident_memory", lambda: held["now"])
    budget = MemoryBudget.under_ceiling(1 << 30)
    held["now"] = 700 << 20  # conversions left memory in use behind
    with budget.reserve(100 << 20, "a conversion"):
        assert budget.limit == (1 << 30) - (700 << 20)
        held["now"] = 50 << 20  # while a step holds memory, what the process holds is no measure
        with budget.reserve(10 << 20, "a view"):
            assert budget.limit == (1 << 30) - (700 << 20)
    with pytest.raises(OverBudget, match="needs ~0.4 GiB, ceiling 1.0 GiB"):
        held["now"] = 800 << 20
        with budget.reserve(400 << 20, "smart suggestions"):
            pass
    with budget.reserve_all_needed(400 << 20):  # a step the analysis needs runs alone, in what is left
        assert budget.limit == (1 << 30) - (800 << 20)
    held["now"] = 10 << 20
    with budget.reserve(10 << 20, "a view"):  # never less than what the process will hold
        assert budget.limit == (1 << 30) - (100 << 20) - PROCESS_GROWTH


@pytest.mark.parametrize("text, size", [("8GiB", 8 << 30), ("512MiB", 512 << 20), ("8G", 8 << 30),
                                        ("1.5 GB", 3 << 29), ("4096", 4096), ("64k", 64 << 10)])
def test_memory_sizes_read_in_binary_units(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "8 gigs", "GiB", "-1GiB", "0", "8iB"])
def test_what_is_not_a_memory_size_is_refused_in_one_line(text):
    with pytest.raises(ValueError, match="memory size"):
        parse_size(text)


def test_an_analysis_started_and_left_unfinished_leaves_nothing_behind(tmp_path):
    with start_analysis([xplane("input_bound")], tmp_path / "scratch"):
        pass
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_failure_between_start_and_finish_ends_the_analysis_and_leaves_nothing_behind(tmp_path):
    with pytest.raises(RuntimeError, match="the caller's own failure"), \
            start_analysis([xplane("input_bound")], tmp_path / "scratch"):
        raise RuntimeError("the caller's own failure")
    assert list((tmp_path / "scratch").iterdir()) == []


@pytest.mark.parametrize("module, not_loaded", [
    # What starting the conversions needs loads nothing of the rest, which then loads beside them.
    ("mldiag.analysis.engine", ("pydantic", "mldiag.analysis.rules.analyst", "mldiag.domain.resources")),
    # The raw-event reader's process loads no pydantic: its evidence is plain dataclasses.
    ("mldiag.analysis.loop.raw_events", ("pydantic", "mldiag.domain.resources", "mldiag.analysis.evidence")),
])
def test_a_module_on_the_way_to_the_conversions_loads_only_what_they_need(module, not_loaded):
    shown = subprocess.run(
        [sys.executable, "-c", f"import sys, {module}; print([m for m in {not_loaded!r} if m in sys.modules])"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert shown.stdout.strip() == "[]"


# The raw-event read's peak resident memory on scripts/bench_analysis.py's profiles: (events, file bytes, peak).
MEASURED_READS = {
    "large_op_by_op": (1_934_240, 44_355_926, 227_952 << 10),
    "large": (787_389, 44_073_782, 162_164 << 10),
    "scaled_300mb": (5_511_723, 307_238_478, 759_344 << 10),
}


@pytest.mark.parametrize("events, file_bytes, peak", MEASURED_READS.values(), ids=MEASURED_READS)
def test_the_raw_event_read_reserves_its_measured_peak_and_not_much_more(events, file_bytes, peak):
    # Reserving much more keeps it from running beside a conversion where both would fit.
    assert peak <= raw_events_cost(events, file_bytes) <= 1.2 * peak


def test_a_raw_event_read_whose_events_are_not_counted_reserves_by_its_size():
    assert raw_events_cost(0, 10 << 20) == 284 << 20


def _read_peak(path: Path, timeline: Path) -> int:
    """The peak resident memory of a process that reads ``path``'s raw events. (The kernel's high-water mark of
    the process's own memory: ``ru_maxrss`` would carry this process's across exec.)"""
    peak = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from mldiag.analysis.loop.raw_events import read_host_evidence; "
         "read_host_evidence(Path(sys.argv[1]), Path(sys.argv[2])); "
         "print(next(int(line.split()[1]) * 1024 for line in open('/proc/self/status') if line.startswith('VmHWM')))",
         str(path), str(timeline)],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return int(peak.stdout)


@pytest.mark.parametrize("fixture", ["tpu_v5e/worker_process_loader", "tpu_v5e/eager_optimizer", "input_bound"])
def test_a_small_files_raw_event_read_holds_no_more_than_it_reserves(tmp_path, fixture):
    """Measured: a file converted whole has its events uncounted, and its read costs an interpreter, numpy and, on
    a host of many Python threads, the attribution's sweep over them."""
    path = xplane(fixture)
    assert _read_peak(path, tmp_path / "timeline.npz") <= raw_events_cost(0, path.stat().st_size)


@pytest.mark.parametrize("fixture", ["tpu_v5e/worker_process_loader", "tpu_v5e/eager_optimizer"])
def test_a_sliced_files_raw_event_read_holds_no_more_than_what_cutting_it_counted_reserves(tmp_path, fixture):
    """Measured: a host whose threads' Python the attribution cuts into a few pieces an event (a loader thread
    that does not step), reserved by the events cutting the file into slices counted, before any is read."""
    path = xplane(fixture)
    sliced = slice_by_time(path, 2, tmp_path)
    assert sliced.host_thread_events > 0
    reserved = raw_events_cost(sliced.events, path.stat().st_size, sliced.host_thread_events)
    assert _read_peak(path, tmp_path / "timeline.npz") <= reserved
