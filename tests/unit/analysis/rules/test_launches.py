"""A loop bound by its launches: one tiny program a step whose launch costs the host far more than the device spends
running it, told apart from untraced Python work, a large program and named host work, on evidence written by hand."""

from __future__ import annotations

from evidence_support import assessed

from mldiag.analysis.evidence import HloProgram
from mldiag.analysis.host_evidence import (
    Attribution,
    DeviceKind,
    Distribution,
    HostActivity,
    HostEvidence,
    ProgramCalls,
    StepSource,
    TimeCause,
    TimePart,
)
from mldiag.domain import FindingCategory, Priority

STEPS = 20


def _loop(*, device_ms: float, dispatch_ms: float, untraced_ms: float, host_work_ms: float = 0.0,
          host_work: str = "$train.py:20 make_batch", reads_device: bool = False,
          awaited_ms: float | None = None) -> HostEvidence:
    """A TPU loop of annotated steps, one jit launch each, with the attribution of its time per step; ``host_work``
    a function of the training thread's, ``reads_device`` where it reads device values back; ``awaited_ms`` the
    thread's wait from each launch to its program's completion, where it waits for every launch."""
    step_ms = device_ms + dispatch_ms + untraced_ms + host_work_ms
    loop_ms = step_ms * STEPS
    parts = [(TimeCause.DEVICE_COMPUTE, "matmul/convolution", "", device_ms, True),
             (TimeCause.DISPATCH, "PjitFunction(update)", "python", dispatch_ms, False),
             (TimeCause.UNTRACED, "", "python", untraced_ms, False),
             (TimeCause.HOST_WORK, host_work, "python", host_work_ms, False)]
    busy = device_ms / step_ms
    return HostEvidence(
        host="h", file="h.xplane.pb", bytes=1, events=1, device_kind=DeviceKind.TPU, device_type="TPU v5 Lite",
        devices=1, compute_lanes=["/device:TPU:0/XLA Ops"], step_source=StepSource.STEP_MARKERS, step_marker="train",
        steps=STEPS, step_ms=Distribution.of([step_ms] * STEPS), busy_fraction=busy, loop_busy_fraction=busy,
        dispatches_per_step=1.0, dispatch_ms_per_step=dispatch_ms, untraced_host_ms_per_step=untraced_ms,
        dispatched=[HostActivity(name="PjitFunction(update)", count_per_step=1.0, ms_per_step=dispatch_ms,
                                 share_of_step=dispatch_ms / step_ms)],
        launches=STEPS, distinct_programs=1,
        awaited_launches=1.0 if awaited_ms is not None else 0.0, launch_wait_ms_per_step=awaited_ms or 0.0,
        device_reads=[HostActivity(name=host_work, count_per_step=1.0, ms_per_step=host_work_ms,
                                   share_of_step=host_work_ms / step_ms, reads_device=True)] if reads_device else [],
        programs=[ProgramCalls(name="jit_update(7)", calls=STEPS, ms_per_call=device_ms, device_ms_per_call=device_ms,
                               share_of_device=1.0)],
        attribution=Attribution(loop_ms=loop_ms, steps=STEPS, parts=[
            TimePart(cause=cause, name=name, thread=thread, ms=ms * STEPS, share=ms / step_ms, useful=useful)
            for cause, name, thread, ms, useful in sorted(parts, key=lambda part: -part[3]) if ms > 0]),
    )


_UPDATE = HloProgram(module="jit_update(7)", inputs_bytes=3 << 20, outputs_bytes=3 << 20,
                     parameters={f"params_{i}": "f32[128,128]{1,0}" for i in range(96)})


def _urgent(analysis) -> list:
    return [f for f in analysis.findings if f.priority is not Priority.P2]


def test_a_tiny_program_whose_launch_costs_far_more_than_it_runs_is_launch_bound_not_untraced_host_work():
    # The shape of a 48-layer 128-wide MLP step of 96 parameter arrays, synced every step: 0.04 ms on the device,
    # 0.49 ms dispatching and 0.56 ms untraced on the training thread around each launch.
    analysis = assessed(_loop(device_ms=0.043, dispatch_ms=0.49, untraced_ms=0.56), programs=[_UPDATE])
    (top,) = _urgent(analysis)
    assert top.category is FindingCategory.DISPATCH_OVERHEAD and top.priority is Priority.P0
    assert top.title.startswith("Launch-bound") and "96% of the loop" in top.title and "24x" in top.title
    assert any("0.043 ms of device work per call" in line for line in top.evidence)
    assert any("96 arrays as parameters" in line for line in top.evidence)
    assert "lax.scan" in top.fix and "every N steps" in top.fix and "fewer, larger arrays" in top.fix
    # Untraced Python far longer than the launch is the thread's own code: the untraced cause, not the launch.
    (top,) = _urgent(assessed(_loop(device_ms=0.043, dispatch_ms=0.2, untraced_ms=20.0)))
    assert top.category is FindingCategory.INPUT_BOUND and "untraced" in top.title
    # A program that keeps the device busy for milliseconds per launch is not small whatever its launch costs.
    assert not [f for f in assessed(_loop(device_ms=3.0, dispatch_ms=6.0, untraced_ms=6.0)).findings
                if f.category is FindingCategory.DISPATCH_OVERHEAD]
    # Named host work larger than the launches is the cause.
    (top,) = _urgent(assessed(_loop(device_ms=0.043, dispatch_ms=0.3, untraced_ms=0.1, host_work_ms=5.0)))
    assert top.category is FindingCategory.INPUT_BOUND and "makes its input" in top.title


def test_a_sync_the_python_tracer_names_counts_with_the_launches_it_waits_on():
    # The same loop with the Python tracer on: the wait for each step's result is block_until_ready's.
    host = _loop(device_ms=0.043, dispatch_ms=0.49, untraced_ms=0.06, host_work_ms=0.5,
                 host_work="$array.py:640 block_until_ready", reads_device=True)
    (top,) = _urgent(assessed(host, programs=[_UPDATE]))
    assert top.category is FindingCategory.DISPATCH_OVERHEAD and "96% of the loop" in top.title
    assert any(line.startswith('"$array.py:640 block_until_ready" reads device values back') for line in top.evidence)


def test_a_short_program_launched_and_awaited_every_step_is_launch_bound_whatever_its_ratio_to_the_launch():
    # A 0.71 ms program, launched and synced every step: 0.72 ms a step untraced on the training thread, which waits
    # 1.19 ms from each launch to its program's completion (the launch's latency, the run, the notice of its end).
    awaited = _loop(device_ms=0.71, dispatch_ms=0.001, untraced_ms=0.72, awaited_ms=1.19)
    (top,) = _urgent(assessed(awaited))
    assert top.category is FindingCategory.DISPATCH_OVERHEAD and top.priority is Priority.P0
    assert top.title == "Launch-bound: each step launches a small program and waits for it, 50% of the loop"
    assert any("waits for 100% of its launches" in line and "1.19 ms per step" in line for line in top.evidence)
    assert "every N steps" in top.fix
    # The same times where the thread launches ahead of the device: untraced work of its own, not the launches.
    (top,) = _urgent(assessed(_loop(device_ms=0.71, dispatch_ms=0.001, untraced_ms=0.72)))
    assert top.category is FindingCategory.INPUT_BOUND and "untraced" in top.title
    # Untraced time beyond the wait for the launches is the thread's own code, awaited or not.
    (top,) = _urgent(assessed(_loop(device_ms=0.71, dispatch_ms=0.001, untraced_ms=5.0, awaited_ms=1.19)))
    assert top.category is FindingCategory.INPUT_BOUND


def test_a_program_of_milliseconds_launched_and_awaited_every_step_pays_the_round_trip_every_step():
    # A 2.06 ms program launched and synced every step (a TPU v5e's transposed-convolution decoder): 0.78 ms a step
    # untraced around each launch, which the thread waits 2.78 ms for; no Python tracer, so nothing else is named.
    # What not waiting saves is not measured, so it ranks P2 whatever its share, and it is the idle time's cause.
    analysis = assessed(_loop(device_ms=2.06, dispatch_ms=0.17, untraced_ms=0.78, awaited_ms=2.78))
    assert not _urgent(analysis)
    (top,) = [f for f in analysis.findings if f.category is FindingCategory.DISPATCH_OVERHEAD]
    assert top.priority is Priority.P2
    assert top.title == "Launch-bound: each step launches its program and waits for it, 32% of the loop"
    assert "2.1 ms" in top.what and "every N steps" in top.fix
    assert not [f for f in analysis.findings if "no single cause" in f.title]
    # Launched ahead of the device, the same program is not launch-bound: its untraced time is the thread's own.
    assert not [f for f in assessed(_loop(device_ms=2.06, dispatch_ms=0.17, untraced_ms=0.78)).findings
                if f.category is FindingCategory.DISPATCH_OVERHEAD]
