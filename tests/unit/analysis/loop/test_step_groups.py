"""The warm-up, slow-step groups and iterations of several programs: on traces built event by event, on built
evidence, and on the fixtures made for them (scripts/make_profile_fixtures.py)."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_support import xplane
from evidence_support import MS, Events, TraceBuild, allocations, analysis_of, assessed, jit_calls

from mldiag.analysis.host_evidence import DeviceKind, Distribution, HostActivity, HostEvidence, StepSource
from mldiag.analysis.loop.raw_events import read_host_evidence
from mldiag.analysis.loop.step_groups import iteration_start, occasional, repeating_period, slow_split, whole_programs
from mldiag.domain import FindingCategory, HealthStatus, Priority


def _compiling_call(name: str, start: int, compile_ms: int, run_ms: int = 1) -> list[tuple[str, int, int]]:
    """A jit call whose dispatch compiles its program first (lowering, then the backend compile)."""
    end = start + (compile_ms + run_ms) * MS
    lowered = start + compile_ms * MS // 4
    return [(f"PjitFunction({name})", start, end), ("lower_sharding_computation", start + 1, lowered),
            ("backend_compile_and_load", lowered, start + compile_ms * MS)]


# --- the rules, alone --------------------------------------------------------------------------------------


def test_slow_iterations_are_a_group_clearly_above_the_median():
    normal = [10.0, 11.0, 9.5, 10.5, 10.2, 9.8, 10.1, 10.4]
    assert slow_split(np.array(normal) * MS) is None  # noise is no group
    durations = np.array([*normal[:4], 60.0, *normal[4:], 58.0]) * MS
    assert np.flatnonzero(slow_split(durations)).tolist() == [4, 9]
    assert slow_split(np.array([10.0, 10.0, 10.0, 60.0]) * MS) is None  # too few to tell
    # Sub-millisecond jitter on sub-millisecond steps is not a slow group, whatever its ratio.
    assert slow_split(np.array([0.1, 0.12, 0.1, 0.4, 0.11, 0.1]) * MS) is None


def test_the_repeated_sequence_of_programs_is_found_and_starts_with_the_micro_batches():
    train_eval = np.array([1, 2] * 6)
    assert repeating_period(train_eval) == 2 and iteration_start(train_eval[:2]) == 0
    # A capture that starts inside an iteration: grad, grad, apply, grad, grad, grad, grad, apply, ...
    accumulation = np.array([5, 5, 9] + [5, 5, 5, 5, 9] * 4)
    period = repeating_period(accumulation)
    assert period == 5 and accumulation[iteration_start(accumulation[:period])] == 5
    cycle = np.roll(accumulation[:period], -iteration_start(accumulation[:period]))
    assert cycle.tolist() == [5, 5, 5, 5, 9] and whole_programs(cycle)
    assert repeating_period(np.array([7] * 12)) is None
    assert not whole_programs(np.array([1, 2, 1, 3]))  # op by op: one program in two places
    # Three launches of one program, then a hundred of another: no sequence (each period must recur three times).
    assert repeating_period(np.array([3, 3, 3] + [4] * 100)) is None


def test_programs_run_now_and_then_for_little_device_work_are_occasional():
    # Ten steps, then four copies of the parameters for a save: the copies hold 2 % of the device time.
    saving = np.array(([1] * 10 + [2] * 4) * 3)
    assert occasional(saving, {1: 98.0, 2: 2.0}) == {2}
    assert occasional(saving, {1: 80.0, 2: 20.0}) == set()  # an eval of a fifth of the device time is not
    # Micro-batches then their apply, however cheap, are the iteration.
    assert occasional(np.array([5, 5, 5, 5, 9] * 4), {5: 99.0, 9: 1.0}) == set()
    # A train step and a cheap eval each iteration: launched as often as the main program.
    assert occasional(np.array([1, 2] * 6), {1: 99.0, 2: 1.0}) == set()
    # A benchmark's inputs made op by op between its calls are no loop of whole programs.
    assert occasional(np.array([1, 2, 1, 2, 3, 3, 3] * 6), {1: 2.0, 2: 4.0, 3: 94.0}) == set()
    assert occasional(saving, {}) == set()  # no device work recorded: no share to judge by


# --- warm-up and recompilation --------------------------------------------------------------------------


def _program_runs(first_compiles: dict[int, tuple[str, int]], steps: int = 10, step_ms: int = 10,
                  name: str = "step") -> TraceBuild:
    """Runs of one program every ``step_ms``; the run of each step in ``first_compiles`` compiles (a function's
    call, with its compile time) before it runs."""
    events, lane, start = [], [], 0
    for step in range(steps):
        if step in first_compiles:
            function, compile_ms = first_compiles[step]
            events += _compiling_call(name, start, compile_ms) if function == name else [
                *_compiling_call(function, start, compile_ms), *jit_calls(name, [start + compile_ms * MS + 1], MS)]
            start += compile_ms * MS
        else:
            events += jit_calls(name, [start], MS)
        lane.append(("fusion", start + MS, start + (step_ms - 1) * MS))
        start += step_ms * MS
    return TraceBuild().host(events).lane("/host:CPU", lane)


def test_a_first_call_compiling_in_the_first_step_is_warm_up_not_recompilation(tmp_path):
    host = _program_runs({0: ("step", 300)}).evidence(tmp_path)
    assert host.step_source is StepSource.PROGRAM_RUNS and host.steps == 10
    assert host.warmup.steps == 1 and host.warmup.compiles == 1
    assert host.warmup.ms == pytest.approx(310) and host.warmup.compile_ms == pytest.approx(300, abs=0.01)
    assert host.warmup.steady_step_ms.median == pytest.approx(10)
    assert host.recompiles_in_steps == 0 and host.recompile_ms_per_step == 0
    analysis = analysis_of(host)
    assert not [f for f in analysis.findings if f.category is FindingCategory.RECOMPILATION]
    assert analysis.metrics.step_time_ms == pytest.approx(10)  # the steady state, not the 39 ms mean
    assert analysis.health.compile_fraction == 0
    (warmup,) = [f for f in analysis.findings if f.title.startswith("Warm-up")]
    assert warmup.priority is Priority.P2
    assert warmup.title == "Warm-up: the first 1 step took 310.0 ms, 1 first compilations"
    assert "after a warm-up of 1 step that took 310.0 ms" in analysis.summary
    assert not [f for f in analysis.findings if f.title.startswith("Slow steps")]


def test_a_function_compiled_again_with_new_shapes_is_a_recompilation(tmp_path):
    host = _program_runs({0: ("step", 300), 4: ("step", 300), 7: ("step", 300)}).evidence(tmp_path)
    assert host.warmup.steps == 1
    assert host.recompiles_in_steps == 2 and host.recompile_ms_per_step == pytest.approx(60, abs=0.01)
    (finding,) = [f for f in analysis_of(host).findings if f.category is FindingCategory.RECOMPILATION]
    assert finding.priority is Priority.P0
    assert finding.evidence[0].startswith("2 XLA recompilations inside 10 profiled steps (besides a warm-up of 1 step")


def test_one_function_compiling_for_two_call_sites_in_the_first_step_is_warm_up(tmp_path):
    # jnp.ones and jnp.zeros of new shapes in step 0 both compile broadcast_in_dim, then the step compiles.
    events, lane = [], []
    for i in range(8):
        start = i * 100 * MS
        events.append(("train", start, start + 100 * MS))
        if i == 0:
            events += [*_compiling_call("broadcast_in_dim", start + MS, 20),
                       *_compiling_call("broadcast_in_dim", start + 30 * MS, 20),
                       *_compiling_call("step", start + 60 * MS, 30)]
        else:
            events += jit_calls("step", [start + MS], MS)
        lane.append(("fusion", start + 2 * MS, start + 99 * MS))
    host = TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.warmup.steps == 1 and host.warmup.compiles == 3 and host.recompiles_in_steps == 0
    assert not [f for f in analysis_of(host).findings if f.category is FindingCategory.RECOMPILATION]


def test_a_first_compilation_after_the_warm_up_counts_as_recompiling(tmp_path):
    # The loop's own program warms up in step 0; an evaluation function compiles for its first call in step 6.
    host = _program_runs({0: ("step", 300), 6: ("evaluate", 200)}).evidence(tmp_path)
    assert host.warmup.steps == 1 and host.recompiles_in_steps == 1
    assert host.recompile_ms_per_step == pytest.approx(20, abs=0.01)


def _retracing_loop(compiling: set[int], steps: int = 12, trace_ms: int = 40, compile_ms: int = 100,
                    first_run_ms: int = 15) -> TraceBuild:
    """Annotated steps of 10 ms (the program runs 8); in each step of ``compiling`` the jit call traces the
    function (``trace_ms``, no event of its own) before lowering and compiling it, and the new program's first run
    takes ``first_run_ms`` more."""
    events, lane, start = [], [], 0
    for step in range(steps):
        extra = trace_ms + compile_ms + first_run_ms if step in compiling else 0
        events.append(("train", start, start + (10 + extra) * MS))
        run = start + MS
        if step in compiling:
            lowered = start + trace_ms * MS
            run = lowered + compile_ms * MS
            events += [("PjitFunction(step)", start, run + MS // 2), ("lower_sharding_computation", lowered,
                                                                      lowered + compile_ms * MS // 4),
                       ("backend_compile_and_load", lowered + compile_ms * MS // 4, run)]
        else:
            events += jit_calls("step", [start], MS // 2)
        lane.append(("fusion", run + MS // 2, run + (8 + (first_run_ms if step in compiling else 0)) * MS))
        start += (10 + extra) * MS
    return TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane)


def test_a_recompiling_step_costs_its_tracing_compiling_and_first_run_over_a_normal_step(tmp_path):
    host = _retracing_loop({0, 4, 8}).evidence(tmp_path)
    assert host.warmup.steps == 1 and host.recompiles_in_steps == 2
    cost = host.recompile_cost
    assert cost.steps == 2 and cost.normal_step_ms == pytest.approx(10, abs=0.01)
    assert cost.ms == pytest.approx(2 * 155, abs=0.1)  # tracing 40, compiling 100, the first run 15 more
    assert cost.loop_ms == pytest.approx(11 * 10 + 2 * 155, abs=0.1)
    analysis = analysis_of(host)
    # The compilations alone are 200 ms of the loop; the recompiling steps cost 310 ms of it.
    assert analysis.health.compile_fraction == pytest.approx(310 / 420, abs=0.005)
    (finding,) = [f for f in analysis.findings if f.category is FindingCategory.RECOMPILATION]
    assert finding.title == "Recompilation inside steps: the recompiling steps cost 74% of the loop's time"
    assert "2 recompiling steps cost 310.0 ms of the loop's 420.0 ms beyond a normal step's 10.00 ms" in (
        finding.evidence[1])


def test_where_every_step_recompiles_the_cost_is_the_time_inside_the_recompiling_jit_calls(tmp_path):
    host = _retracing_loop(set(range(12)), steps=12).evidence(tmp_path)
    cost = host.recompile_cost
    assert host.warmup.steps == 1 and cost.steps == 11 and cost.normal_step_ms is None
    assert cost.ms == pytest.approx(11 * 140.5, abs=0.1)  # tracing and compiling, and the dispatch after them
    assert analysis_of(host).health.compile_fraction == pytest.approx(140.5 / 165, abs=0.005)


def test_without_recompilation_there_is_no_recompile_cost(tmp_path):
    host = _retracing_loop({0}).evidence(tmp_path)
    assert host.warmup.steps == 1 and host.recompile_cost is None
    assert analysis_of(host).health.compile_fraction == 0


# --- slow steps ---------------------------------------------------------------------------------------------


def _saving_loop(save_name: str = "$ckpt.py:10 save_checkpoint", save_ms: int = 160, every: int = 5,
                 steps: int = 20, inner: str = "$pickle dump") -> TraceBuild:
    """Annotated steps of 10 ms (device busy 8), every ``every``-th also running a save of ``save_ms``, half of
    it in an ``inner`` call."""
    events, lane, start = [], [], 0
    for step in range(steps):
        length = 10 + (save_ms if step % every == every - 1 else 0)
        events += [("train", start, start + length * MS), *jit_calls("step", [start + MS // 2], MS // 2)]
        if length > 10:
            events += [(save_name, start + 10 * MS, start + length * MS),
                       (inner, start + 11 * MS, start + (11 + save_ms // 2) * MS)]
        lane.append(("fusion", start + MS, start + 9 * MS))
        start += length * MS
    return TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane)


def test_slow_steps_name_what_runs_only_in_them_with_its_share_of_the_loop(tmp_path):
    host = _saving_loop().evidence(tmp_path)
    slow = host.slow_steps
    assert (slow.steps, slow.compared, slow.indices) == (4, 20, [4, 9, 14, 19])
    assert slow.slow_ms == pytest.approx(170) and slow.normal_ms == pytest.approx(10)
    assert slow.loop_ms == pytest.approx(20 * 10 + 4 * 160)
    assert slow.share_of_loop == pytest.approx(4 * 170 / 840)
    assert slow.cost_ms == pytest.approx(640) and slow.cost_fraction == pytest.approx(640 / 840)
    cause = slow.differences[0]
    assert cause.name == "$ckpt.py:10 save_checkpoint"  # not the pickle call inside it: half the time is its own
    assert slow.differences[1].name == "$pickle dump" and slow.differences[1].slow_ms == pytest.approx(80)
    assert cause.slow_ms == pytest.approx(160) and cause.normal_ms == 0
    assert cause.share_of_loop == pytest.approx(640 / 840)
    assert slow.slow_busy_ms == pytest.approx(8) and slow.normal_busy_ms == pytest.approx(8)


def test_slow_steps_that_the_stepping_thread_does_not_explain_name_what_another_thread_runs_in_them(tmp_path):
    # Annotated steps of 10 ms; every 5th lasts 30 ms while the training thread waits in its step (no event says
    # on what). A saver thread writes the whole time (in the file's C write, which lets go of the interpreter), in a
    # 20 ms copy that holds the interpreter in each slow step.
    training, saver, lane, start = [], [], [], 0
    for step in range(20):
        length = 30 if step % 5 == 4 else 10
        training += [("train", start, start + length * MS), ("$train.py:9 train_step", start, start + length * MS),
                     *jit_calls("step", [start + MS // 2], MS // 2)]
        lane.append(("fusion", start + MS, start + 9 * MS))
        if length == 30:
            saver += [("$<unknown> write", start, start + 5 * MS), ("$<unknown> tobytes", start + 5 * MS,
                                                                     start + 25 * MS),
                      ("$<unknown> write", start + 25 * MS, start + 30 * MS)]
        else:
            saver.append(("$<unknown> write", start, start + 10 * MS))
        start += length * MS
    saver.append(("$npyio.py:580 savez", 0, start))
    host = (TraceBuild().host(training, markers=("train",)).host(saver, thread="saver")
            .lane("/host:CPU", lane).evidence(tmp_path))
    slow = host.slow_steps
    assert slow.steps == 4 and slow.cost_ms == pytest.approx(80)
    tobytes, savez = slow.elsewhere[:2]
    assert (tobytes.name, tobytes.thread) == ("$<unknown> tobytes", "saver")
    assert tobytes.slow_ms == pytest.approx(20) and tobytes.normal_ms == 0
    assert tobytes.share_of_loop == pytest.approx(80 / 280)
    # The save spans the loop: its time inside each step, 30 ms in a slow one against 10 in a normal one.
    assert savez.name == "$npyio.py:580 savez" and savez.slow_ms == pytest.approx(30)
    assert savez.normal_ms == pytest.approx(10)
    (finding,) = [f for f in analysis_of(host).findings if f.title.startswith("Slow steps")]
    assert "another thread's work" in finding.what
    assert ('meanwhile the host thread "saver" runs "$<unknown> tobytes" 20.00 ms per slow step against 0.00 ms '
            "per normal step (28.6% of the loop)") in finding.evidence
    assert "process of its own" in finding.fix and "asynchronously" not in finding.fix


def test_a_save_between_steps_makes_the_gap_after_its_step_slow(tmp_path):
    events, lane, start = [], [], 0
    for step in range(10):
        events += [("train", start, start + 10 * MS), *jit_calls("step", [start + MS // 2], MS // 2)]
        lane.append(("fusion", start + MS, start + 9 * MS))
        start += 10 * MS
        if step % 5 == 2:
            events.append(("$ckpt.py:4 write_checkpoint", start, start + 100 * MS))
            start += 100 * MS
    slow = TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane).evidence(tmp_path).slow_steps
    assert slow.indices == [2, 7] and slow.slow_gap_ms == pytest.approx(100) and slow.normal_gap_ms == 0
    assert slow.differences[0].name == "$ckpt.py:4 write_checkpoint"
    assert slow.differences[0].slow_ms == pytest.approx(100)


def test_slow_steps_costing_most_of_the_loop_are_a_p0_with_the_async_checkpoint_fix(tmp_path):
    analysis = analysis_of(_saving_loop().evidence(tmp_path))
    assert analysis.status is HealthStatus.NEEDS_ATTENTION
    top = analysis.findings[0]
    assert top.priority is Priority.P0
    assert top.title == "Slow steps: 4 of 20 steps cost 76% of the loop's time (a synchronous save)"
    assert any('"$ckpt.py:10 save_checkpoint" 160.00 ms per slow step against 0.00 ms' in line for line in top.evidence)
    assert "AsyncCheckpointer" in top.fix and "save less often" in top.fix


def test_slow_steps_reading_arrays_from_disk_again_say_so_and_get_a_keep_it_fix(tmp_path):
    loop = _saving_loop(save_name="$eval.py:7 load_reference", inner="$_format_impl.py:780 read_array")
    (slow,) = [f for f in analysis_of(loop.evidence(tmp_path)).findings if f.title.startswith("Slow steps")]
    assert slow.title.endswith("(arrays read from disk again)") and "arrays read from disk again" in slow.what
    assert "load them before the loop" in slow.fix and "AsyncCheckpointer" not in slow.fix


def test_slow_steps_of_other_host_work_get_a_fix_to_move_it_off_the_training_thread(tmp_path):
    loop = _saving_loop(save_name="$util.py:3 tidy", every=10, inner="$util.py:5 sort")
    analysis = analysis_of(loop.evidence(tmp_path))
    (slow,) = [f for f in analysis.findings if f.title.startswith("Slow steps")]
    assert slow.priority is Priority.P0 and "AsyncCheckpointer" not in slow.fix
    assert "off the training thread" in slow.fix
    assert slow.title.endswith("of the loop's time")  # "host work" names nothing: the evidence does


def test_slow_steps_that_run_more_device_work_say_so(tmp_path):
    # Every fifth step also launches a program that keeps the device busy 100 ms; the host only dispatches it.
    events, lane, start = [], [], 0
    for step in range(15):
        extra = step % 5 == 4
        length = 110 if extra else 10
        events += [("train", start, start + length * MS), *jit_calls("step", [start + MS // 2], MS // 2)]
        lane.append(("fusion", start + MS, start + 9 * MS))
        if extra:
            events += jit_calls("refresh_stats", [start + 9 * MS], MS // 2)
            lane.append(("fusion.2", start + 10 * MS, start + 109 * MS))
        start += length * MS
    host = TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.slow_steps.slow_busy_ms == pytest.approx(107) and host.slow_steps.normal_busy_ms == pytest.approx(8)
    (slow,) = [f for f in analysis_of(host).findings if f.title.startswith("Slow steps")]
    assert "more device work" in slow.what and "run it less often" in slow.fix
    assert any("the devices are busy 107.00 ms per slow step against 8.00 ms" in line for line in slow.evidence)


def test_slow_steps_that_wait_on_other_threads_join_the_finding_that_names_what_those_threads_do(tmp_path):
    # Four reader threads each read a batch for 90 ms: every fourth step waits for the next round of reads.
    stepping, readers, lane, start = [], [[] for _ in range(4)], [], 0
    for step in range(16):
        wait = 85 if step % 4 == 0 else 0
        stepping += [("train", start, start + (wait + 5) * MS), *jit_calls("step", [start + (wait + 1) * MS], MS // 2)]
        if wait:
            stepping.append(("$threading.py:295 wait", start, start + wait * MS))
            for reader in readers:
                reader.append(("$data.py:5 read_batch", start, start + wait * MS))
        lane.append(("fusion", start + (wait + 2) * MS, start + (wait + 5) * MS))
        start += (wait + 5) * MS
    build = TraceBuild().host(stepping, markers=("train",))
    for n, reader in enumerate(readers):
        build = build.host(reader, thread=f"reader_{n}")
    analysis = analysis_of(build.lane("/host:CPU", lane).evidence(tmp_path))
    assert not [f for f in analysis.findings if f.title.startswith("Slow steps")]
    (reads,) = [f for f in analysis.findings if f.category is FindingCategory.INPUT_BOUND]
    assert reads.priority is Priority.P0 and "waits on a slower loader thread" in reads.title
    assert any(line.startswith("the waits gather in a few steps: 4 of 16 steps are slow") for line in reads.evidence)
    assert any('"$data.py:5 read_batch"' in line for line in reads.evidence)


def test_steps_of_the_same_program_on_a_larger_bucket_are_not_slow_steps(tmp_path):
    # Batches padded to two sizes take turns: every other step runs the same program on four times the work.
    events, lane, start = [], [], 0
    for step in range(16):
        length = 41 if step % 2 else 11
        events += [("train", start, start + length * MS), *jit_calls("step", [start + MS // 2], MS // 2)]
        lane.append(("fusion", start + MS, start + (length - 1) * MS))
        start += length * MS
    host = TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.slow_steps is not None and host.slow_steps.steps == 8
    assert not [f for f in analysis_of(host).findings if f.title.startswith("Slow steps")]


def test_a_step_that_compiles_again_is_one_recompilation_finding_not_also_a_slow_step(tmp_path):
    # The last batch is shorter: its step compiles the program again, 300 ms, where the others take 5 ms.
    events, lane, start = [], [], 0
    for step in range(12):
        if step == 11:
            events += [("train", start, start + 305 * MS), *_compiling_call("evaluate", start + MS // 2, 300)]
            lane.append(("fusion", start + 302 * MS, start + 304 * MS))
            start += 305 * MS
            continue
        events += [("train", start, start + 5 * MS), *jit_calls("evaluate", [start + MS // 2], MS // 2)]
        lane.append(("fusion", start + MS, start + 4 * MS))
        start += 5 * MS
    warm = [*_compiling_call("evaluate", -400 * MS, 300)]
    host = TraceBuild().host(warm + events, markers=("train",)).lane("/host:CPU", lane).evidence(tmp_path)
    analysis = analysis_of(host)
    assert not [f for f in analysis.findings if f.title.startswith("Slow steps")]
    (recompiling,) = [f for f in analysis.findings if f.category is FindingCategory.RECOMPILATION]
    assert recompiling.priority is Priority.P0
    assert any(line.startswith("the compilations gather in a few steps: 1 of 12 steps are slow")
               for line in recompiling.evidence)


def test_a_cheap_slow_group_is_informational(tmp_path):
    analysis = analysis_of(_saving_loop(save_ms=30, every=20, steps=40).evidence(tmp_path))
    (slow,) = [f for f in analysis.findings if f.title.startswith("Slow steps")]
    assert slow.priority is Priority.P2  # 30 ms of 430: 7 %


def test_slow_steps_from_built_evidence_are_ranked_by_their_cost(tmp_path):
    host = _saving_loop(save_ms=60, every=5).evidence(tmp_path)  # 4 x 60 ms of 440 ms: 55 %
    assert [f.priority for f in analysis_of(host).findings if f.title.startswith("Slow steps")] == [Priority.P0]
    host.slow_steps.cost_fraction = 0.3
    assert [f.priority for f in analysis_of(host).findings if f.title.startswith("Slow steps")] == [Priority.P1]


# --- iterations of several programs -------------------------------------------------------------------------


def test_a_train_and_an_eval_program_each_iteration_make_one_step(tmp_path):
    events, lane = [], []
    for i in range(8):
        start = i * 30 * MS
        events += jit_calls("train_step", [start], MS) + jit_calls("eval_step", [start + 20 * MS], MS)
        lane += [("fusion", start + MS, start + 19 * MS), ("fusion", start + 21 * MS, start + 28 * MS)]
    host = TraceBuild().host(events).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.step_source is StepSource.PROGRAM_RUNS and host.steps == 8
    assert host.iteration_programs == ["PjitFunction(train_step)", "PjitFunction(eval_step)"]
    assert host.step_ms.mean == pytest.approx(30)
    analysis = analysis_of(host)
    assert analysis.metrics.steps == 8 and analysis.metrics.step_time_ms == pytest.approx(30)
    assert not [f for f in analysis.findings if f.title.startswith("No training steps")]
    (iteration,) = [f for f in analysis.findings if f.title.startswith("Each step is")]
    assert iteration.title == "Each step is a sequence of 2 launches of 2 programs"
    assert iteration.evidence[0].startswith('"PjitFunction(train_step)": 1 per step, 18.000 ms of device work per call')


def test_micro_batches_then_an_apply_make_one_iteration(tmp_path):
    events, lane = [], []
    for i in range(6):
        start = i * 50 * MS
        events += jit_calls("grad", [start + k * 10 * MS for k in range(4)], MS)
        events += jit_calls("apply", [start + 40 * MS], MS)
        lane += [("fusion", start + k * 10 * MS + MS, start + k * 10 * MS + 9 * MS) for k in range(5)]
    host = TraceBuild().host(events).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.steps == 6 and host.step_marker == "PjitFunction(grad)"
    assert host.iteration_programs == ["PjitFunction(grad)"] * 4 + ["PjitFunction(apply)"]
    assert host.step_ms.mean == pytest.approx(50)


def _saving_copies(every: int, steps: int = 30, copies: int = 4) -> tuple[list[tuple[str, int]], Events]:
    """A loop that launches its step program every 10 ms and, every ``every``th step, ``copies`` launches of a
    small copy program (0.1 ms of device work each) right after the step: the launches (program, start) and
    the device work."""
    launches, lane, start = [], [], 0
    for step in range(steps):
        launches.append(("step", start))
        lane.append(("fusion", start + MS, start + 8 * MS))
        if step % every == every - 1:
            at = [start + 8 * MS + k * MS // 4 for k in range(copies)]
            launches += [("copy", t) for t in at]
            lane += [("copy.1", t + MS // 8, t + MS // 8 + MS // 10) for t in at]
        start += 10 * MS
    return launches, lane


def _dispatched(launches: list[tuple[str, int]], lane: Events) -> TraceBuild:
    events = [event for program, start in launches for event in jit_calls(program, [start], MS // 8)]
    return TraceBuild().host(events).lane("/host:CPU", lane)


def test_copies_of_the_parameters_every_tenth_step_do_not_stretch_the_iteration(tmp_path):
    host = _dispatched(*_saving_copies(every=10)).evidence(tmp_path)
    assert host.step_source is StepSource.PROGRAM_RUNS and host.steps == 30
    assert host.step_marker == "PjitFunction(step)" and host.iteration_programs == []
    assert host.step_ms.median == pytest.approx(10)


def test_copies_every_fifth_step_are_not_an_iteration_of_five_steps(tmp_path):
    host = _dispatched(*_saving_copies(every=5)).evidence(tmp_path)
    assert host.steps == 30 and host.step_ms.median == pytest.approx(10)


def test_a_tpu_steps_line_that_numbers_the_copies_as_steps_is_not_taken(tmp_path):
    launches, lane = _saving_copies(every=10)
    runs = [(f"jit_{program}(1)", start, start + MS // 2) for program, start in launches]
    steps = [(str(i), start, end) for i, (_, start, end) in enumerate(runs)]
    build = TraceBuild(DeviceKind.TPU).program_runs("/device:TPU:0", runs).device_steps("/device:TPU:0", steps)
    host = build.lane("/device:TPU:0", lane, "XLA Ops").evidence(tmp_path)
    assert host.step_source is StepSource.PROGRAM_RUNS and host.steps == 30
    assert host.step_ms.median == pytest.approx(10)


def _tpu_runs_numbered_as_steps(programs: list[str], iterations: int, period_ms: int) -> TraceBuild:
    """A TPU without step markers: its Steps line numbers each program run, as its XLA Modules line holds them."""
    build = TraceBuild(DeviceKind.TPU)
    runs, steps, lane = [], [], []
    each = period_ms * MS // len(programs)
    for i in range(iterations):
        for k, program in enumerate(programs):
            start = i * period_ms * MS + k * each
            runs.append((program, start, start + each - MS))
            steps.append((str(len(steps)), start - MS // 2, start + each - MS))
            lane.append(("fusion", start, start + each - MS))
    return build.program_runs("/device:TPU:0", runs).device_steps("/device:TPU:0", steps).lane(
        "/device:TPU:0", lane, "XLA Ops")


def test_a_tpu_steps_line_that_numbers_each_program_run_does_not_split_the_iteration(tmp_path):
    build = _tpu_runs_numbered_as_steps(["jit_grad(1)"] * 4 + ["jit_apply(2)"], iterations=6, period_ms=50)
    host = build.evidence(tmp_path)
    assert host.step_source is StepSource.PROGRAM_RUNS and host.steps == 6
    assert host.iteration_programs == ["jit_grad(1)"] * 4 + ["jit_apply(2)"]
    assert host.step_ms.mean == pytest.approx(50)


def test_a_tpu_steps_line_of_one_program_keeps_its_steps(tmp_path):
    host = _tpu_runs_numbered_as_steps(["jit_step(1)"], iterations=6, period_ms=10).evidence(tmp_path)
    assert host.step_source is StepSource.DEVICE_STEPS and host.steps == 6


def test_a_tpu_first_call_compiling_before_its_first_run_is_warm_up(tmp_path):
    # Python's dispatch of the first call compiles (on the compiler's thread) for 300 ms, then the devices run
    # the program every 10 ms; the device's step windows start with the runs, after the compile.
    build = _tpu_runs_numbered_as_steps(["jit_step(1)"], iterations=8, period_ms=10)
    for line in (build.trace.program_runs["/device:TPU:0"], build.trace.device_steps["/device:TPU:0"],
                 *build.trace.lanes["/device:TPU:0"]):
        line.starts += 300 * MS
        line.ends += 300 * MS
    build.host(jit_calls("step", [0], 300 * MS - 10_000)).host([("backend_compile_and_load", MS, 299 * MS)])
    host = build.evidence(tmp_path)
    assert host.warmup is not None and host.warmup.steps == 1 and host.warmup.compiles == 1
    assert host.warmup.compile_ms == pytest.approx(298, rel=0.01)
    assert host.warmup.ms == pytest.approx(310, rel=0.01)
    assert host.recompiles_in_steps == 0


def _accumulating_host() -> HostEvidence:
    return HostEvidence(
        host="h", file="h.xplane.pb", bytes=1, events=1, device_kind=DeviceKind.CPU, device_type="CPU", devices=1,
        compute_lanes=[], step_source=StepSource.PROGRAM_RUNS, steps=8, step_ms=Distribution.of([50.0] * 8),
        busy_fraction=0.9, loop_busy_fraction=0.9,
        dispatched=[HostActivity(name="PjitFunction(grad)", count_per_step=4, ms_per_step=1, share_of_step=0.02),
                    HostActivity(name="PjitFunction(apply)", count_per_step=1, ms_per_step=1, share_of_step=0.02)])


def test_peak_memory_is_the_largest_program_the_iteration_runs():
    tools = [allocations(("jit_grad(3)", 24.0), ("jit_apply(4)", 56.0), ("jit__normal(1)", 90.0))]
    metrics = assessed(_accumulating_host(), tools=tools).metrics
    assert metrics.peak_memory_bytes == 56 * (1 << 20)
    assert '"jit_apply(4)"' in metrics.peak_memory_source and "every step" in metrics.peak_memory_source


# --- the fixtures made for them --------------------------------------------------------------------------------


def test_the_quickstart_loop_warms_up_in_its_first_step():
    host = read_host_evidence(xplane("warmup_compile"))
    assert host.warmup.steps == 1 and host.warmup.compiles == 1 and host.recompiles_in_steps == 0
    assert host.warmup.ms > 100 * host.warmup.steady_step_ms.median


def test_the_periodic_save_fixture_groups_exactly_the_saving_steps():
    slow = read_host_evidence(xplane("periodic_save")).slow_steps
    assert slow.indices == [4, 9, 14, 19]
    assert "save_checkpoint" in slow.differences[0].name


def test_the_iteration_fixtures_run_their_programs_in_sequence():
    assert read_host_evidence(xplane("train_eval")).iteration_programs == [
        "PjitFunction(train_step)", "PjitFunction(eval_step)"]
    accumulation = read_host_evidence(xplane("grad_accumulation"))
    assert accumulation.iteration_programs == ["PjitFunction(accumulate)"] * 4 + ["PjitFunction(apply)"]
    assert accumulation.steps == 8
