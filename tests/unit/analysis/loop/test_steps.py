"""Steps, the whole loop, per-device figures and names, on traces built event by event.

Each trace is a few lines of events (name, start ns, end ns); the reader's
signals are computed from them exactly as from a profile file.
"""

from __future__ import annotations

import numpy as np
import pytest
from evidence_support import MS, TraceBuild, analysis_of, jit_calls

from mldiag.analysis.host_evidence import DeviceKind, StepSource
from mldiag.analysis.loop.raw_events import _parents
from mldiag.domain import FindingCategory, HealthStatus, Priority


def test_events_that_overlap_without_nesting_are_siblings():
    # A Python-tracer event [0, 10) ends a microsecond into the step marker [9, 20), which holds [12, 15).
    assert _parents(np.array([0, 1, 9, 12]), np.array([10, 8, 20, 15])).tolist() == [-1, 0, -1, 2]
    # An instant event at the moment its neighbour closes is not inside it.
    assert _parents(np.array([0, 10]), np.array([10, 10])).tolist() == [-1, -1]


def test_a_marker_overlapped_by_a_python_tracer_event_still_names_the_work_inside_the_step(tmp_path):
    events, lane = [], []
    for i in range(4):
        start = i * 50 * MS
        events += [("$profiler.py:385 __init__", start - 20_000, start + 1_000),
                   ("train", start, start + 40 * MS), ("data_loading", start + MS, start + 30 * MS),
                   *jit_calls("step", [start + 31 * MS], 2 * MS)]
        lane.append(("fusion", start + 32 * MS, start + 40 * MS))
    host = TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.step_source is StepSource.STEP_MARKERS and host.steps == 4
    assert host.host_activities[0].name == "data_loading"
    assert host.host_activities[0].ms_per_step == pytest.approx(29, rel=0.01)


def test_each_call_is_one_dispatch_and_the_programs_period_is_the_step(tmp_path):
    starts = [i * 10 * MS for i in range(10)]
    lane = [("fusion", s + MS, s + 9 * MS) for s in starts]  # busy 8 of every 10 ms
    host = TraceBuild().host(jit_calls("step", starts, MS)).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.step_source is StepSource.PROGRAM_RUNS and host.step_marker == "PjitFunction(step)"
    assert host.steps == 10 and host.dispatches_per_step == 1.0 and host.launches == 10
    assert host.step_ms.mean == pytest.approx(10) and host.series.step_ms[-1] == pytest.approx(9)
    assert host.busy_fraction == pytest.approx(0.8, abs=0.03)
    assert [(p.name, p.calls) for p in host.programs] == [("PjitFunction(step)", 10)]


def test_the_last_run_which_ends_with_its_device_work_is_not_in_the_busy_fraction(tmp_path):
    # Busy 1 of every 10 ms; the last run's window ends with its kernel, so it alone would read busy 100 %.
    starts = [i * 10 * MS for i in range(5)]
    lane = [("fusion", s + MS, s + 2 * MS) for s in starts]
    host = TraceBuild(DeviceKind.GPU).host(jit_calls("step", starts, MS)).lane("/device:GPU:0", lane).evidence(tmp_path)
    assert host.step_ms.mean == pytest.approx(10)
    assert host.busy_fraction == pytest.approx(0.1, abs=0.001)
    assert host.idle_ms_per_step == pytest.approx(9, abs=0.01)


def test_cpu_devices_sharing_threads_are_each_in_collectives_for_their_own_threads_time(tmp_path):
    # Two CPU devices, each running its program on a thread of its own; a pool thread lends a hand with pieces
    # of the collectives at other moments. Per device, collectives take 6 of each 10 ms step, not the union's 8.
    starts = [i * 10 * MS for i in range(5)]
    build = TraceBuild().host(jit_calls("step", starts, MS))
    build.trace.cpu_devices = {0, 1}
    for thread, (begin, end) in (("client-0", (2, 8)), ("client-1", (3, 9))):
        build.lane("/host:CPU", [event for s in starts for event in (
            ("fusion", s + MS, s + begin * MS), ("all-reduce.1", s + begin * MS, s + end * MS))], thread)
    build.lane("/host:CPU", [("all-reduce.1", s + 9 * MS, s + 10 * MS) for s in starts], "pool")
    host = build.evidence(tmp_path)
    assert host.communication_ms_per_step == pytest.approx(6, abs=0.01)
    assert analysis_of(host).health.communication_fraction == pytest.approx(0.6, abs=0.01)


def test_runs_launched_after_the_device_trace_stops_are_not_steps(tmp_path):
    # Six launches; the GPU's kernel trace holds the first three runs (busy 2 of every 10 ms) and then stops.
    starts = [i * 10 * MS for i in range(6)]
    lane = [("fusion", s + MS, s + 3 * MS) for s in starts[:3]]
    host = TraceBuild(DeviceKind.GPU).host(jit_calls("step", starts, MS)).lane("/device:GPU:0", lane).evidence(tmp_path)
    assert host.step_source is StepSource.PROGRAM_RUNS and host.steps == 3
    assert host.step_ms.mean == pytest.approx(10)
    assert host.busy_fraction == pytest.approx(0.2, abs=0.001)
    assert host.top_ops[0].self_ms_per_step == pytest.approx(2)


def test_one_off_programs_do_not_hide_the_program_called_every_step(tmp_path):
    starts = [(i + 1) * 10 * MS for i in range(8)]
    events = jit_calls("_normal", [0], MS) + jit_calls("step", starts, MS)
    lane = [("fusion", s + MS, s + 9 * MS) for s in starts]
    host = TraceBuild().host(events).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.step_source is StepSource.PROGRAM_RUNS and host.steps == 8 and host.distinct_programs == 2


def test_programs_called_op_by_op_make_no_steps_but_per_program_figures(tmp_path):
    # matmul, add, matmul, sin, ...: a repeated sequence, but one that runs matmul twice apart: code run op by op.
    starts = [i * MS for i in range(12)]
    names = ("matmul", "add", "matmul", "sin")
    events = [event for i, s in enumerate(starts) for event in jit_calls(names[i % 4], [s], 200_000)]
    lane = [("kernel", s + 300_000, s + 400_000) for s in starts]  # the device idles 90 % between launches
    host = TraceBuild(DeviceKind.GPU).host(events).lane("/device:GPU:0", lane).evidence(tmp_path)
    assert host.step_source is StepSource.PROFILE_WINDOW and host.steps == 1 and not host.iteration_programs
    assert {(p.name, p.calls) for p in host.programs} == {
        ("PjitFunction(add)", 3), ("PjitFunction(matmul)", 6), ("PjitFunction(sin)", 3)}
    assert host.launches == 12 and host.distinct_programs == 3
    assert host.launch_idle_fraction == pytest.approx(0.9, abs=0.01)
    analysis = analysis_of(host)
    assert analysis.metrics.steps == 0 and analysis.metrics.step_time_ms is None
    (no_steps,) = [f for f in analysis.findings if f.title.startswith("No training steps")]
    assert no_steps.title == "No training steps: 3 programs, called 3 to 6 times"
    assert not [f for f in analysis.findings if f.title.startswith("Outlier")]
    assert analysis.summary.startswith("No training steps on 1 host")


def test_each_device_is_measured_in_its_own_step_windows(tmp_path):
    build = TraceBuild(DeviceKind.GPU)
    build.device_steps("/device:GPU:4", [("0", 0, 20 * MS)]).lane("/device:GPU:4", [("k", 0, 15 * MS)])
    build.device_steps("/device:GPU:6", [("0", 100 * MS, 120 * MS)]).lane("/device:GPU:6", [("k", 100 * MS, 110 * MS)])
    host = build.evidence(tmp_path)
    assert host.step_source is StepSource.DEVICE_STEPS and host.devices == 2
    assert host.busy_fraction == pytest.approx((0.75 + 0.5) / 2)
    assert host.busy_by_device == {"/device:GPU:4": 0.75, "/device:GPU:6": 0.5}


def test_host_work_between_annotated_steps_makes_the_loop_host_bound(tmp_path):
    events, lane = [], []
    for i in range(6):
        start = i * 100 * MS
        events += [("train", start, start + 40 * MS), *jit_calls("step", [start + MS], MS),
                   ("$time sleep", start + 41 * MS, start + 99 * MS)]
        lane.append(("fusion", start + 2 * MS, start + 40 * MS))
    host = TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.busy_fraction == pytest.approx(0.95, abs=0.01)  # inside the steps the device is busy
    assert host.gap_ms_per_step == pytest.approx(60)
    # 38 ms of each 100 ms from a step to the next, over the loop from the first step's start to the last one's end
    assert host.loop_busy_fraction == pytest.approx(6 * 38 / 540)
    assert [(a.name, round(a.ms_per_step)) for a in host.between_steps] == [("$time sleep", 58)]
    analysis = analysis_of(host)
    assert analysis.status is HealthStatus.NEEDS_ATTENTION and not analysis.health.optimal
    (finding,) = [f for f in analysis.findings if f.category is FindingCategory.INPUT_BOUND]
    assert finding.priority is Priority.P0 and "iteration" in finding.title
    assert any('"$time sleep"' in line for line in finding.evidence)


def test_untraced_host_time_between_calls_is_host_bound_and_said_to_be_untraced(tmp_path):
    starts = [i * 100 * MS for i in range(8)]  # each call: 1 ms dispatch, 30 ms compute, then nothing traced
    lane = [("fusion", s + MS, s + 31 * MS) for s in starts]
    host = TraceBuild().host(jit_calls("step", starts, MS)).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.untraced_host_ms_per_step == pytest.approx(69 * 7 / 8, rel=0.02)
    (finding,) = [f for f in analysis_of(host).findings if f.category is FindingCategory.INPUT_BOUND]
    assert finding.priority is Priority.P0
    assert any(line.startswith("untraced host time while the devices idle") for line in finding.evidence)


def test_a_scope_around_the_dispatches_is_not_host_work(tmp_path):
    starts = [i * 10 * MS for i in range(5)]
    events = [event for s in starts for event in (
        ("$bench.py:20 run_ops", s, s + 4 * MS),
        *(event for k, name in enumerate(("add", "mul", "sin")) for event in jit_calls(name, [s + (k + 1) * MS], MS)))]
    # The loop runs from the first launch to the devices' last work: a last kernel keeps the last scope inside it.
    lane = [("kernel", s + 2 * MS, s + 3 * MS) for s in starts] + [("kernel", 50 * MS, 51 * MS)]
    host = TraceBuild(DeviceKind.GPU).host(events).lane("/device:GPU:0", lane).evidence(tmp_path)
    run_ops = host.host_activities[0]
    assert run_ops.name == "$bench.py:20 run_ops" and run_ops.encloses_dispatches
    # Of its 4 ms, 3 go to its dispatches, and the devices are busy for one of the other two.
    assert run_ops.self_ms_per_step == pytest.approx(run_ops.ms_per_step / 4, rel=0.01)
    # The devices idle most of the loop with nothing traced: that may be a finding, but never one on the scope.
    quoted = [line for f in analysis_of(host).findings for line in f.evidence if "run_ops" in line]
    assert quoted and all("not counted as host work" in line for line in quoted)


def test_a_function_around_the_dispatches_whose_time_is_mostly_its_own_is_host_work(tmp_path):
    starts = [i * 10 * MS for i in range(5)]
    events = [event for s in starts for event in (
        ("train", s, s + 10 * MS), ("$bench.py:20 run_ops", s, s + 9 * MS), ("$bench.py:9 make_inputs", s, s + 7 * MS),
        *jit_calls("add", [s + 8 * MS], MS))]
    lane = [("kernel", s + 8 * MS, s + 9 * MS) for s in starts]
    host = TraceBuild(DeviceKind.GPU).host(events, markers=("train",)).lane("/device:GPU:0", lane).evidence(tmp_path)
    run_ops = host.host_activities[0]
    assert run_ops.self_ms_per_step == pytest.approx(8.0, rel=0.01)
    assert [(owner.name, owner.ms_per_step) for owner in run_ops.owners] == [
        ("$bench.py:9 make_inputs", pytest.approx(7.0, rel=0.01)), ("$bench.py:20 run_ops", pytest.approx(1.0, rel=0.01))]
    finding = next(f for f in analysis_of(host).findings if f.category is FindingCategory.INPUT_BOUND)
    assert finding.priority is Priority.P0 and "makes its input" in finding.title
    assert any('"$bench.py:9 make_inputs"' in line for line in finding.evidence)


def test_communication_is_per_device_not_summed_over_devices_and_streams(tmp_path):
    build = TraceBuild(DeviceKind.TPU)
    markers = [("train", i * 10 * MS, (i + 1) * 10 * MS) for i in range(4)]
    build.host(markers, markers=("train",))
    for device in range(8):
        collectives = [(name, i * 10 * MS + 2 * MS, i * 10 * MS + 7 * MS)
                       for i in range(4) for name in ("all_gather.3", "psum_invariant.7")]
        build.lane(f"/device:TPU:{device}", collectives, "XLA Ops")
        build.lane(f"/device:TPU:{device}", [("Rendezvous", i * 10 * MS + 7 * MS, i * 10 * MS + 8 * MS)
                                              for i in range(4)], "Async XLA Ops")
    host = build.evidence(tmp_path)
    assert host.communication_ms_per_step == pytest.approx(6.0)
    analysis = analysis_of(host)
    assert analysis.health.communication_fraction == pytest.approx(0.6)
    (finding,) = [f for f in analysis.findings if f.category is FindingCategory.COMMUNICATION]
    assert finding.title == "Communication takes 60% of each step"


def test_op_time_on_the_xla_cpu_client_is_per_device(tmp_path):
    markers = [("train", i * 10 * MS, (i + 1) * 10 * MS) for i in range(2)]
    lane = [(f"[{device}] CommonPjRtLoadedExecutable::Execute (jit_f)", i * 10 * MS, i * 10 * MS + 8 * MS)
            for i in range(2) for device in range(4)]
    ops = [("dot.1", i * 10 * MS, i * 10 * MS + 4 * MS) for i in range(2)]
    build = TraceBuild().host(markers, markers=("train",)).lane("/host:CPU", lane, "tf_XLACpu")
    build.trace.cpu_devices = {0, 1, 2, 3}
    for thread in range(4):  # each device's dot on a thread of its own
        build.lane("/host:CPU", ops, f"tf_XLAEigen/{thread}")
    host = build.evidence(tmp_path)
    assert host.devices == 4
    assert [(op.name, op.self_ms_per_step) for op in host.top_ops] == [("dot.1", pytest.approx(4.0))]


def test_kernels_named_with_double_colons_are_ops_and_keep_their_whole_name(tmp_path):
    kernel = "void ck_tile::kentry<ck_tile::gfx950_t, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipeline>>"
    starts = [i * 10 * MS for i in range(4)]
    lane = [event for s in starts
            for event in ((kernel, s + MS, s + 6 * MS), ("gemm_fusion.kd", s + 6 * MS, s + 8 * MS))]
    host = TraceBuild(DeviceKind.GPU).host(jit_calls("loss_fn", starts, MS)).lane("/device:GPU:0", lane).evidence(tmp_path)
    assert [op.name for op in host.top_ops] == [kernel, "gemm_fusion.kd"]


def test_every_fraction_is_within_zero_and_one_and_optimal_agrees_with_the_status(tmp_path):
    markers = [("train", i * 10 * MS, (i + 1) * 10 * MS) for i in range(3)]
    lane = [("all-reduce", i * 10 * MS - MS, (i + 1) * 10 * MS + MS) for i in range(3)]  # spills past each step
    host = TraceBuild(DeviceKind.GPU).host(markers, markers=("train",)).lane("/device:GPU:0", lane).evidence(tmp_path)
    analysis = analysis_of(host)
    fractions = [analysis.metrics.busy_fraction, *(value for key, value in analysis.health.model_dump().items()
                                                   if key.endswith("_fraction") and value is not None)]
    assert all(0.0 <= value <= 1.0 for value in fractions)
    assert analysis.health.compute_fraction + analysis.health.idle_fraction == pytest.approx(1.0)
    assert analysis.health.optimal is (analysis.status is HealthStatus.OPTIMAL)
    assert not analysis.health.optimal
    assert any(reason.startswith("a finding needs attention") for reason in analysis.health.reasons)


def test_a_host_only_trace_without_markers_or_launches_is_one_window_with_no_device_figures(tmp_path):
    host = TraceBuild().host([("tf_data_iterator", 0, 5 * MS), ("Process", 6 * MS, 9 * MS)]).evidence(tmp_path)
    assert host.step_source is StepSource.PROFILE_WINDOW and host.steps == 1 and host.step_ms.mean == 9.0
    assert host.busy_fraction is None and host.loop_busy_fraction is None and host.series.busy_fraction == []
    assert host.untraced_host_ms_per_step == 0.0 and host.launches == 0 and host.programs == []
    analysis = analysis_of(host)
    assert analysis.metrics.busy_fraction is None and analysis.health.optimal is False
    (no_steps,) = [f for f in analysis.findings if f.title.startswith("No training steps")]
    assert no_steps.title == "No training steps found: times cover the whole capture"


def test_untraced_host_time_inside_annotated_steps_is_measured_too(tmp_path):
    events, lane = [], []
    for i in range(5):
        start = i * 10 * MS  # 5 ms of untraced host work, then the jit call and 4 ms of compute
        events += [("train", start, start + 10 * MS), *jit_calls("step", [start + 5 * MS], MS)]
        lane.append(("fusion", start + 6 * MS, start + 10 * MS))
    host = TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.untraced_host_ms_per_step == pytest.approx(5.0)


def test_host_work_that_goes_on_after_the_loop_counts_only_its_time_in_the_loop(tmp_path):
    starts = [0, 10 * MS, 20 * MS]
    events = [*jit_calls("step", starts, MS), ("$train.py:9 save", 21 * MS, 60 * MS)]
    lane = [("kernel", s + MS, s + 3 * MS) for s in starts]
    host = TraceBuild(DeviceKind.GPU).host(events).lane("/device:GPU:0", lane).evidence(tmp_path)
    save = next(activity for activity in host.host_activities if activity.name == "$train.py:9 save")
    assert save.ms_per_step == pytest.approx(2 / 3, rel=0.01)  # 21-23 ms: the loop ends with the last step's work
    assert all(0 <= activity.share_of_step <= 1 for activity in host.host_activities)



def _saving_loop(iterations: int, save_every: int, *, launch_after: bool = False) -> TraceBuild:
    """A TPU loop without markers: each iteration launches a 4 ms step, and every ``save_every``-th then saves for
    20 ms inside a ``with`` block; after the loop (with ``launch_after``, a launch the device trace does not hold
    and one more save) the profiler's ``with`` block stops the trace for 50 ms."""
    tick = MS // 10
    events, ops, steps, t = [], [], [], 0

    def save(at: int) -> int:
        events.extend([("$train.py:20 save_checkpoint", at, at + 20 * MS), ("$npyio.py:500 savez", at + MS, at + 19 * MS),
                       ("$contextlib.py:141 __exit__", at + 20 * MS, at + 20 * MS + tick),
                       ("$train.py:9 part", at + 20 * MS, at + 20 * MS + tick // 2)])
        return at + 20 * MS + tick

    for i in range(iterations):
        begin = t
        events += jit_calls("step", [t], MS)
        ops.append(("%fusion.1 = f32[8] fusion(...)", t + MS, t + 5 * MS))
        steps.append((str(i), steps[-1][2] if steps else t + MS, t + 5 * MS))
        t += 5 * MS
        if i % save_every == save_every - 1:
            t = save(t)
        events.append(("$train.py:40 iteration", begin, t))
    if launch_after:
        events += jit_calls("step", [t], MS)
        t = save(t + MS)
    events += [("$contextlib.py:141 __exit__", t, t + 50 * MS), ("$profiler.py:271 stop_trace", t, t + 50 * MS)]
    build = TraceBuild(DeviceKind.TPU).host(sorted(events, key=lambda event: (event[1], -event[2])))
    return build.lane("/device:TPU:0", ops, "XLA Ops").device_steps("/device:TPU:0", steps)


def test_the_host_work_after_the_last_run_that_repeats_the_loops_closes_the_last_step(tmp_path):
    # Six iterations, a save after the 3rd and the 6th: the last save follows the last run, so that only the
    # work after the last run that repeats the loop's (the save, not the profiler's stop) ends the loop.
    host = _saving_loop(6, 3).evidence(tmp_path)
    loop_ms = 6 * 5 + 2 * 20.1 - 1  # from the first run's start, a millisecond after the first launch
    assert host.step_source is StepSource.DEVICE_STEPS and host.steps == 6
    assert host.attribution.loop_ms == pytest.approx(loop_ms)
    assert host.step_ms.mean == pytest.approx(loop_ms / 6)
    save = next(part for part in host.attribution.parts if part.name == "$train.py:20 save_checkpoint")
    assert save.ms == pytest.approx(40) and save.share == pytest.approx(40 / loop_ms)
    assert host.slow_steps is not None and host.slow_steps.steps == 2


def test_a_launch_after_the_last_run_ends_the_loop_there(tmp_path):
    # After the last run and its save the host launches again, a run the device trace does not hold, and saves
    # once more: the loop ends with the save before that launch.
    host = _saving_loop(6, 3, launch_after=True).evidence(tmp_path)
    assert host.attribution.loop_ms == pytest.approx(6 * 5 + 2 * 20.1 - 1)


def test_a_programs_device_work_is_that_of_its_own_events_when_dispatch_runs_ahead(tmp_path):
    # Each step's program runs 8 of every 10 ms; the eager add is launched while the step still runs, and its
    # op runs for 0.1 ms after the step's. From each launch to the next, the add would hold most of the work.
    starts = [i * 10 * MS for i in range(6)]
    events = [event for s in starts for event in (*jit_calls("step", [s], MS), *jit_calls("add", [s + 2 * MS], MS))]
    lane, programs = [], []
    for s in starts:
        lane += [("ThunkExecutor::Execute", s + MS // 2, s + 8 * MS), ("fusion", s + MS, s + 8 * MS),
                 ("wrapped_add", s + 8 * MS + 100_000, s + 8 * MS + 200_000)]
        programs += [None, "jit_step", "jit_add"]
    host = TraceBuild().host(events).lane("/host:CPU", lane, "tf_XLAEigen", programs).evidence(tmp_path)
    work = {p.name: p for p in host.programs}
    assert work["PjitFunction(step)"].device_ms_per_call == pytest.approx(7.5, abs=0.01)
    assert work["PjitFunction(add)"].device_ms_per_call == pytest.approx(0.1, abs=0.01)
    assert work["PjitFunction(step)"].share_of_device == pytest.approx(7.5 / 7.6, abs=0.001)
