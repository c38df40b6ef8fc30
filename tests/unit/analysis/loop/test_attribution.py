"""The attribution of the loop's wall time: on every committed profile, and on traces built event by event."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from analysis_support import PROFILES, xplane
from evidence_support import MS, TraceBuild, analysis_of, jit_calls

from mldiag.analysis.host_evidence import Attribution, HostEvidence, TimeCause
from mldiag.analysis.loop.attribution import (
    LOADER_THREAD,
    OTHER,
    TOP_PARTS,
    UNNAMED_THREAD,
    Device,
    Window,
    attribute,
    op_family,
)
from mldiag.analysis.loop.raw_events import _Line, _Union, read_host_evidence

EXPECTATIONS = PROFILES.parents[1] / "quality" / "expectations"
COMMITTED = sorted(str(path.relative_to(PROFILES)) for path in PROFILES.rglob("*.xplane.pb"))


@pytest.fixture(scope="module")
def evidence():
    read: dict[str, HostEvidence] = {}

    def of(name: str) -> HostEvidence:
        if name not in read:
            read[name] = read_host_evidence(xplane(name))
        return read[name]

    return of


def _share(attribution: Attribution, cause: TimeCause, name: str | None = None) -> float:
    return sum(p.share for p in attribution.parts if p.cause is cause and (name is None or name in p.name))


def _truth(fixture: str, key: str) -> dict:
    return yaml.safe_load((EXPECTATIONS / f"{fixture}.yaml").read_text())["truth"][key]


@pytest.mark.parametrize("path", COMMITTED)
def test_the_parts_sum_to_the_loop_on_every_committed_profile(path):
    attribution = read_host_evidence(PROFILES / path).attribution
    assert attribution is not None and attribution.loop_ms > 0
    assert sum(p.ms for p in attribution.parts) == pytest.approx(attribution.loop_ms, rel=0.02)
    assert all(0.0 <= p.share <= 1.0 and p.ms > 0 for p in attribution.parts)
    assert [p.ms for p in attribution.parts] == sorted((p.ms for p in attribution.parts), reverse=True)
    assert len(attribution.parts) <= TOP_PARTS + len(TimeCause)
    assert all(p.useful == (p.cause is TimeCause.DEVICE_COMPUTE) for p in attribution.parts)
    assert len({(p.cause, p.name, p.thread) for p in attribution.parts}) == len(attribution.parts)


def test_a_loader_between_steps_is_host_work_of_its_function(evidence):
    loader = _share(evidence("host_between_steps").attribution, TimeCause.HOST_WORK, "load_batch")
    truth = _truth("host_between_steps", "host_fraction")
    assert loader == pytest.approx(truth["value"], abs=truth["abs"])


def test_a_compute_bound_loop_is_device_compute(evidence):
    attribution = evidence("compute_bound").attribution
    assert _share(attribution, TimeCause.DEVICE_COMPUTE) > 0.95
    assert attribution.parts[0].cause is TimeCause.DEVICE_COMPUTE and attribution.parts[0].name == "matmul/convolution"


def test_compiling_in_every_step_is_compilation(evidence):
    attribution = evidence("recompiling").attribution
    assert _share(attribution, TimeCause.COMPILATION) > 0.5
    assert attribution.parts[0].cause is TimeCause.COMPILATION


def test_collectives_take_what_removing_them_saves(evidence):
    collectives = _share(evidence("collectives").attribution, TimeCause.COLLECTIVES)
    truth = _truth("collectives", "communication_fraction")
    assert collectives == pytest.approx(truth["value"], abs=truth["abs"])


def test_host_offloading_copies_on_a_tpu_are_transfers(evidence):
    attribution = evidence("tpu_v6e4_inference").attribution
    assert _share(attribution, TimeCause.TRANSFERS) > 0.9
    assert {p.name for p in attribution.parts if p.cause is TimeCause.TRANSFERS} >= {"host to device",
                                                                                      "device to host"}


def test_health_follows_the_attribution(evidence):
    for name in ("host_between_steps", "recompiling", "collectives"):
        host = evidence(name)
        health = analysis_of(host).health
        busy = _share(host.attribution, TimeCause.DEVICE_COMPUTE) + _share(host.attribution, TimeCause.COLLECTIVES)
        assert health.compute_fraction == pytest.approx(busy, abs=1e-9)
        # Compilation: at least its attributed time; a recompiling step's cost besides (tracing, its first run).
        recompiling = host.recompile_cost.share_of_loop if host.recompile_cost else 0.0
        assert health.compile_fraction == pytest.approx(max(_share(host.attribution, TimeCause.COMPILATION),
                                                            recompiling), abs=1e-9)
        assert health.communication_fraction == pytest.approx(_share(host.attribution, TimeCause.COLLECTIVES),
                                                              abs=1e-9)


@pytest.mark.parametrize(("name", "family"), [
    ("dot.1", "matmul/convolution"), ("ynn_fusion.7", "matmul/convolution"),
    ("Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1", "matmul/convolution"),
    ("convolution.3 convolution fusion", "matmul/convolution"), ("FmhaBwdKernel ck_tile", "attention"),
    ("input_reduce_fusion.kd", "reduce"), ("wrapped_reduce-window", "reduce"),
    ("loop_convert_fusion.kd", "copy/convert"), ("copy_bitcast_fusion", "copy/convert"),
    ("input_transpose_fusion", "copy/convert"), ("scatter_custom_fusion", "gather/scatter"),
    ("copy_gather_fusion", "gather/scatter"), ("multiply_subtract_fusion.3", "elementwise"),
    ("fusion.12 loop fusion", "elementwise"), ("custom-call.1", "other ops"),
])
def test_op_families_read_cpu_gpu_and_tpu_names(name, family):
    assert op_family(name) == family


# --- the sweep, on traces built event by event ------------------------------------------------------


def _line(name: str, events: list[tuple[str, int, int]], names: list[str]) -> _Line:
    ids = [names.index(event) if event in names else names.append(event) or len(names) - 1 for event, _, _ in events]
    return _Line(name, np.array([s for _, s, _ in events], dtype=np.int64),
                 np.array([e for _, _, e in events], dtype=np.int64), np.array(ids, dtype=np.int64))


def _device(lanes: list[_Line]) -> Device:
    return Device(lanes, _Union(np.concatenate([lane.starts for lane in lanes]),
                                np.concatenate([lane.ends for lane in lanes])))


def _attribute(names: list[str], loop: tuple[int, int], lanes: list[list[_Line]], stepping: _Line | None = None,
               others: list[_Line] = (), markers: set[int] = frozenset(),
               launches_callbacks: set[str] = frozenset(),
               launches_read_back: set[str] = frozenset()) -> dict[tuple[TimeCause, str, str], float]:
    attribution = attribute(names=names, windows=[Window(loop, [_device(d) for d in lanes], np.array([loop[0]]))],
                            steps=1,
                            busy_name=np.ones(len(names), dtype=bool), runtime_name=np.zeros(len(names), dtype=bool),
                            hints={}, stepping=stepping, other_threads=list(others), markers=set(markers),
                            launches_callbacks=np.array([name in launches_callbacks for name in names], dtype=bool),
                            launches_read_back=np.array([name in launches_read_back for name in names], dtype=bool))
    assert sum(p.ms for p in attribution.parts) == pytest.approx(attribution.loop_ms, rel=1e-9)
    return {(p.cause, p.name, p.thread): round(p.ms, 6) for p in attribution.parts}


def test_lanes_running_at_once_split_the_instant_and_compute_beats_collectives():
    names: list[str] = []
    matmuls = _line("stream 1", [("dot.1", 0, 4 * MS)], names)
    elementwise = _line("stream 2", [("add.2", 2 * MS, 6 * MS), ("all-reduce.1", 6 * MS, 9 * MS)], names)
    collective = _line("stream 3", [("all-gather.3", 0, 8 * MS)], names)
    parts = _attribute(names, (0, 10 * MS), [[matmuls, elementwise, collective]])
    assert parts == {(TimeCause.DEVICE_COMPUTE, "matmul/convolution", ""): 3.0,  # alone 0-2, half of 2-4
                     (TimeCause.DEVICE_COMPUTE, "elementwise", ""): 3.0,  # half of 2-4, alone 4-6
                     (TimeCause.COLLECTIVES, "all-reduce", ""): 2.0, (TimeCause.COLLECTIVES, "all-gather", ""): 1.0,
                     (TimeCause.UNTRACED, "", ""): 1.0}


def test_a_host_callbacks_send_and_recv_are_the_device_waiting_on_the_host_not_collectives():
    names: list[str] = []
    ops = _line("XLA Ops", [
        ("%fusion.1 = bf16[4096,4096]{1,0} fusion(...)", 0, 2 * MS),
        ("%pure_callback.9 = token[] send-done(...), channel_id=1, is_host_transfer=true", 2 * MS, 3 * MS),
        ("%pure_callback.11 = (f32[], token[]) recv-done(...), channel_id=2, is_host_transfer=true", 3 * MS, 8 * MS),
        ("%all-reduce.1 = f32[8] all-reduce(...)", 8 * MS, 9 * MS)], names)
    parts = _attribute(names, (0, 10 * MS), [[ops]])
    assert parts == {(TimeCause.DEVICE_COMPUTE, "fusion", ""): 2.0,
                     (TimeCause.TRANSFERS, "host callback", ""): 6.0,
                     (TimeCause.COLLECTIVES, "all-reduce", ""): 1.0,
                     (TimeCause.UNTRACED, "", ""): 1.0}


def test_nested_events_give_their_time_to_the_innermost_owner_and_dispatch_and_compile_to_the_outer_call():
    names: list[str] = []
    host = _line("python", [
        ("$train.py:10 step", 0, 10 * MS),
        ("PjitFunction(step)", 1 * MS, 4 * MS), ("ExecuteHelper", 2 * MS, 3 * MS),  # dispatch throughout
        ("backend_compile", 4 * MS, 6 * MS), ("JitCompiler::Compile", 4 * MS, 5 * MS),  # compilation throughout
        ("$time sleep", 6 * MS, 8 * MS),  # a builtin the step's code calls itself: named by itself
        ("DevicePut", 8 * MS, 9 * MS),
    ], names)
    parts = _attribute(names, (0, 10 * MS), [], stepping=host)
    assert parts == {(TimeCause.HOST_WORK, "$train.py:10 step", "python"): 2.0,
                     (TimeCause.HOST_WORK, "$time sleep", "python"): 2.0,
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python"): 3.0,
                     (TimeCause.COMPILATION, "backend_compile", "python"): 2.0,
                     (TimeCause.TRANSFERS, "DevicePut", "python"): 1.0}


def test_a_frame_that_overlaps_the_step_marker_leaves_the_step_to_the_functions_inside_it():
    # The Python tracer's frame that builds the marker ends a moment after the marker's TraceMe begins: the two
    # overlap without nesting, and the function that encloses both keeps only its own time, not the step.
    names: list[str] = []
    host = _line("python", [
        ("$train.py:105 run", 0, 10 * MS), ("$profiler.py:385 __init__", MS // 2, 3 * MS // 2),
        ("train", MS, 10 * MS), ("$train.py:377 make_batch", 2 * MS, 9 * MS),
    ], names)
    parts = _attribute(names, (0, 10 * MS), [], stepping=host, markers={names.index("train")})
    assert parts == {(TimeCause.HOST_WORK, "$train.py:377 make_batch", "python"): 7.0,
                     (TimeCause.HOST_WORK, "$profiler.py:385 __init__", "python"): 1.0,
                     (TimeCause.HOST_WORK, "$train.py:105 run", "python"): 0.5,
                     (TimeCause.UNTRACED, "", "python"): 1.5}


def test_a_function_the_step_calls_owns_the_library_calls_it_makes():
    # The iteration launches the step and calls save_checkpoint, which spends its time in the zip writer: the time
    # is save_checkpoint's, the function a person wrote; a function beside the launches keeps only its own time.
    names: list[str] = []
    host = _line("python", [
        ("$train.py:40 iteration", 0, 10 * MS),
        ("PjitFunction(step)", 0, MS),
        ("$train.py:20 save_checkpoint", MS, 9 * MS),
        ("$npyio.py:500 savez", MS, 9 * MS), ("$zipfile.py:1153 write", 2 * MS, 8 * MS),
        ("$time sleep", 3 * MS, 4 * MS),
    ], names)
    parts = _attribute(names, (0, 10 * MS), [], stepping=host)
    assert parts == {(TimeCause.HOST_WORK, "$train.py:20 save_checkpoint", "python"): 8.0,
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python"): 1.0,
                     (TimeCause.HOST_WORK, "$train.py:40 iteration", "python"): 1.0}


def test_the_launches_each_read_back_before_the_next_are_one_part_with_the_threads_copies():
    names: list[str] = []
    host = _line("python", [("train", 0, 10 * MS), ("PjitFunction(update)", 0, 2 * MS),
                            ("np.asarray(jax.Array)", 2 * MS, 5 * MS), ("PjitFunction(update)", 5 * MS, 7 * MS),
                            ("np.asarray(jax.Array)", 7 * MS, 9 * MS), ("PjitFunction(other)", 9 * MS, 10 * MS)],
                 names)
    lane = _line("XLA Ops", [("fusion.1", 2 * MS, 3 * MS), ("fusion.1", 7 * MS, 8 * MS)], names)
    parts = _attribute(names, (0, 10 * MS), [[lane]], stepping=host, markers={names.index("train")},
                       launches_read_back={"PjitFunction(update)"})
    assert parts == {(TimeCause.TRANSFERS, "PjitFunction(update) + np.asarray(jax.Array)", "python"): 7.0,
                     (TimeCause.DISPATCH, "PjitFunction(other)", "python"): 1.0,
                     (TimeCause.DEVICE_COMPUTE, "fusion", ""): 2.0}


@pytest.mark.parametrize(("reads_per_step", "one_part"), [
    (4, True),  # a loop of launch and read: the launches' dispatch goes with the reads
    (2, False),  # a read or two a step: a sync per step, the dispatch a cause of its own
])
def test_a_python_loop_that_reads_each_launch_back_holds_its_dispatch_and_reads_in_one_part(
        tmp_path, reads_per_step, one_part):
    # Each 10 ms step launches update and reads its result back (float(change)), so many times; the rest is
    # untraced.
    starts = [i * 10 * MS for i in range(5)]
    events, ops = [], []
    for step in starts:
        events.append(("train", step, step + 10 * MS))
        for k in range(reads_per_step):
            at = step + 2 * k * MS
            events += [*jit_calls("update", [at], MS), ("np.asarray(jax.Array)", at + MS, at + 2 * MS)]
            ops.append(("dot.1", at + MS, at + MS + MS // 5))
    build = TraceBuild().host(events, markers=("train",))
    build.lane("/host:CPU", ops, "tf_XLACpu")
    attribution = build.evidence(tmp_path).attribution
    top = attribution.parts[0]
    reads_and_launches = reads_per_step * 1.8 / 10
    if one_part:
        assert (top.cause, top.name, top.thread) == (
            TimeCause.TRANSFERS, "PjitFunction(update) + np.asarray(jax.Array)", "python")
        assert top.share == pytest.approx(reads_and_launches, abs=0.01)
    else:
        assert _share(attribution, TimeCause.DISPATCH, "PjitFunction(update)") == pytest.approx(
            reads_per_step * 0.1, abs=0.01)


def test_a_save_owns_its_copy_off_the_device_and_a_call_that_mostly_copies_is_the_copy():
    # save_checkpoint copies the state off the device (device_get) and then writes it: the copy is part of the
    # save's cost. to_device only puts a batch on the device: its time is the transfer's.
    names: list[str] = []
    host = _line("python", [
        ("$train.py:40 iteration", 0, 20 * MS),
        ("PjitFunction(step)", 0, MS),
        ("$train.py:20 save_checkpoint", MS, 9 * MS),
        ("$api.py:2277 device_get", MS, 3 * MS), ("np.asarray(jax.Array)", MS, 3 * MS),
        ("$npyio.py:500 savez", 3 * MS, 9 * MS),
        ("$train.py:30 to_device", 10 * MS, 19 * MS), ("$numpy.py:10 ascontiguousarray", 10 * MS, 11 * MS),
        ("DevicePut", 11 * MS, 19 * MS),
    ], names)
    parts = _attribute(names, (0, 20 * MS), [], stepping=host)
    assert parts == {(TimeCause.HOST_WORK, "$train.py:20 save_checkpoint", "python"): 8.0,
                     (TimeCause.TRANSFERS, "DevicePut", "python"): 8.0,
                     (TimeCause.HOST_WORK, "$train.py:30 to_device", "python"): 1.0,
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python"): 1.0,
                     (TimeCause.HOST_WORK, "$train.py:40 iteration", "python"): 2.0}


def test_device_time_comes_first_and_the_host_takes_only_idle_instants():
    names: list[str] = []
    lane = _line("stream", [("dot", 2 * MS, 6 * MS)], names)
    host = _line("python", [("train", 0, 10 * MS), ("load", 0, 4 * MS)], names)
    parts = _attribute(names, (0, 10 * MS), [[lane]], stepping=host, markers={names.index("train")})
    assert parts == {(TimeCause.DEVICE_COMPUTE, "matmul/convolution", ""): 4.0,
                     (TimeCause.HOST_WORK, "load", "python"): 2.0, (TimeCause.UNTRACED, "", "python"): 4.0}


def test_a_wait_is_what_another_thread_did_meanwhile_else_waiting():
    names: list[str] = []
    host = _line("python", [("$train.py:3 loop", 0, 10 * MS), ("$queue.py:154 get", 0, 10 * MS),
                            ("$threading.py:295 wait", MS, 10 * MS)], names)
    loader = _line("", [("$data.py:5 read_file", 2 * MS, 6 * MS), ("Wait for work", 6 * MS, 10 * MS)], names)
    helper = _line("pool", [("decode", 4 * MS, 8 * MS)], names)
    parts = _attribute(names, (0, 10 * MS), [], stepping=host, others=[loader, helper])
    assert parts == {(TimeCause.HOST_WORK, "$data.py:5 read_file", UNNAMED_THREAD): 3.0,  # alone 2-4, half of 4-6
                     (TimeCause.HOST_WORK, "decode", "pool"): 3.0,  # half of 4-6, alone 6-8 (the loader waits)
                     (TimeCause.WAITING, "", "python"): 4.0}


def test_the_training_thread_needing_the_interpreter_while_another_thread_runs_python_waits_for_that_thread():
    # A tokenizer thread runs pure Python throughout. The training thread's own Python (0-2), its dispatch (2-5) and
    # its untraced instants (7-10, back from a call that let go of the interpreter) wait for the tokenizer; inside a
    # builtin (a sleep, 5-7) the training thread needs no interpreter, and its time stays its own.
    names: list[str] = []
    host = _line("python", [("$train.py:3 iteration", 0, 7 * MS), ("PjitFunction(step)", 2 * MS, 5 * MS),
                            ("$time sleep", 5 * MS, 7 * MS)], names)
    tokenizer = _line("", [("$data.py:9 tokenize_shard", 0, 10 * MS)], names)
    parts = _attribute(names, (0, 10 * MS), [], stepping=host, others=[tokenizer])
    assert parts == {(TimeCause.INTERPRETER, "$data.py:9 tokenize_shard", UNNAMED_THREAD): 8.0,
                     (TimeCause.HOST_WORK, "$time sleep", "python"): 2.0}


def test_another_thread_in_a_builtin_or_a_wait_holds_no_interpreter():
    # The loader's numpy call and its wait let go of the interpreter: the training thread's own Python is its own.
    names: list[str] = []
    host = _line("python", [("$train.py:3 iteration", 0, 10 * MS)], names)
    loader = _line("", [("$data.py:5 make_batch", 0, 6 * MS), ("$<unknown> standard_normal", 0, 6 * MS),
                        ("$threading.py:295 wait", 6 * MS, 10 * MS)], names)
    parts = _attribute(names, (0, 10 * MS), [], stepping=host, others=[loader])
    assert parts == {(TimeCause.HOST_WORK, "$train.py:3 iteration", "python"): 10.0}


def test_one_function_on_several_threads_other_than_the_training_thread_is_one_part_of_those_threads():
    names: list[str] = []
    host = _line("python", [("$train.py:3 loop", 0, 10 * MS), ("$queue.py:154 get", 0, 10 * MS)], names)
    readers = [_line(f"reader {n}", [("$data.py:5 read_batch", 0, 10 * MS)], names) for n in range(4)]
    parts = _attribute(names, (0, 10 * MS), [], stepping=host, others=readers)
    assert parts == {(TimeCause.HOST_WORK, "$data.py:5 read_batch", "reader 0, reader 1, reader 2 and 1 more"): 10.0}


def test_the_launch_of_a_program_that_calls_back_to_the_host_is_the_callbacks_time():
    names: list[str] = []
    host = _line("python", [("train", 0, 10 * MS), ("PjitFunction(step)", 0, 3 * MS),
                            ("PjitFunction(other)", 3 * MS, 4 * MS)], names)
    lane = _line("XLA Ops", [("%recv-done.1 = token[] recv-done(...), is_host_transfer=true", 5 * MS, 7 * MS),
                             ("fusion.2", 7 * MS, 10 * MS)], names)
    parts = _attribute(names, (0, 10 * MS), [[lane]], stepping=host, markers={names.index("train")},
                       launches_callbacks={"PjitFunction(step)"})
    assert parts == {(TimeCause.TRANSFERS, "host callback", ""): 5.0,
                     (TimeCause.DISPATCH, "PjitFunction(other)", "python"): 1.0,
                     (TimeCause.DEVICE_COMPUTE, "fusion", ""): 3.0,
                     (TimeCause.UNTRACED, "", "python"): 1.0}


def test_an_untraced_instant_is_the_transfer_another_thread_runs_then():
    """A blocking copy waits on the runtime's copy and relayout threads without an event of its own."""
    names: list[str] = []
    host = _line("python", [("train", 0, 10 * MS), ("np.asarray(jax.Array)", 0, 4 * MS)], names)
    runtime = _line("pjrt-tpu-tasks", [("Transpose::Execute", 2 * MS, 7 * MS)], names)
    pool = _line("pool", [("ScheduleWork", 7 * MS, 9 * MS)], names)  # not a transfer: explains nothing
    parts = _attribute(names, (0, 10 * MS), [], stepping=host, others=[runtime, pool], markers={0})
    assert parts == {(TimeCause.TRANSFERS, "np.asarray(jax.Array)", "python"): 4.0,  # its own call wins
                     (TimeCause.TRANSFERS, "Transpose::Execute", "pjrt-tpu-tasks"): 3.0,  # 4-7, the thread untraced
                     (TimeCause.UNTRACED, "", "python"): 3.0}


def test_several_devices_are_averaged_each_on_its_own_timeline():
    names: list[str] = []
    first = _line("GPU:0", [("dot", 0, 8 * MS)], names)
    second = _line("GPU:1", [("dot", 0, 2 * MS)], names)
    host = _line("python", [("$train.py:1 loop", 0, 10 * MS)], names)
    parts = _attribute(names, (0, 10 * MS), [[first], [second]], stepping=host)
    assert parts == {(TimeCause.DEVICE_COMPUTE, "matmul/convolution", ""): 5.0,
                     (TimeCause.HOST_WORK, "$train.py:1 loop", "python"): 5.0}


def test_the_parts_beyond_the_top_ones_are_summed_per_cause():
    names: list[str] = []
    host = _line("python", [(f"$f.py:{i} f{i}", i * MS, (i + 1) * MS) for i in range(TOP_PARTS + 5)], names)
    parts = _attribute(names, (0, (TOP_PARTS + 5) * MS), [], stepping=host)
    assert len(parts) == TOP_PARTS + 1 and parts[(TimeCause.HOST_WORK, OTHER, "")] == 5.0


def test_each_part_carries_the_distribution_of_its_share_of_each_step():
    # Four 10 ms steps: the device computes 6 ms of each, the host makes its batch in the other 4, and the last
    # step saves for 30 ms more. The save is 30 % of the loop but none of three steps and 75 % of the last.
    names: list[str] = []
    starts = [0, 10 * MS, 20 * MS, 30 * MS]
    lane = _line("stream", [("dot", s + 4 * MS, s + 10 * MS) for s in starts], names)
    host = _line("python", [event for s in starts for event in (("$train.py:3 make_batch", s, s + 4 * MS),)]
                 + [("$train.py:9 save", 40 * MS, 70 * MS)], names)
    window = Window((0, 70 * MS), [_device([lane])], np.array(starts))
    made = attribute(names=names, windows=[window], steps=4, busy_name=np.ones(len(names), dtype=bool),
                     runtime_name=np.zeros(len(names), dtype=bool), hints={}, stepping=host, other_threads=[],
                     markers=set())
    by_name = {part.name: part for part in made.parts}
    save, batch, dot = by_name["$train.py:9 save"], by_name["$train.py:3 make_batch"], by_name["matmul/convolution"]
    assert save.share == pytest.approx(30 / 70)
    assert (save.step_share.median, save.step_share.max, save.step_share.mean) == pytest.approx((0, 0.75, 0.75 / 4))
    assert (batch.step_share.min, batch.step_share.median, batch.step_share.max) == pytest.approx((0.1, 0.4, 0.4))
    assert (dot.step_share.min, dot.step_share.max) == pytest.approx((0.15, 0.6))
    assert sum(part.step_share.mean for part in made.parts) == pytest.approx(1.0)  # each step's shares make it whole


def test_busy_fractions_weigh_each_step_by_its_time(tmp_path):
    # Four 10 ms steps fully busy and one 60 ms step busy 6 ms: the mean of ratios would say 0.82, the time 0.46.
    starts = [0, 10, 20, 30, 40]
    lengths = [10, 10, 10, 10, 60]
    build = TraceBuild().host([("train", s * MS, (s + n) * MS) for s, n in zip(starts, lengths)], markers=("train",))
    build.lane("/host:CPU", [("fusion", s * MS, (s + min(n, 6 if n > 10 else n)) * MS)
                             for s, n in zip(starts, lengths)], "tf_XLACpu")
    host = build.evidence(tmp_path)
    assert host.busy_fraction == pytest.approx(46 / 100)
    assert host.series.busy_fraction == pytest.approx([1, 1, 1, 1, 0.1])
    assert host.busy_fraction + host.idle_ms_per_step / host.step_ms.mean == pytest.approx(1)
    assert _share(host.attribution, TimeCause.DEVICE_COMPUTE) == pytest.approx(0.46)
    assert analysis_of(host).health.compute_fraction == pytest.approx(0.46)


def test_a_dispatch_loop_without_markers_attributes_the_launches(tmp_path):
    starts = [i * 10 * MS for i in range(5)]
    build = TraceBuild().host(jit_calls("step", starts, 2 * MS))
    build.lane("/host:CPU", [("dot.1", s + 2 * MS, s + 7 * MS) for s in starts], "tf_XLACpu")
    attribution = build.evidence(tmp_path).attribution
    assert _share(attribution, TimeCause.DEVICE_COMPUTE) == pytest.approx(25 / 47)
    assert _share(attribution, TimeCause.DISPATCH, "PjitFunction(step)") == pytest.approx(10 / 47)


@pytest.mark.parametrize(("name", "loader", "other"), [
    ("", LOADER_THREAD, UNNAMED_THREAD),  # the tracer names some Python threads not at all
    ("python", "python: loader thread", "python 2"),  # and every Python tracer line "python"
])
def test_threads_the_trace_does_not_tell_apart_are_named_by_role(tmp_path, name, loader, other):
    # The training thread waits on queue.get while another thread reads the batch and puts it in the queue; a
    # third thread only logs. The trace names the last two alike.
    starts = [i * 10 * MS for i in range(4)]
    steps = [("train", s, s + 10 * MS) for s in starts]
    waits = [event for s in starts for event in (("$queue.py:154 get", s, s + 8 * MS),
                                                 ("$threading.py:295 wait", s + MS // 10, s + 8 * MS))]
    build = TraceBuild().host(steps + waits + jit_calls("step", [s + 8 * MS for s in starts], MS), markers=("train",))
    build.lane("/host:CPU", [("dot.1", s + 9 * MS, s + 10 * MS) for s in starts], "tf_XLACpu")
    build.host([event for s in starts for event in (("$data.py:7 read_batch", s, s + 8 * MS),
                                                    ("$queue.py:122 put", s + 8 * MS, s + 8 * MS + 1000))], thread=name)
    build.host([("$log.py:3 flush", s + 9 * MS, s + 10 * MS) for s in starts], thread=name)
    host = build.evidence(tmp_path)
    top = host.attribution.parts[0]
    assert (top.cause, top.name, top.thread) == (TimeCause.HOST_WORK, "$data.py:7 read_batch", loader)
    assert top.share == pytest.approx(0.8, abs=0.01)
    assert {a.thread for a in host.while_waiting} == {loader}
    assert [line.name for line in build.trace.host_lines] == ["python", loader, other]
    assert analysis_of(host).findings[0].title.endswith("the training thread waits on a slower loader thread")


def test_the_calls_the_step_makes_that_read_device_values_back_are_the_device_reads(tmp_path):
    # Each step makes its batch, launches the step and logs the loss with float(), which reads it back.
    starts = [i * 10 * MS for i in range(4)]
    events = [event for s in starts for event in (
        ("train", s, s + 10 * MS), ("$train.py:40 iteration", s, s + 10 * MS),
        ("$train.py:30 make_batch", s, s + 4 * MS),
        ("PjitFunction(step)", s + 4 * MS, s + 5 * MS),
        ("$train.py:20 log_loss", s + 5 * MS, s + 9 * MS), ("$array.py:298 __float__", s + 5 * MS, s + 9 * MS),
        ("np.asarray(jax.Array)", s + 5 * MS, s + 9 * MS))]
    build = TraceBuild().host(events, markers=("train",))
    build.lane("/host:CPU", [("dot.1", s + 5 * MS, s + 9 * MS) for s in starts], "tf_XLACpu")
    reads = build.evidence(tmp_path).device_reads
    assert [(r.name, r.count_per_step, r.ms_per_step) for r in reads] == [("$train.py:20 log_loss", 1.0, 4.0)]


def _copy_then_step(tmp_path, host_ms: int, copy_ms: int, compute_ms: int):
    """Steps of 10 ms: the training thread's own work for ``host_ms``, then the XLA CPU client copies the batch
    into a device buffer ("H2D Dispatch") for ``copy_ms`` and runs the step's dot for ``compute_ms``."""
    starts = [i * 10 * MS for i in range(5)]
    work = [("$train.py:9 make_batch", s, s + host_ms * MS) for s in starts] if host_ms else []
    build = TraceBuild().host([("train", s, s + 10 * MS) for s in starts] + work, markers=("train",))
    build.lane("/host:CPU", [event for s in starts for event in (
        ("H2D Dispatch", s + host_ms * MS, s + (host_ms + copy_ms) * MS),
        ("dot.1", s + (host_ms + copy_ms) * MS, s + (host_ms + copy_ms + compute_ms) * MS))], "tf_XLAPjRtCpuClient")
    host = build.evidence(tmp_path)
    return host, analysis_of(host)


def test_a_cpu_clients_copy_into_a_device_buffer_is_a_host_to_device_transfer(tmp_path):
    host, analysis = _copy_then_step(tmp_path, host_ms=0, copy_ms=8, compute_ms=2)
    assert _share(host.attribution, TimeCause.TRANSFERS, "host to device") == pytest.approx(0.8)
    assert analysis.health.compute_fraction == pytest.approx(0.2)
    top = analysis.findings[0]
    assert (top.priority, top.category) == ("P0", "data_movement") and "H2D Dispatch" in "\n".join(top.evidence)


def test_a_copy_that_is_most_of_a_waiting_devices_op_time_costs_the_loop_only_its_own_time(tmp_path):
    host, analysis = _copy_then_step(tmp_path, host_ms=8, copy_ms=1, compute_ms=1)
    assert _share(host.attribution, TimeCause.TRANSFERS, "host to device") == pytest.approx(0.1)
    assert [f.category for f in analysis.findings if f.priority in ("P0", "P1")] == ["input_bound"]


def test_a_gather_with_a_copy_fused_in_is_not_a_layout_copy(tmp_path):
    # XLA CPU names a fusion after its ops: "copy_gather_fusion" is an embedding's look-up with its ids' copy.
    starts = [i * 10 * MS for i in range(4)]
    build = TraceBuild().host([("train", s, s + 10 * MS) for s in starts], markers=("train",))
    build.lane("/host:CPU", [event for s in starts for event in (
        ("copy_gather_fusion", s, s + 8 * MS), ("bitcast_copy_fusion", s + 8 * MS, s + 9 * MS))], "tf_XLACpu")
    copies = build.evidence(tmp_path).op_families["copies"]
    assert (copies.ms_per_step, copies.examples) == (pytest.approx(1.0), ["bitcast_copy_fusion"])


# A 256 MiB f32 batch: JAX's device_put names it in the runtime call it makes; at the slowest host link (1 GB/s) its
# copy may take 268 ms.
BATCH = "PjRtCApiCompiler::BufferFromHostBuffer(f32[65536,1024])"
LANDED = "tpu::System::TransferToDevice=>IssueEvent=>Done"  # the TPU runtime's event when a copy has landed


def _landed(names: list[str], at_ms: float) -> _Line:
    return _line("EventFDAsyncWorker/1", [(LANDED, int((at_ms - 0.1) * MS), int(at_ms * MS))], names)


def test_an_untraced_wait_after_a_copy_to_the_device_is_the_copy_in_flight():
    """device_put returns before its copy lands; the training thread's wait for it has no event of its own, and the
    runtime's relayout meanwhile is that copy's work."""
    names: list[str] = []
    host = _line("python3", [("train", 0, 30 * MS), ("DevicePutWithSharding", MS, 2 * MS), (BATCH, MS, 2 * MS),
                             ("PjitFunction(step)", 28 * MS, 29 * MS)], names)
    relayout = _line("futex-default-SDomainT/1", [("Transpose::Execute", 2 * MS, 10 * MS)], names)
    lane = _line("XLA Ops", [("%fusion.1 = f32[] fusion(...)", 29 * MS, 30 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [[lane]], stepping=host, others=[relayout, _landed(names, 28)], markers={0})
    assert parts == {(TimeCause.TRANSFERS, "DevicePutWithSharding", "python3"): 27.0,  # the call, then 2-28
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python3"): 1.0,
                     (TimeCause.DEVICE_COMPUTE, "fusion", ""): 1.0,
                     (TimeCause.UNTRACED, "", "python3"): 1.0}


def test_a_copy_in_flight_lasts_no_longer_than_its_arrays_take_at_the_slowest_link():
    names: list[str] = []
    small = "PjRtCApiCompiler::BufferFromHostBuffer(bf16[1024,1024])"  # 2 MiB: 2.097152 ms from the call's start
    host = _line("python3", [("train", 0, 30 * MS), ("DevicePutWithSharding", MS, 2 * MS), (small, MS, 2 * MS),
                             ("PjitFunction(step)", 28 * MS, 29 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [], stepping=host, markers={0})
    assert parts[(TimeCause.TRANSFERS, "DevicePutWithSharding", "python3")] == pytest.approx(2.097152)
    assert parts[(TimeCause.UNTRACED, "", "python3")] == pytest.approx(30 - 2.097152 - 1)


def test_copies_that_name_no_shape_or_go_to_the_host_leave_the_wait_after_them_untraced():
    names: list[str] = []
    host = _line("python3", [("train", 0, 30 * MS), ("DevicePut", MS, 2 * MS),
                             ("np.asarray(jax.Array)", 10 * MS, 11 * MS), ("f32[65536,1024]", 10 * MS, 11 * MS),
                             ("PjitFunction(step)", 28 * MS, 29 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [], stepping=host, markers={0})
    assert parts == {(TimeCause.TRANSFERS, "DevicePut + np.asarray(jax.Array)", "python3"): 2.0,
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python3"): 1.0,
                     (TimeCause.UNTRACED, "", "python3"): 27.0}


def test_a_round_trip_is_one_part_of_the_thread_named_by_its_costliest_calls():
    """A device array copied to the host and back every step: the copy back waits in flight, and both directions
    are one cost of the training thread's."""
    names: list[str] = []
    host = _line("python3", [("train", 0, 30 * MS), ("np.asarray(jax.Array)", 0, 20 * MS),
                             ("DevicePutWithSharding", 20 * MS, 21 * MS), (BATCH, 20 * MS, 21 * MS),
                             ("PjitFunction(step)", 28 * MS, 29 * MS)], names)
    lane = _line("XLA Ops", [("%fusion.1 = f32[] fusion(...)", 29 * MS, 30 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [[lane]], stepping=host, markers={0})
    assert parts == {(TimeCause.TRANSFERS, "np.asarray(jax.Array) + DevicePutWithSharding", "python3"): 28.0,
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python3"): 1.0,
                     (TimeCause.DEVICE_COMPUTE, "fusion", ""): 1.0}


def test_a_wait_on_the_device_right_after_a_copy_to_it_is_the_copy_in_flight():
    """With the Python tracer on, the wait for the copy is a traced block_until_ready: the copy still holds it,
    the runtime's relayout meanwhile included; a wait on another thread's queue after it is not the copy's."""
    names: list[str] = []
    host = _line("python3", [("train", 0, 30 * MS), ("$api.py:2035 device_put", MS, 2 * MS), (BATCH, MS, 2 * MS),
                             ("$array.py:310 block_until_ready", 2 * MS, 20 * MS),
                             ("$queue.py:154 get", 20 * MS, 28 * MS), ("PjitFunction(step)", 28 * MS, 29 * MS)],
                 names)
    relayout = _line("futex-default-SDomainT/1", [("Transpose::Execute", 2 * MS, 10 * MS)], names)
    loader = _line("loader", [("$data.py:5 read_batch", 20 * MS, 24 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [], stepping=host, others=[relayout, _landed(names, 20), loader],
                       markers={0})
    assert parts == {(TimeCause.TRANSFERS, "$api.py:2035 device_put", "python3"): 19.0,
                     (TimeCause.HOST_WORK, "$data.py:5 read_batch", "loader"): 4.0,
                     (TimeCause.WAITING, "", "python3"): 4.0,
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python3"): 1.0,
                     (TimeCause.UNTRACED, "", "python3"): 2.0}


def test_a_copy_is_in_flight_through_the_step_s_dispatch_until_the_device_starts_its_next_program():
    """The step is launched on the copied batch without waiting for it: the device starts the program once the
    batch has landed, and the training thread's untraced wait for the step meanwhile is the copy; after the program
    starts, its untraced time is its own again."""
    names: list[str] = []
    host = _line("python3", [("train", 0, 30 * MS), ("DevicePutWithSharding", MS, 2 * MS), (BATCH, MS, 2 * MS),
                             ("PjitFunction(step)", 2 * MS, 3 * MS)], names)
    lane = _line("XLA Ops", [("%fusion.1 = f32[] fusion(...)", 20 * MS, 22 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [[lane]], stepping=host, markers={0})
    assert parts == {(TimeCause.TRANSFERS, "DevicePutWithSharding", "python3"): 18.0,  # the call, then 3-20
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python3"): 1.0,
                     (TimeCause.DEVICE_COMPUTE, "fusion", ""): 2.0,
                     (TimeCause.UNTRACED, "", "python3"): 9.0}  # 0-1, 22-30


def test_a_host_array_handed_to_a_jitted_function_is_copied_by_the_dispatch_and_in_flight_after_it():
    """A numpy batch passed straight to the step: the dispatch copies it (its DevicePut) and returns, and the
    training thread's untraced wait until the device starts the program is that copy."""
    names: list[str] = []
    host = _line("python3", [("train", 0, 30 * MS), ("PjitFunction(step)", MS, 3 * MS), ("DevicePut", MS, 2 * MS),
                             (BATCH, MS, 2 * MS)], names)
    lane = _line("XLA Ops", [("%fusion.1 = f32[] fusion(...)", 20 * MS, 22 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [[lane]], stepping=host, markers={0})
    assert parts == {(TimeCause.TRANSFERS, "DevicePut", "python3"): 18.0,  # the call, then 2-20 but the dispatch's
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python3"): 1.0,
                     (TimeCause.DEVICE_COMPUTE, "fusion", ""): 2.0,
                     (TimeCause.UNTRACED, "", "python3"): 9.0}  # 0-1, 22-30


def test_a_copy_the_thread_does_not_wait_for_leaves_its_untraced_work_untraced():
    """The next batch is copied ahead while the thread works, untraced, for longer than the copy takes: the copy
    landed long before the thread launched the step, so the thread was not waiting for it."""
    names: list[str] = []
    host = _line("python3", [("train", 0, 60 * MS), ("DevicePutWithSharding", MS, 2 * MS), (BATCH, MS, 2 * MS),
                             ("PjitFunction(step)", 58 * MS, 59 * MS)], names)
    relayout = _line("futex-default-SDomainT/1", [("Transpose::Execute", 2 * MS, 10 * MS)], names)
    parts = _attribute(names, (0, 60 * MS), [], stepping=host, others=[relayout, _landed(names, 28)], markers={0})
    assert parts == {(TimeCause.TRANSFERS, "DevicePutWithSharding", "python3"): 1.0,
                     (TimeCause.TRANSFERS, "Transpose::Execute", "futex-default-SDomainT/1"): 8.0,
                     (TimeCause.TRANSFERS, LANDED, "EventFDAsyncWorker/1"): 0.1,
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python3"): 1.0,
                     (TimeCause.UNTRACED, "", "python3"): 49.9}


def test_the_own_time_of_the_code_that_made_the_copy_while_it_waits_for_it_is_the_copy_in_flight():
    """With the Python tracer on, the wait for the copy (block_until_ready, which it does not record) is the own
    time of the function that called device_put, up to when the copy lands and the function goes on."""
    names: list[str] = []
    host = _line("python3", [("train", 0, 30 * MS), ("$train.py:63 to_device", 0, 29 * MS),
                             ("$api.py:2035 device_put", MS, 2 * MS), (BATCH, MS, 2 * MS),
                             ("$train.py:60 __exit__", 28 * MS, 29 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [], stepping=host, others=[_landed(names, 28)], markers={0})
    assert parts == {(TimeCause.TRANSFERS, "$api.py:2035 device_put", "python3"): 27.0,
                     (TimeCause.HOST_WORK, "$train.py:60 __exit__", "python3"): 1.0,
                     (TimeCause.HOST_WORK, "$train.py:63 to_device", "python3"): 1.0,
                     (TimeCause.UNTRACED, "", "python3"): 1.0}


def test_the_arrays_of_one_batch_copied_in_a_burst_are_in_flight_together():
    """device_put of a batch of two arrays, the large one first: the thread launches the step at once and waits,
    untraced, for it; the step starts when both have landed, the small one's call last."""
    names: list[str] = []
    host = _line("python3", [("train", 0, 30 * MS), ("DevicePutWithSharding", MS, 2 * MS), (BATCH, MS, 2 * MS),
                             ("DevicePutWithSharding", 2_100_000, 2_200_000),
                             ("PjRtCApiCompiler::BufferFromHostBuffer(s32[4096])", 2_100_000, 2_200_000),
                             ("PjitFunction(step)", 2_300_000, 2_600_000)], names)
    relayout = _line("futex-default-SDomainT/1", [("Transpose::Execute", 2_500_000, 10 * MS)], names)
    lane = _line("XLA Ops", [("%fusion.1 = f32[] fusion(...)", 28_200_000, 29 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [[lane]], stepping=host, others=[relayout, _landed(names, 28)],
                       markers={0})
    assert parts == {(TimeCause.TRANSFERS, "DevicePutWithSharding", "python3"): 26.7,  # calls 1.1, 2-2.1, 2.2-2.3,
                     (TimeCause.DISPATCH, "PjitFunction(step)", "python3"): 0.3,  # 2.6-28
                     (TimeCause.DEVICE_COMPUTE, "fusion", ""): 0.8,
                     (TimeCause.UNTRACED, "", "python3"): 2.2}  # 0-1, 28-28.2, 29-30


def test_the_short_untraced_gaps_between_back_to_back_copies_are_the_copies_time():
    # A loop of device_put calls: 60 us of Python between each 100 us call, then a long untraced pause.
    names: list[str] = []
    us = MS // 1000
    copies = [("DevicePut", i * 160 * us, i * 160 * us + 100 * us) for i in range(10)]
    host = _line("python3", [("train", 0, 30 * MS), *copies, ("PjitFunction(step)", 28 * MS, 29 * MS)], names)
    parts = _attribute(names, (0, 30 * MS), [], stepping=host, markers={0})
    # Ten calls (1.0 ms) and the nine gaps between them (0.54 ms); the pause before the launch stays untraced.
    assert parts[(TimeCause.TRANSFERS, "DevicePut", "python3")] == pytest.approx(1.54)
    assert parts[(TimeCause.UNTRACED, "", "python3")] == pytest.approx(30.0 - 1.54 - 1.0)


def _four_steps(tmp_path, waiting, other, thread: str) -> HostEvidence:
    """Four annotated 10 ms steps on a CPU, each a 1 ms launch and a 1 ms op, then ``waiting(start)``'s events on the
    training thread while another host thread (``thread``) runs ``other(start)``'s."""
    starts = [i * 10 * MS for i in range(4)]
    steps = [("train", s, s + 10 * MS) for s in starts]
    build = TraceBuild().host(steps + jit_calls("step", starts, MS) + [e for s in starts for e in waiting(s)],
                              markers=("train",))
    build.lane("/host:CPU", [("dot.1", s + MS, s + 2 * MS) for s in starts], "tf_XLACpu")
    return build.host([e for s in starts for e in other(s)], thread=thread).evidence(tmp_path)


def test_a_thread_that_only_takes_from_a_queue_is_named_a_consumer_and_the_training_thread_s_wait_is_its(tmp_path):
    # The training thread puts a record after each step into a full queue; a writer thread takes them, slowly.
    host = _four_steps(tmp_path, lambda s: [("$queue.py:122 put", s + 2 * MS, s + 10 * MS),
                                            ("$threading.py:295 wait", s + 2 * MS + 1000, s + 10 * MS)],
                       lambda s: [("$queue.py:154 get", s, s + 1000),
                                  ("$sink.py:7 send_record", s + 1000, s + 10 * MS)], "")
    top = host.attribution.parts[0]
    assert (top.cause, top.name, top.thread) == (TimeCause.HOST_WORK, "$sink.py:7 send_record",
                                                 "(unnamed consumer thread)")
    assert analysis_of(host).findings[0].title.endswith("waits to hand its output to a slower thread")


def test_a_thread_that_saves_is_named_a_saver_and_the_wait_for_it_is_a_checkpoint(tmp_path):
    # Every step hands the state to a new thread that saves it (np.savez's zip writer), then joins it at once.
    host = _four_steps(tmp_path, lambda s: [("$train.py:9 wait_until_finished", s + 2 * MS, s + 10 * MS),
                                            ("$threading.py:1090 join", s + 2 * MS + 1000, s + 10 * MS)],
                       lambda s: [("$train.py:5 save_in_background", s + 2 * MS, s + 10 * MS),
                                  ("$zipfile.py:1153 write", s + 3 * MS, s + 10 * MS)], "python")
    top = host.attribution.parts[0]
    assert (top.cause, top.name, top.thread) == (TimeCause.HOST_WORK, "$zipfile.py:1153 write", "python: saver thread")
    finding = analysis_of(host).findings[0]
    assert finding.title.endswith("while the training thread saves a checkpoint")
    assert "yet the training thread waits for it" in finding.fix
