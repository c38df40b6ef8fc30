"""The raw-event reader: interval arithmetic, nesting, steps, and what it refuses."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from analysis_support import facts, xplane
from evidence_support import MS, TraceBuild, jit_calls
from pydantic import TypeAdapter, ValidationError

from mldiag.analysis.host_evidence import DeviceKind, HostEvidence, StepSource
from mldiag.analysis.loop.raw_events import (
    _has_ancestor,
    _idle_accelerator,
    _inline_program,
    _Line,
    _parents,
    _Union,
    read_host_evidence,
)
from mldiag.analysis.profile.profiles import UnreadableProfile
from mldiag.analysis.profile.wire import delimited
from mldiag.analysis.profile.xspace import Plane


def test_union_covers_overlaps_once_and_clips_to_each_window():
    union = _Union(np.array([0, 5, 20, 22]), np.array([10, 12, 25, 24]))
    windows = np.array([[0, 30], [6, 21], [12, 20], [100, 200]])
    assert union.covered(windows).tolist() == [17, 7, 0, 0]


def test_nesting_finds_each_events_parent_and_self_time():
    starts = np.array([0, 1, 2, 5, 20])
    ends = np.array([10, 4, 3, 9, 21])
    assert _parents(starts, ends).tolist() == [-1, 0, 1, 0, -1]


def _plane(name: str, **stats: str) -> Plane:
    return Plane(name=name, stats=stats, lines=[], event_names={}, _event_metadata={}, _stat_names={})


def test_an_accelerator_that_ran_nothing_is_named_from_its_chip_or_device_plane():
    host = _plane("/host:CPU")
    assert _idle_accelerator([host, _plane("#Chip0 Misc", device_type_string="TPU v5 Lite")]) == "TPU v5 Lite"
    assert _idle_accelerator([host, _plane("/device:GPU:0", device_vendor="NVIDIA")]) == "NVIDIA GPU"
    assert _idle_accelerator([_plane("/host:metadata", cpu_version="cpu"), host]) == ""


def test_steps_come_from_the_step_markers():
    evidence = read_host_evidence(xplane("input_bound"))
    assert evidence.step_source is StepSource.STEP_MARKERS and evidence.step_marker == "train"
    assert evidence.steps == facts("input_bound")["steps"] == len(evidence.series.step_ms)
    assert evidence.series.step_ms[0] > 0 and evidence.series.gap_before_ms[0] == 0.0
    assert evidence.host == "fixture-host" and evidence.dispatches_per_step == 1.0


def test_the_evidence_the_reader_prints_validates_back_whole_and_nothing_else():
    evidence = read_host_evidence(xplane("input_bound"))
    printed = evidence.to_json()
    assert TypeAdapter(HostEvidence).validate_json(printed) == evidence
    with pytest.raises(ValidationError, match="surprise"):
        TypeAdapter(HostEvidence).validate_json(json.dumps({**json.loads(printed), "surprise": 1}))
    evidence.busy_fraction = float("nan")
    with pytest.raises(ValueError, match="not JSON compliant"):
        evidence.to_json()


def test_compilation_inside_steps_is_counted():
    evidence = read_host_evidence(xplane("recompiling"))
    assert evidence.compiles_in_steps == facts("recompiling")["compiles_in_steps"]
    assert evidence.compile_ms_per_step > 0.5 * evidence.step_ms.mean
    assert all(ms > 0 for ms in evidence.series.compile_ms)


@pytest.mark.parametrize("content", [b"", b"not a protobuf at all\n", b"\x0a\xff\xff\xff\xff\x0f"])
def test_anything_but_an_xspace_is_refused(tmp_path, content):
    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(content)
    with pytest.raises(UnreadableProfile):
        read_host_evidence(bad)


def test_a_truncated_profile_is_refused(tmp_path):
    whole = xplane("input_bound").read_bytes()
    cut = tmp_path / "host.xplane.pb"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UnreadableProfile, match="not a readable XSpace"):
        read_host_evidence(cut)


def _padded_varints(values: np.ndarray, width: int) -> np.ndarray:
    """Each value as a varint of exactly ``width`` bytes (the wire format allows the padding)."""
    shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
    out = ((values.astype(np.uint64)[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    out[:, :-1] |= 0x80
    return out


def _one_line_of_overlapping_events(path, count: int) -> None:
    """A host plane with one line of ``count`` events, event i over [i µs, (i + count) µs): each overlaps all after it."""
    column = lambda byte: np.full((count, 1), byte, np.uint8)  # noqa: E731
    starts_ps = np.arange(count, dtype=np.int64) * 1_000_000
    event = np.concatenate([column(1 << 3), column(1),  # metadata_id 1
                            column(2 << 3), _padded_varints(starts_ps, 7),  # offset_ps
                            column(3 << 3), _padded_varints(np.full(count, count * 1_000_000), 7)], axis=1)
    events = np.concatenate([column(4 << 3 | 2), column(event.shape[1]), event], axis=1).tobytes()
    line = delimited(2, b"python") + bytes([3 << 3, 1]) + events
    metadata = delimited(4, bytes([1 << 3, 1]) + delimited(2, bytes([1 << 3, 1]) + delimited(2, b"op")))
    path.write_bytes(delimited(1, delimited(2, b"/host:CPU") + delimited(3, line) + metadata))


@pytest.mark.parametrize(("shape", "parent_of"), [
    ("each overlaps all after it", lambda i: -1),  # overlapping, none inside another: siblings
    ("each inside the one before", lambda i: i - 1),
])
def test_nesting_of_deeply_overlapping_events_is_not_quadratic(shape, parent_of):
    count = 200_000
    starts = np.arange(count)
    ends = starts + count if shape == "each overlaps all after it" else 2 * count - starts
    started = time.perf_counter()
    parents = _parents(starts, ends)
    assert time.perf_counter() - started < 2.0  # one level per event: a pass per level took minutes
    assert parents.tolist() == [parent_of(i) for i in range(count)]


def test_finding_flagged_ancestors_in_a_deep_chain_is_not_quadratic():
    count = 200_000
    starts = np.arange(count)
    chain = _Line("deep", starts, 2 * count - starts, np.zeros(count, dtype=np.int64))  # each inside the one before
    flagged = np.zeros(count, dtype=bool)
    flagged[0] = True
    started = time.perf_counter()
    below_it = _has_ancestor(chain, flagged)
    assert time.perf_counter() - started < 2.0  # a pass per level took minutes
    assert not below_it[0] and below_it[1:].all()
    flagged[[0, count // 2]] = False, True
    assert _has_ancestor(chain, flagged).tolist() == [False] * (count // 2 + 1) + [True] * (count // 2 - 1)



def test_flagged_ancestors_are_those_a_walk_up_each_event_finds():
    """Events nested in trees of every depth (a random parent before each), a few of them flagged."""
    rng = np.random.default_rng(7)
    count = 3000
    parents = np.array([-1 if i == 0 or rng.random() < 0.05 else int(rng.integers(max(0, i - 40), i))
                        for i in range(count)])
    depth = np.zeros(count, dtype=np.int64)
    for i in range(count):
        depth[i] = depth[parents[i]] + 1 if parents[i] >= 0 else 0
    line = _Line("trees", np.arange(count), np.arange(count) + 1, np.zeros(count, dtype=np.int64))
    line.parents = parents
    for share in (0.002, 0.02, 0.3):
        flagged = rng.random(count) < share

        def walked(event: int) -> bool:
            event = parents[event]
            while event >= 0 and not flagged[event]:
                event = parents[event]
            return event >= 0

        assert _has_ancestor(line, flagged).tolist() == [walked(i) for i in range(count)], share
    assert depth.max() > 40


@pytest.mark.slow
def test_reading_one_line_of_overlapping_events_grows_linearly(tmp_path):
    def seconds_to_read(count: int) -> float:
        path = tmp_path / f"{count}.xplane.pb"
        _one_line_of_overlapping_events(path, count)
        best = float("inf")
        for _ in range(2 if count < 1_000_000 else 1):
            started = time.perf_counter()
            evidence = read_host_evidence(path)
            best = min(best, time.perf_counter() - started)
        assert evidence.steps == 1
        return best

    small, medium, large = (seconds_to_read(count) for count in (50_000, 200_000, 2_000_000))
    # Linear is 4x and 10x; quadratic was 16x and 100x (50 k: 2.4 s, 200 k: 20 s, 2 M: over 300 s). At 2 M the
    # columns outgrow the caches and a loaded machine stretches that run most: measured 15x to 40x here.
    assert medium < 10 * small and large < 60 * medium, (small, medium, large)
    assert large < 120


def _synced_launches(resume_ms: float, steps: int = 10) -> TraceBuild:
    """Annotated steps of a TPU loop: a 0.1 ms launch at each step's start, the runtime's completion notice on its
    own thread 1.2 ms later, and the step's marker ending ``resume_ms`` after that notice."""
    python, runtime, start = [], [], 0
    for _ in range(steps):
        done = start + MS // 10 + 12 * MS // 10
        python += [("train", start, int(done + resume_ms * MS)), *jit_calls("f", [start], MS // 10)]
        runtime += [("CompleteCallbacks", done - MS // 20, done + MS // 50),
                    ("tpu::System::Execute=>Done", done - MS // 25, done)]
        start = int(done + resume_ms * MS) + MS // 20
    return (TraceBuild(DeviceKind.TPU).host(python, markers=("train",))
            .host(runtime, thread="futex-default-SDomainT/2013"))


def test_a_launch_the_thread_waits_on_until_its_program_completes_is_awaited(tmp_path):
    host = _synced_launches(resume_ms=0.05).evidence(tmp_path)
    assert host.awaited_launches == 1.0
    assert host.launch_wait_ms_per_step == pytest.approx(1.2, abs=0.001)
    # A thread that goes on long after the program completed was doing something else: no wait for it.
    later = _synced_launches(resume_ms=0.8).evidence(tmp_path)
    assert later.awaited_launches == 0.0 and later.launch_wait_ms_per_step == 0.0


def test_a_program_the_xla_cpu_client_runs_inline_on_the_launching_thread_is_a_compute_lane(tmp_path):
    build = TraceBuild().host([
        ("train", 0, 10 * MS), ("PjitFunction(step)", MS, 9 * MS), ("ThunkExecutor::Execute", 2 * MS, 8 * MS),
        ("dot.1", 2 * MS, 3 * MS), ("end: dot.1", 3 * MS, 3 * MS), ("pure_callback.1", 3 * MS, 8 * MS),
        ("shard_args", 4 * MS, 5 * MS), ("ThunkExecutor::Execute (wait for completion)", 8 * MS, 9 * MS)],
        markers=("train",))
    (python,) = build.trace.host_lines
    inline = _inline_program(build.trace, python)
    assert [build.trace.names[i] for i in inline.ids] == [
        "ThunkExecutor::Execute", "dot.1", "pure_callback.1", "shard_args"]
    assert inline.name == "/host:CPU/python (inline)"
    assert [build.trace.modules[m] for m in inline.modules] == ["jit_step"] * 4  # what its dispatch launched


def test_ops_the_xla_cpu_client_runs_inline_without_a_thunk_executor_run_are_a_compute_lane():
    # A program whose loop calls back to the host runs its ops straight under the launch, no executor run around.
    build = TraceBuild().host([
        ("train", 0, 10 * MS), ("PjitFunction(run)", MS, 9 * MS),
        ("CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice", MS, 9 * MS), ("while.5", 2 * MS, 8 * MS),
        ("ynn_fusion", 2 * MS, 3 * MS), ("pure_callback.0", 3 * MS, 7 * MS), ("shard_args", 4 * MS, 5 * MS)],
        markers=("train",))
    build.trace.xla_ops = {build.ids[name] for name in ("while.5", "ynn_fusion", "pure_callback.0")}
    (python,) = build.trace.host_lines
    inline = _inline_program(build.trace, python)
    assert [build.trace.names[i] for i in inline.ids] == ["while.5", "ynn_fusion", "pure_callback.0", "shard_args"]
    assert [build.trace.modules[m] for m in inline.modules] == ["jit_run"] * 4


def test_a_host_callback_run_inline_on_the_training_thread_keeps_the_devices_waiting_on_it():
    # In some steps the XLA CPU client runs the step's program, its pure_callback included, on the training thread.
    host = read_host_evidence(xplane("cpu/host_callback"))
    assert "/host:CPU/python (inline)" in host.compute_lanes
    (callback,) = [part for part in host.attribution.parts if part.name == "host callback"]
    assert callback.share > 0.69  # the callback's own clock: 0.69 of the loop


def test_each_programs_device_work_on_the_xla_cpu_threads_is_read_from_the_runs_hlo_module():
    # Eight micro-batch gradients a step, beside eager slices, squeezes and adds launched while they run.
    host = read_host_evidence(xplane("cpu/grad_accumulation_in_python"))
    work = {p.name: p for p in host.programs}
    assert work["PjitFunction(mlp_loss)"].device_ms_per_call == pytest.approx(0.231, abs=0.01)
    assert work["PjitFunction(mlp_loss)"].share_of_device > 0.8
    assert all(work[f"PjitFunction({name})"].device_ms_per_call < 0.01 for name in ("add", "dynamic_slice", "squeeze"))


@pytest.mark.parametrize("fixture, bytes_per_event", [
    ("tpu_v5e/eager_optimizer", 210),  # one Python-tracer thread that steps
    ("tpu_v5e/worker_process_loader", 420),  # 26 host threads, the Python of those that do not step swept too
])
def test_the_read_holds_few_of_a_lines_arrays_at_once(tmp_path, fixture, bytes_per_event):
    """Its peak, as tracemalloc counts numpy's arrays and Python's objects, in bytes per event of the file: each
    array of a line's events is let go once used, and a line's file columns once it is read; name ids and parents
    are int32, and the attribution's pieces hold int32 labels and int8 tiers and are swept a block at a time."""
    import tracemalloc

    tracemalloc.start()
    try:
        evidence = read_host_evidence(xplane(fixture), tmp_path / "timeline.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert evidence.events > 50_000
    assert peak <= bytes_per_event * evidence.events
