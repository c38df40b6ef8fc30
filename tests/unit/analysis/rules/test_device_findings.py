"""Findings about device-side work, on evidence written by hand: data movement, op-by-op launches, memory,
and fixes in the words of the framework and hardware the profile came from."""

from __future__ import annotations

import json

import pytest
from evidence_support import ONE_HOT_LOOKUP, allocations, assessed, tool

from mldiag.analysis.host_evidence import (
    Attribution,
    DeviceKind,
    Distribution,
    HostActivity,
    HostEvidence,
    OpTime,
    ProgramCalls,
    StepSource,
    TimeCause,
    TimePart,
)
from mldiag.analysis.evidence import HloProgram
from mldiag.analysis.profile.trace_names import program_base
from mldiag.analysis.reasoning import prompts
from mldiag.analysis.reasoning.validation import EvidenceIndex, why_unsupported
from mldiag.analysis.rules import frameworks
from mldiag.analysis.rules.frameworks import Framework
from mldiag.analysis.xprof import hlo
from mldiag.analysis.xprof.xprof_tools import _device_memory_profile
from mldiag.domain import FindingCategory, HealthStatus, Priority

GIB, MIB = 1 << 30, 1 << 20
HOST_COPY = ("%copy-done.2 = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} copy-done((f32[5,1024,1024,256]{3,2,1,0:T(8,128)}, "
             "f32[5,1024,1024,256]{3,2,1,0:T(8,128)S(5)}, u32[]{:S(2)}) %copy-start.2)")
OFFLOAD = ("%copy-done.1 = f32[5,1024,1024,256]{3,2,1,0:T(8,128)S(5)} copy-done((f32[5,1024,1024,256]"
           "{3,2,1,0:T(8,128)S(5)}, f32[5,1024,1024,256]{3,2,1,0:T(8,128)}, u32[]{:S(2)}) %copy-start.1)")


def _ops(*ops: tuple[str, float], expression: dict[str, str] | None = None, step_ms: float = 10.0) -> list[OpTime]:
    """Ops by their share of device op time; the device works ``step_ms`` per step."""
    return [OpTime(name=name, count_per_step=1.0, self_ms_per_step=share * step_ms, share_of_busy=share,
                   expression=(expression or {}).get(name, "")) for name, share in ops]



def _launched(name: str, calls: int, ms_per_call: float, device_ms_per_call: float) -> ProgramCalls:
    """A jitted function's launches: ``ms_per_call`` on the host, ``device_ms_per_call`` of device work each."""
    return ProgramCalls(name=f"PjitFunction({name})", calls=calls, ms_per_call=ms_per_call,
                        device_ms_per_call=device_ms_per_call, share_of_device=0.0)

def _host(*, kind=DeviceKind.GPU, busy=0.9, top_ops=(), source=StepSource.PROGRAM_RUNS, steps=10, step_ms=10.0,
          dispatches=1.0, dispatched=(), programs=(), activities=(), launches=0, device_type="",
          ms_per_dispatch=0.04) -> HostEvidence:
    """A host whose every dispatch takes the host ``ms_per_dispatch`` (a jit dispatch of a cached program: tens
    to hundreds of microseconds)."""
    return HostEvidence(
        host="h", file="h.xplane.pb", bytes=1, events=1, device_kind=kind,
        device_type=device_type or kind.value.upper(), devices=1, compute_lanes=["lane"], step_source=source,
        steps=steps, step_ms=Distribution.of([step_ms] * steps), busy_fraction=busy, loop_busy_fraction=busy,
        dispatches_per_step=dispatches, dispatch_ms_per_step=ms_per_dispatch * dispatches, top_ops=list(top_ops),
        dispatched=list(dispatched), programs=list(programs), host_activities=list(activities), launches=launches,
    )


def _of(analysis, category):
    return [f for f in analysis.findings if f.category is category]


# --- data movement ------------------------------------------------------------------------------


def test_a_convert_holding_most_of_the_device_is_named_with_its_share_and_a_dtype_fix():
    host = _host(busy=0.9, top_ops=_ops(("loop_convert_fusion.kd", 0.86), ("input_reduce_fusion.kd", 0.14)),
                 dispatched=[HostActivity(name="PjitFunction(add)", count_per_step=1, ms_per_step=1,
                                          share_of_step=0.1, encloses_dispatches=True)])
    (finding,) = _of(assessed(host), FindingCategory.DATA_MOVEMENT)
    assert finding.priority is Priority.P0
    assert finding.title == "Dtype converts take 86% of device time"
    assert any(e.startswith('"loop_convert_fusion.kd": 8.60 ms per step (86.0% of device time)')
               for e in finding.evidence)
    assert "astype" in finding.fix and "jax.jit" in finding.fix and "tf.data" not in finding.fix
    assert "On a CPU" not in finding.fix


def test_converts_on_a_cpu_are_told_to_compute_in_float32_first():
    host = _host(kind=DeviceKind.CPU, busy=0.9, top_ops=_ops(("loop_convert_fusion.kd", 0.86),
                                                             ("input_reduce_fusion.kd", 0.14)))
    (finding,) = _of(assessed(host), FindingCategory.DATA_MOVEMENT)
    assert finding.fix.startswith("On a CPU, where the converts are to and from bfloat16 or float16, compute in "
                                  "float32")
    assert "Otherwise: keep parameters and activations in the compute dtype" in finding.fix


def test_data_movement_on_mostly_idle_devices_is_at_most_p1():
    host = _host(busy=0.38, top_ops=_ops(("loop_convert_fusion.kd", 0.86)))
    (finding,) = _of(assessed(host), FindingCategory.DATA_MOVEMENT)
    assert finding.priority is Priority.P1


def test_data_movement_launched_op_by_op_is_ranked_by_its_share_of_the_step():
    # 200 launches a step, devices busy 3%: the converts' 62% of device time is 1.9% of the step.
    op_by_op = _host(busy=0.03, dispatches=200.0, top_ops=_ops(("wrapped_convert", 0.62), ("fusion", 0.38),
                                                                step_ms=0.3))
    analysis = assessed(op_by_op)
    (finding,) = _of(analysis, FindingCategory.DATA_MOVEMENT)
    assert finding.priority is Priority.P2
    assert {f.category for f in analysis.findings if f.priority is not Priority.P2} == {
        FindingCategory.DISPATCH_OVERHEAD}
    # Where the converts hold a third of the step itself, they are a problem of their own beside the launches.
    busy_op_by_op = _host(busy=0.4, dispatches=200.0, top_ops=_ops(("loop_convert_fusion.kd", 0.85),
                                                                    ("fusion", 0.15), step_ms=4.0))
    (finding,) = _of(assessed(busy_op_by_op), FindingCategory.DATA_MOVEMENT)
    assert finding.priority is Priority.P1


def test_the_figures_a_data_movement_finding_quotes_are_stored_in_the_analysis():
    host = _host(kind=DeviceKind.TPU, busy=1.0, top_ops=_ops(("copy-done.2", 0.5), ("copy-done.1", 0.25),
                                                              ("fusion", 0.25), expression={"copy-done.2": HOST_COPY,
                                                                                            "copy-done.1": OFFLOAD}))
    analysis = assessed(host)
    (movement,) = analysis.data_movement
    assert (movement.kind, movement.host) == ("host_transfer", "h")
    assert movement.ms_per_step == pytest.approx(7.5) and movement.device_ms_per_step == pytest.approx(10.0)
    assert movement.share_of_device == pytest.approx(0.75) and movement.share_of_loop == pytest.approx(0.75)
    assert movement.to_device_bytes_per_step == movement.to_host_bytes_per_step == 5 * GIB
    (finding,) = _of(analysis, FindingCategory.DATA_MOVEMENT)
    assert finding.evidence[0] == ("host-device memory transfers: 7.50 ms per step of 10.00 ms of device op time "
                                   "(75.0%, per device, 1 device; 75.0% of the step)")


BF16_SINE = """HloModule jit_sin, is_scheduled=true

%fused_convert (param_0.5: bf16[8,4096,2048]) -> bf16[8,4096,2048] {
  %param_0.5 = bf16[8,4096,2048]{2,1,0} parameter(0)
  %convert.5 = f32[8,4096,2048]{2,1,0} convert(%param_0.5)
  %sin.1.3 = f32[8,4096,2048]{2,1,0} sine(%convert.5)
  ROOT %convert.1.1 = bf16[8,4096,2048]{2,1,0} convert(%sin.1.3)
}

%fused_transpose (param_0.1: bf16[64,32]) -> bf16[32,64] {
  %param_0.1 = bf16[64,32]{1,0} parameter(0)
  ROOT %transpose.1 = bf16[32,64]{1,0} transpose(%param_0.1), dimensions={1,0}
}

ENTRY %main.1 (x.1: bf16[8,4096,2048], y.1: bf16[64,32]) -> (bf16[8,4096,2048], bf16[32,64]) {
  %x.1 = bf16[8,4096,2048]{2,1,0} parameter(0)
  %y.1 = bf16[64,32]{1,0} parameter(1)
  %loop_convert_fusion = bf16[8,4096,2048]{2,1,0} fusion(%x.1), kind=kLoop, calls=%fused_convert
  %loop_transpose_fusion = bf16[32,64]{1,0} fusion(%y.1), kind=kLoop, calls=%fused_transpose
  ROOT %tuple = (bf16[8,4096,2048]{2,1,0}, bf16[32,64]{1,0}) tuple(%loop_convert_fusion, %loop_transpose_fusion)
}
"""


SCANNED = """HloModule jit_step

%fused_convert (param_0: bf16[256,256]) -> bf16[256,256] {
  %param_0 = bf16[256,256]{1,0} parameter(0)
  %convert.5 = f32[256,256]{1,0} convert(%param_0)
  %sin.1 = f32[256,256]{1,0} sine(%convert.5)
  ROOT %convert.1 = bf16[256,256]{1,0} convert(%sin.1)
}

%fused_cast (param_0.2: bf16[256,256]) -> f32[256,256] {
  %param_0.2 = bf16[256,256]{1,0} parameter(0)
  ROOT %convert.2 = f32[256,256]{1,0} convert(%param_0.2)
}

%body (carry: (s32[], bf16[256,256])) -> (s32[], bf16[256,256]) {
  %carry = (s32[], bf16[256,256]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%carry), index=0
  %h = bf16[256,256]{1,0} get-tuple-element(%carry), index=1
  %convert_sine_fusion = bf16[256,256]{1,0} fusion(%h), kind=kLoop, calls=%fused_convert
  ROOT %next = (s32[], bf16[256,256]{1,0}) tuple(%i, %convert_sine_fusion)
}

%condition (carry.1: (s32[], bf16[256,256])) -> pred[] {
  %carry.1 = (s32[], bf16[256,256]{1,0}) parameter(0)
  ROOT %go = pred[] constant(false)
}

ENTRY %main (x.1: bf16[256,256]) -> f32[256,256] {
  %x.1 = bf16[256,256]{1,0} parameter(0)
  %zero = s32[] constant(0)
  %start = (s32[], bf16[256,256]{1,0}) tuple(%zero, %x.1)
  %loop = (s32[], bf16[256,256]{1,0}) while(%start), condition=%condition, body=%body
  %out = bf16[256,256]{1,0} get-tuple-element(%loop), index=1
  ROOT %cast_fusion = f32[256,256]{1,0} fusion(%out), kind=kLoop, calls=%fused_cast
}
"""


def test_a_fusion_that_computes_inside_a_loop_s_body_is_a_computing_kernel_too():
    (program,) = hlo.program_buffers([hlo.parse_module("jit_step(5)", SCANNED)])
    assert program.computing_fusions == ["convert_sine_fusion"]


def test_a_fusion_named_after_its_root_convert_that_computes_is_not_data_movement():
    programs = hlo.program_buffers([hlo.parse_module("jit_sin(13)", BF16_SINE)])
    assert programs[0].computing_fusions == ["loop_convert_fusion"]
    host = _host(top_ops=_ops(("loop_convert_fusion.kd", 0.6), ("loop_transpose_fusion.kd", 0.4),
                              expression={"loop_convert_fusion.kd": "loop_convert_fusion",
                                          "loop_transpose_fusion.kd": "loop_transpose_fusion"}))
    assert [f.title for f in _of(assessed(host), FindingCategory.DATA_MOVEMENT)] == [
        "Dtype converts take 60% of device time", "Layout transposes take 40% of device time"]
    analysis = assessed(host, programs=programs)
    assert [f.title for f in _of(analysis, FindingCategory.DATA_MOVEMENT)] == [
        "Layout transposes take 40% of device time"]
    assert [movement.kind for movement in analysis.data_movement] == ["layout"]


def test_a_layout_transpose_before_a_gpu_convolution_gets_a_channels_last_fix():
    host = _host(top_ops=_ops(("input_transpose_fusion.kd", 0.51), ("Cijk_Ailk_Bljk_BBS_BH_MT256x128x64", 0.42),
                              ("Im3d2Col.kd", 0.03), ("loop_transpose_fusion.kd", 0.02)))
    (finding,) = _of(assessed(host), FindingCategory.DATA_MOVEMENT)
    assert finding.title == "Layout transposes take 53% of device time"
    assert finding.evidence[1].startswith('"input_transpose_fusion.kd"')
    assert "NDHWC" in finding.fix and "on TPU" not in finding.fix


def test_small_data_movement_is_not_a_finding_and_device_buffer_copies_are_not_layouts():
    host = _host(top_ops=_ops(("fusion.3", 0.9), ("loop_convert_fusion", 0.05), ("__amd_rocclr_copyBuffer.kd", 0.05)))
    assert not _of(assessed(host), FindingCategory.DATA_MOVEMENT)


def test_tpu_waits_on_host_memory_copies_are_data_movement_not_compute_busy():
    host = _host(kind=DeviceKind.TPU, busy=1.0, top_ops=_ops(("copy-done.2", 0.5), ("copy-done.1", 0.47),
                                                              ("broadcast_add_fusion", 0.03),
                                                              expression={"copy-done.2": HOST_COPY,
                                                                          "copy-done.1": OFFLOAD}))
    roofline = tool("get_roofline_model", {"program": {"bound_by": "HBM", "roofline_efficiency_percent": "4.35%"}})
    analysis = assessed(host, tools=[roofline])
    assert analysis.metrics.busy_fraction == pytest.approx(0.03)
    assert analysis.health.idle_fraction == pytest.approx(0.97)
    assert analysis.status is HealthStatus.NEEDS_ATTENTION and analysis.health.optimal is False
    assert not _of(analysis, FindingCategory.COMPUTE)
    (finding,) = _of(analysis, FindingCategory.DATA_MOVEMENT)
    assert finding.priority is Priority.P0 and finding.title == "Host-device memory transfers take 97% of device time"
    assert "moved per step: 5.00 GiB host to device, 5.00 GiB device to host (from the copies' HLO shapes)" \
        in finding.evidence
    assert "jax.device_put" in finding.fix and "pinned_host" in finding.fix


def test_copies_within_device_memory_are_not_host_transfers():
    hbm_copy = HOST_COPY.replace("S(5)", "")
    host = _host(kind=DeviceKind.TPU, top_ops=_ops(("copy-done.2", 0.9), expression={"copy-done.2": hbm_copy}))
    assert not _of(assessed(host), FindingCategory.DATA_MOVEMENT)


@pytest.mark.parametrize(("name", "kind"), [
    ("MemcpyDtoH", "Host-device memory transfers"), ("CopyHostToDevice", "Host-device memory transfers"),
    ("convert.12", "Dtype converts"), ("transpose_copy_fusion", "Layout transposes"), ("copy.3", "Layout transposes"),
    ("void cudnn::ops::nchwToNhwcKernel<float>", "Layout transposes"),
])
def test_data_movement_is_told_by_the_op_name(name, kind):
    (finding,) = _of(assessed(_host(top_ops=_ops((name, 0.3), ("fusion", 0.7)))), FindingCategory.DATA_MOVEMENT)
    assert finding.title == f"{kind} take 30% of device time"


ROW_WRITE = hlo.parse_module("jit_scatter(11)", """HloModule jit_scatter

ENTRY %main (args_0_.1: f32[32,2097152], args_1_.1: f32[2097152]) -> f32[32,2097152] {
  %args_0_.1 = f32[32,2097152]{1,0} parameter(0)
  %args_1_.1 = f32[2097152]{0} parameter(1)
  %copy.3 = f32[32,2097152]{1,0} copy(%args_0_.1)
  %row.2 = f32[1,2097152]{1,0} bitcast(%args_1_.1)
  %zero.4 = s32[] constant(0)
  %at.5 = s32[] constant(3)
  ROOT %dynamic-update-slice.1 = f32[32,2097152]{1,0} dynamic-update-slice(%copy.3, %row.2, %at.5, %zero.4)
}
""")
WHOLE_COPY = "%copy.3 = f32[32,2097152]{1,0:T(8,128)} copy(f32[32,2097152]{1,0:T(8,128)} %args_0_.1)"


def test_an_update_that_copies_its_whole_argument_first_is_told_to_update_in_place():
    # 32 eager x.at[i].set(row) a step: each run copies the 256 MiB array, then writes one row into the copy.
    ops = _ops(("copy.3", 0.6), ("dynamic-update-slice.1", 0.2), ("fusion", 0.2),
               expression={"copy.3": WHOLE_COPY})
    programs = hlo.program_buffers([ROW_WRITE])
    host = _host(kind=DeviceKind.TPU, busy=1.0, top_ops=ops, steps=10, programs=[
        ProgramCalls(name="jit_scatter(11)", calls=320, ms_per_call=0.25, device_ms_per_call=0.25,
                     share_of_device=0.8),
        ProgramCalls(name="jit_step(12)", calls=10, ms_per_call=2.0, device_ms_per_call=2.0, share_of_device=0.2)])
    analysis = assessed(host, programs=programs)
    (finding,) = _of(analysis, FindingCategory.DATA_MOVEMENT)
    assert finding.priority is Priority.P0
    assert finding.title == "Copies of undonated arguments: the updates that copy them take 80% of device time"
    assert finding.impact.startswith("8.0 ms of device work per step (80% of the step)")
    assert 'program "jit_scatter(11)" copies the argument first' in " ".join(finding.evidence)
    assert "donate_argnums" in finding.fix and "jnp.stack" in finding.fix
    (movement,) = analysis.data_movement
    assert movement.kind == "undonated"
    # What donating saves: the updates' whole time, the copies (60 %) and the writes into them.
    assert (movement.share_of_loop, movement.updates_share_of_loop) == (pytest.approx(0.6), pytest.approx(0.8))
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    # A program whose copies are a small part of it is a step that also copies an argument, not an update.
    host.top_ops = _ops(("copy.3", 0.12), ("fusion", 0.88), expression={"copy.3": WHOLE_COPY})
    analysis = assessed(host, programs=programs)
    (finding,) = _of(analysis, FindingCategory.DATA_MOVEMENT)
    assert (finding.title, finding.priority) == ("Copies of undonated arguments take 12% of device time", Priority.P2)
    assert analysis.data_movement[0].updates_share_of_loop == 0.0
    # A copy into another layout, or of what is not an argument, stays a layout change.
    relaid = WHOLE_COPY.replace("{1,0:T(8,128)} %args", "{0,1:T(8,128)} %args")
    for expression in (relaid, WHOLE_COPY.replace("%args_0_.1", "%gte.7")):
        host.top_ops = _ops(("copy.3", 0.6), ("dynamic-update-slice.1", 0.2), ("fusion", 0.2),
                            expression={"copy.3": expression})
        analysis = assessed(host, programs=programs)
        (finding,) = _of(analysis, FindingCategory.DATA_MOVEMENT)
        assert finding.title == "Layout transposes take 60% of device time"
        # An argument copied whole into another layout is stored in a layout the program does not read it in.
        assert finding.fix.startswith("Store the argument in the layout the program reads") is (expression == relaid)
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


@pytest.mark.parametrize(("accelerator", "busy", "priority"), [
    ("TPU v5 Lite", 0.96, Priority.P0), ("TPU v5 Lite", 0.3, Priority.P1), ("", 0.96, None)])
def test_programs_run_on_the_cpu_beside_an_idle_accelerator_are_told_to_move_to_it(accelerator, busy, priority):
    host = _host(kind=DeviceKind.CPU, busy=busy, steps=10, step_ms=8.8, programs=[
        ProgramCalls(name="PjitFunction(step)", calls=10, ms_per_call=0.13, device_ms_per_call=8.4,
                     share_of_device=1.0)])
    host.idle_accelerator = accelerator
    analysis = assessed(host)
    found = [f for f in analysis.findings if f.title.startswith("The programs ran on the CPU")]
    assert [f.priority for f in found] == ([priority] if priority else [])
    if priority:
        (finding,) = found
        assert finding.title == f"The programs ran on the CPU while the TPU v5 Lite idled: {busy:.0%} of the loop"
        assert "jax.devices('cpu')" in finding.fix and "x.devices()" in finding.fix
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


@pytest.mark.parametrize(("classes", "named"), [(32768, True), (4096, True), (1024, False)])
def test_matmuls_by_a_wide_one_hot_matrix_are_told_to_look_the_rows_up(classes, named):
    module = hlo.parse_module("jit_step(5)", ONE_HOT_LOOKUP.replace("8192", str(classes)))
    host = _host(kind=DeviceKind.TPU, busy=0.9, top_ops=_ops(("fusion.7", 0.54), ("fusion", 0.46)), programs=[
        ProgramCalls(name="jit_step(5)", calls=10, ms_per_call=10.0, device_ms_per_call=10.0, share_of_device=1.0)])
    analysis = assessed(host, kernels=hlo.kernel_work([module]))
    found = [f for f in analysis.findings if f.title.startswith("Matmuls by a one-hot matrix")]
    assert len(found) == named
    if named:
        (finding,) = found
        assert finding.priority is Priority.P1
        assert finding.title == f"Matmuls by a one-hot matrix of {classes:,} classes take 46% of device time"
        assert finding.impact.startswith("4.6 ms of device time per step (41% of the loop)")
        assert "jnp.take(table, ids, axis=0)" in finding.fix
        assert [(k.name, k.one_hot_classes) for k in analysis.kernels] == [("fusion.7", 0), ("fusion", classes)]
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


def test_tensorflow_host_to_device_memcpy_gets_a_tensorflow_fix():
    host = _host(top_ops=_ops(("MemcpyHtoD", 0.6), ("void tensorflow::functor::FillPhiloxRandomKernelLaunch", 0.4)))
    (finding,) = _of(assessed(host), FindingCategory.DATA_MOVEMENT)
    assert finding.title == "Host-device memory transfers take 60% of device time"
    assert "tf.data" in finding.fix and "jax" not in finding.fix


# --- host callbacks ---------------------------------------------------------------------------------


def _printing_step(launch_share: float) -> HostEvidence:
    """A TPU step whose program prints its loss with jax.debug.print: 1.4 ms of 7.8 in the callback's recv."""
    recv = "%debug_callback.11 = (f32[], token[]) recv-done(%debug_callback.10), channel_id=2, is_host_transfer=true"
    host = _host(kind=DeviceKind.TPU, busy=0.4, steps=20, step_ms=7.8, source=StepSource.STEP_MARKERS,
                 top_ops=_ops(("fusion.1", 0.7), ("debug_callback.11", 0.18), expression={"debug_callback.11": recv},
                              step_ms=7.8))
    callback = 0.18 + launch_share
    host.attribution = Attribution(loop_ms=156.0, steps=20, parts=[
        TimePart(cause=TimeCause.DEVICE_COMPUTE, name="fusion", ms=0.4 * 156, share=0.4, useful=True),
        TimePart(cause=TimeCause.TRANSFERS, name="host callback", ms=callback * 156, share=callback)])
    return host


@pytest.mark.parametrize(("launch_share", "priority"), [(0.0, Priority.P1), (0.29, Priority.P0)])
def test_a_debug_print_in_the_step_costs_its_callback_and_the_launches_of_its_program(launch_share, priority):
    (finding,) = [f for f in assessed(_printing_step(launch_share)).findings if f.title.startswith("Host callback")]
    assert finding.priority is priority
    assert "jax.debug.print" in finding.fix and "jnp.sort" not in finding.fix


@pytest.mark.parametrize(("dispatch", "module"), [
    ("PjitFunction(step)", "jit_step(26)"), ("PjitFunction(<lambda>)", "jit__lambda(6608053989532457734)"),
    ("PjitFunction(train.step)", "jit_train.step.1(12)"),
])
def test_a_dispatch_and_its_program_have_the_same_base_name(dispatch, module):
    assert program_base(dispatch) == program_base(module)


# --- op-by-op launches ----------------------------------------------------------------------------


def _op_by_op(kind=DeviceKind.GPU, name="PjitFunction(add)") -> HostEvidence:
    return _host(kind=kind, busy=0.12, source=StepSource.PROFILE_WINDOW, steps=1, step_ms=32.7, dispatches=81,
                 launches=81, ms_per_dispatch=0.2, dispatched=[HostActivity(name=name, count_per_step=12, ms_per_step=2.45,
                                                       share_of_step=0.07, encloses_dispatches=True)],
                 programs=[ProgramCalls(name=name, calls=12, ms_per_call=0.2, device_ms_per_call=0.06,
                                        share_of_device=0.2)])


def test_op_by_op_launches_without_steps_are_counted_in_the_capture_not_per_step():
    (finding,) = _of(assessed(_op_by_op()), FindingCategory.DISPATCH_OVERHEAD)
    assert finding.priority is Priority.P0
    assert finding.title == "Op-by-op execution: 81 small launches with the devices idle 88% between them"
    assert "per step" not in " ".join([finding.title, *finding.evidence, finding.impact])
    assert finding.fix.startswith("Wrap the whole step in jax.jit") and "command buffers" in finding.fix
    assert "(on CPU" not in finding.what and "GPU streams" in finding.what


def test_one_small_function_called_over_and_over_each_step_is_told_to_batch_its_calls():
    # 64 calls a step of one jitted forward pass on single examples, each shorter on the device than its launch.
    name = "PjitFunction(forward)"
    host = _host(kind=DeviceKind.TPU, busy=0.12, steps=15, step_ms=9.9, dispatches=64, ms_per_dispatch=0.13,
                 dispatched=[HostActivity(name=name, count_per_step=64, ms_per_step=8.2, share_of_step=0.83)],
                 programs=[ProgramCalls(name=name, calls=960, ms_per_call=0.13, device_ms_per_call=0.02,
                                        share_of_device=1.0)])
    (finding,) = _of(assessed(host), FindingCategory.DISPATCH_OVERHEAD)
    assert finding.title == "Many calls of one small jitted function: 64 jit dispatches per step"
    assert "jax.vmap" in finding.fix and "Wrap the whole step" not in finding.fix
    assert any('"PjitFunction(forward)": 64 per step' in line for line in finding.evidence)


@pytest.mark.parametrize(("counts", "growing"), [
    (list(range(4, 34)), True),  # sum(losses) over a list of device scalars one longer each step
    ([4, 6, 8, 10, 12, 14, 16, 18, 20, 22], True),  # two values appended a step
    ([18] * 30, False),  # as many every step
    ([4, 30, 5, 31, 6, 29, 7, 33, 4, 30], False),  # alternating steps, no trend
])
def test_dispatches_that_grow_every_step_are_a_list_reduced_op_by_op_and_told_to_keep_a_running_value(counts,
                                                                                                     growing):
    name = "PjitFunction(add)"
    host = _host(kind=DeviceKind.TPU, busy=0.4, steps=len(counts), step_ms=7.4, dispatches=sum(counts) / len(counts),
                 ms_per_dispatch=0.25,
                 dispatched=[HostActivity(name=name, count_per_step=16, ms_per_step=4.6, share_of_step=0.6)],
                 programs=[ProgramCalls(name=name, calls=480, ms_per_call=0.25, device_ms_per_call=0.002,
                                        share_of_device=0.01)])
    host.series.dispatches = counts
    analysis = assessed(host)
    (finding,) = _of(analysis, FindingCategory.DISPATCH_OVERHEAD)
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    assert ("growing every step" in finding.title) is growing
    assert finding.fix.startswith("Keep a running value on the device") is growing
    if growing:
        assert finding.title.endswith(f"from {counts[0]} to {counts[-1]}")
        assert (f"the dispatches grow by {counts[1] - counts[0]} every step: {counts[0]} in the first step, "
                f"{counts[-1]} in step {len(counts)}") in finding.evidence


@pytest.mark.parametrize(("growing", "priority"), [(True, Priority.P1), (False, None)])
def test_launches_that_grow_every_step_in_a_busy_loop_are_a_cost_that_grows_with_the_run(growing, priority):
    # On a CPU the eager adds of sum(losses) run as device work: the loop is busy, not op by op, yet their launches
    # take 18 % of the step now and one more every step.
    counts = list(range(4, 34)) if growing else [18] * 30
    host = _host(kind=DeviceKind.CPU, busy=0.9, steps=30, step_ms=8.28, dispatches=18.5, ms_per_dispatch=0.1,
                 dispatched=[HostActivity(name="PjitFunction(add)", count_per_step=16.5, ms_per_step=1.48,
                                          share_of_step=0.18)])
    host.series.dispatches = counts
    analysis = assessed(host)
    found = [f for f in analysis.findings if f.title.startswith("Launches that grow every step")]
    assert [f.priority for f in found] == ([priority] if growing else [])
    if growing:
        assert found[0].title.endswith("4 jit dispatches in the first step, 33 in the last, 18% of the step")
        assert found[0].fix.startswith("Keep a running value on the device")
        assert why_unsupported(found[0], EvidenceIndex(analysis)) == ""


@pytest.mark.parametrize(("eager_device_ms", "op_by_op"), [(0.005, True), (0.1, False)])
def test_many_launches_of_small_programs_beside_a_few_large_ones_are_op_by_op(eager_device_ms, op_by_op):
    # 8 micro-batch gradients a step that compute longer than the whole step's dispatch, and 54 eager slices and
    # adds; op by op only where those eager programs run shorter on the devices than their launch.
    host = _host(kind=DeviceKind.CPU, busy=0.36, steps=10, step_ms=5.8, dispatches=62, ms_per_dispatch=0.027,
                 dispatched=[HostActivity(name="PjitFunction(dynamic_slice)", count_per_step=16, ms_per_step=0.82,
                                          share_of_step=0.14)],
                 programs=[_launched("mlp_loss", 80, 0.04, 0.23), _launched("update", 10, 0.04, 0.1),
                           _launched("dynamic_slice", 160, 0.05, eager_device_ms),
                           _launched("squeeze", 160, 0.02, eager_device_ms),
                           _launched("add", 210, 0.01, eager_device_ms)])
    found = _of(assessed(host), FindingCategory.DISPATCH_OVERHEAD)
    assert bool(found) is op_by_op
    if op_by_op:
        assert found[0].title == "Op-by-op execution: 62 jit dispatches per step" and "lax.scan" in found[0].fix


def test_op_by_op_on_cpu_gets_no_gpu_advice():
    (finding,) = _of(assessed(_op_by_op(kind=DeviceKind.CPU)), FindingCategory.DISPATCH_OVERHEAD)
    assert "CUDA" not in finding.fix and "XLA CPU threads" in finding.what


@pytest.mark.parametrize(("names", "framework"), [
    (["PjitFunction(step)"], Framework.JAX),
    (["jit_f(1219)"], Framework.JAX),
    (["__inference_train_function_123", "Iterator::Prefetch"], Framework.TENSORFLOW),
    (["void tensorflow::functor::FillPhiloxRandomKernelLaunch<float>"], Framework.TENSORFLOW),
    (["EagerExecute: MatMul"], Framework.TENSORFLOW_EAGER),
    (["torch_xla::SyncTensorsGraph", "PjitFunction(step)"], Framework.PYTORCH_XLA),
    (["fusion.3"], Framework.UNKNOWN),
])
def test_the_framework_is_told_from_the_names_in_the_trace(names, framework):
    host = _host(activities=[HostActivity(name=n, count_per_step=1, ms_per_step=1, share_of_step=0.1) for n in names])
    assert frameworks.detect([host]) is framework


def test_eager_tensorflow_is_told_to_use_tf_function():
    assert frameworks.one_program_fix(Framework.TENSORFLOW_EAGER, on_gpu=False).startswith("Run the step as a graph")


def test_host_work_fixes_name_an_input_pipeline_only_where_the_trace_has_one():
    assert "tf.data" not in frameworks.host_work_fix(Framework.JAX, input_pipeline=False)
    assert "grain" not in frameworks.host_work_fix(Framework.JAX, input_pipeline=False)
    assert "grain" in frameworks.host_work_fix(Framework.JAX, input_pipeline=True)
    graph = frameworks.host_work_fix(Framework.TENSORFLOW, input_pipeline=False)
    assert "tf.data" not in graph and "jit_compile=True" in graph
    assert ".prefetch(tf.data.AUTOTUNE)" in frameworks.host_work_fix(Framework.TENSORFLOW, input_pipeline=True)


def test_compiler_findings_do_not_count_zero_dispatches():
    issue = {"module": "jit_swapaxes(30)", "instruction": "transpose.1.1", "runs_as": "wrapped_transpose",
             "detail": "the whole program only transposes its input"}
    from mldiag.analysis.evidence import HloIssue

    analysis = assessed(_host(), hlo_issues={"detect_unfused_reshapes": [HloIssue(**issue)]})
    (finding,) = _of(analysis, FindingCategory.COMPILER)
    assert "0 dispatches" not in finding.impact and "0 op-by-op" not in " ".join(finding.evidence)


# --- where device time goes ----------------------------------------------------------------------

BF16_ADD = """HloModule jit_add, is_scheduled=true

%fused_convert (param_0.4: bf16[1024], param_1.5: bf16[1024]) -> bf16[1024] {
  %param_1.5 = bf16[1024]{0} parameter(1)
  %convert.4 = f32[1024]{0} convert(%param_1.5)
  %param_0.4 = bf16[1024]{0} parameter(0)
  %convert.1.3 = f32[1024]{0} convert(%param_0.4)
  %add.1.3 = f32[1024]{0} add(%convert.4, %convert.1.3)
  ROOT %convert.2.1 = bf16[1024]{0} convert(%add.1.3)
}

ENTRY %main.1 (x.1: bf16[1024], y.1: bf16[1024]) -> bf16[1024] {
  %y.1 = bf16[1024]{0} parameter(1)
  %x.1 = bf16[1024]{0} parameter(0)
  ROOT %loop_convert_fusion = bf16[1024]{0} fusion(%y.1, %x.1), kind=kLoop, calls=%fused_convert
}
"""
RANDOM_BITS = """HloModule jit__normal

%fused_convert (param_0.1: u32[1024]) -> f32[1024] {
  %param_0.1 = u32[1024]{0} parameter(0)
  %constant_9 = u32[] constant(9)
  %broadcast.3 = u32[1024]{0} broadcast(%constant_9), dimensions={}
  %shift-right-logical.1 = u32[1024]{0} shift-right-logical(%param_0.1, %broadcast.3)
  ROOT %convert.7 = f32[1024]{0} convert(%shift-right-logical.1)
}

ENTRY %main.2 (key.1: u32[1024]) -> f32[1024] {
  %key.1 = u32[1024]{0} parameter(0)
  ROOT %loop_convert_fusion = f32[1024]{0} fusion(%key.1), kind=kLoop, calls=%fused_convert
}
"""
ELEMENTWISE = "element-wise f32 math between bf16 converts (sine, add; root convert)"


def _elementwise_kernels() -> list[hlo.KernelWork]:
    return hlo.kernel_work([hlo.parse_module("jit_sin(13)", BF16_SINE), hlo.parse_module("jit_add(11)", BF16_ADD),
                            hlo.parse_module("jit__normal(9)", RANDOM_BITS)])


def _launching(*programs: str, top_ops: list[OpTime]) -> HostEvidence:
    """Element-wise programs dispatched one by one, no steps: the host ``programs`` each launched 5 times."""
    calls = [ProgramCalls(name=f"PjitFunction({p})", calls=5, ms_per_call=0.1, device_ms_per_call=0.08,
                          share_of_device=1 / len(programs)) for p in programs]
    return _host(busy=0.38, source=StepSource.PROFILE_WINDOW, steps=1, step_ms=10.0, dispatches=55, launches=55,
                 programs=calls, top_ops=top_ops, ms_per_dispatch=0.1)


def _device_lines(finding) -> list[str]:
    return [line for line in finding.evidence if line.startswith("device time:")]


def test_a_kernel_holding_most_of_the_device_is_named_with_its_share_and_what_its_hlo_computes():
    ops = _ops(("loop_convert_fusion.kd", 0.852), ("input_reduce_fusion.kd", 0.084), ("fusion_5.kd", 0.048),
               expression={"loop_convert_fusion.kd": "loop_convert_fusion"}, step_ms=3.881)
    analysis = assessed(_launching("sin", "add", top_ops=ops), kernels=_elementwise_kernels())
    (kernel,) = analysis.kernels
    assert (kernel.name, kernel.hlo_op, kernel.share_of_device) == ("loop_convert_fusion.kd", "loop_convert_fusion",
                                                                     0.852)
    # jit__normal holds a loop_convert_fusion too, but the capture never launched it.
    assert kernel.programs == ["jit_add(11)", "jit_sin(13)"] and kernel.what == ELEMENTWISE
    line = ('device time: 85.2% of device op time (3.31 ms per capture, 1 run) in '
            f'{ELEMENTWISE}, kernel "loop_convert_fusion.kd"')
    for category in (FindingCategory.DISPATCH_OVERHEAD, FindingCategory.OTHER):
        (finding,) = _of(analysis, category)
        assert _device_lines(finding) == [line]
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    digest = prompts.evidence_digest(analysis, [])
    assert digest["kernels"][0]["share_of_device"] == 0.852 and digest["kernels"][0]["what"] == ELEMENTWISE


def test_without_launches_that_tell_every_program_holding_the_kernel_describes_it():
    ops = _ops(("loop_convert_fusion.kd", 0.9), expression={"loop_convert_fusion.kd": "loop_convert_fusion"})
    (kernel,) = assessed(_launching("unrelated", top_ops=ops), kernels=_elementwise_kernels()).kernels
    assert kernel.programs == ["jit__normal(9)", "jit_add(11)", "jit_sin(13)"]
    assert kernel.what.startswith("element-wise f32 math between bf16 converts (sine, add, shift-right-logical;")


@pytest.mark.parametrize(("shares", "named"), [
    ((0.29, 0.29, 0.29, 0.13), []),
    ((0.30, 0.29, 0.29, 0.12), ["a", "b", "c"]),
    ((0.70, 0.12, 0.09, 0.09), ["a", "b"]),
])
def test_kernels_are_named_only_where_one_holds_at_least_30_percent_with_the_next_ones_of_10(shares, named):
    host = _launching("f", top_ops=_ops(*zip("abcd", shares)))
    assert [k.name for k in assessed(host).kernels] == named


def test_a_kernel_the_profile_has_no_hlo_for_is_named_by_its_name():
    analysis = assessed(_launching("f", top_ops=_ops(("void gemv_kernel<float>", 0.6), ("fusion", 0.4))))
    (finding,) = _of(analysis, FindingCategory.DISPATCH_OVERHEAD)
    assert _device_lines(finding)[0] == ('device time: 60.0% of device op time (6.00 ms per capture, 1 run) in kernel '
                                         '"void gemv_kernel<float>"')
    assert analysis.kernels[0].what == "" and analysis.kernels[1].hlo_op == ""


GEMM = """HloModule jit_dot

ENTRY %main.1 (a.1: bf16[1024,1024], b.1: bf16[1024,1024]) -> bf16[1024,1024] {
  %b.1 = bf16[1024,1024]{1,0} parameter(1)
  %a.1 = bf16[1024,1024]{1,0} parameter(0)
  %custom-call.1 = (bf16[1024,1024]{1,0}, s8[4194304]{0}) custom-call(%a.1, %b.1), custom_call_target="__cublas$gemm"
  ROOT %get-tuple-element.1 = bf16[1024,1024]{1,0} get-tuple-element(%custom-call.1), index=0
}
"""


def test_the_roofline_finding_names_a_library_kernel_by_the_custom_call_it_runs():
    gemm = "Cijk_Ailk_Bljk_BBS_BH_MT256x224x64_" + "X" * 500 + ".kd"
    host = _host(busy=0.9, top_ops=_ops((gemm, 0.53), ("wrapped_broadcast.kd", 0.3), ("fusion.1", 0.17),
                                        expression={gemm: "custom-call.1"}))
    roofline = tool("get_roofline_model", {"program": {"bound_by": "HBM", "roofline_efficiency_percent": "1.26%"}})
    analysis = assessed(host, tools=[roofline], kernels=hlo.kernel_work([hlo.parse_module("jit_dot(21)", GEMM)]))
    (compute,) = _of(analysis, FindingCategory.COMPUTE)
    lines = _device_lines(compute)
    assert lines[0] == (f'device time: 53.0% of device op time (5.30 ms per step, 1 run) in custom call '
                        f'"__cublas$gemm" returning bf16, kernel "{gemm}"')
    assert len(lines) == 3 and not [e for e in compute.evidence if "of busy time" in e]
    assert analysis.kernels[0].custom_calls == ["__cublas$gemm"]
    assert why_unsupported(compute, EvidenceIndex(analysis)) == ""


def test_a_tpu_op_is_matched_to_its_hlo_by_the_name_in_its_hlo_text():
    text = "%loop_convert_fusion = bf16[1024]{0} fusion(bf16[1024]{0} %x.1), kind=kLoop, calls=%fused_convert"
    host = _launching("add", top_ops=_ops(("loop_convert_fusion", 0.8), expression={"loop_convert_fusion": text}))
    host.device_kind = DeviceKind.TPU
    (kernel,) = assessed(host, kernels=_elementwise_kernels()).kernels
    assert kernel.hlo_op == "loop_convert_fusion" and kernel.programs == ["jit_add(11)"]
    assert kernel.what == "element-wise f32 math between bf16 converts (add; root convert)"


# --- hardware and roofline ----------------------------------------------------------------------


def test_amd_gpus_are_named_by_their_architecture():
    host = _host(device_type="AMD GPU (compute capability 9.4)")
    analysis = assessed(host, tools=[tool("get_device_information", {"device_type": "AMD GPU - gfx942"})])
    assert analysis.hosts[0].device_type == "AMD GPU (gfx942)"
    assert "compute capability" not in analysis.summary and "(gfx942)" in analysis.summary


def test_roofline_figures_carry_the_custom_call_caveat_with_the_same_share():
    tools = [tool("get_roofline_model", {"program": {"bound_by": "HBM", "roofline_efficiency_percent": "22.52%"}}),
             tool("get_kpi_metrics", {"custom_call_share_pct": 56.54})]
    analysis = assessed(_host(busy=0.92), tools=tools)
    (compute,) = _of(analysis, FindingCategory.COMPUTE)
    assert compute.title.endswith("(custom calls not counted)")
    caveat = [e for e in compute.evidence if "custom calls take" in e]
    assert caveat == ["custom calls take 56.54% of device time (custom_call_share_pct 56.54); XLA's cost model "
                      "gives them 0 FLOPs, so the roofline efficiency does not count their work (XProf's caveat)"]
    (kernel,) = _of(analysis, FindingCategory.KERNEL)
    assert "56.54" in kernel.evidence[0]


# --- memory -------------------------------------------------------------------------------------


class _MemoryClient:
    """XProf's client as the memory tool sees it: each host's memory_profile answer."""

    def __init__(self, by_host: dict[str, dict[str, tuple[int, int]]]):
        self.by_host = {host: {"memoryProfilePerAllocator": {
            name: {"profileSummary": {"memoryCapacity": str(capacity), "peakStats": {"peakBytesInUse": str(peak)}}}
            for name, (capacity, peak) in allocators.items()}} for host, allocators in by_host.items()}
        self.asked: list[str | None] = []

    def select_paths(self, session_id):
        return [f"{host}.xplane.pb" for host in self.by_host]

    def get_hosts(self, session_id, with_metadata=False):
        return [{"hostname": host} for host in self.by_host]

    def fetch(self, *, tool_name, session_id, host=None):
        self.asked.append(host)
        return "application/json", json.dumps(self.by_host[host or next(iter(self.by_host))]).encode()


def _memory_profile(allocators, **other_hosts):
    client = _MemoryClient({"h": allocators, **other_hosts})
    return _device_memory_profile(type("Context", (), {"client": client, "session_id": "s"})()), client


def test_device_memory_comes_from_device_allocators_never_the_host_one():
    profile, client = _memory_profile({"GPU_4_bfc": (15_477_102_400, 6_208_853_760),
                                       "gpu_host_bfc": (64 * GIB, 605_952), "GPU_6_bfc": (15_477_102_400, 6_210_111_488)})
    assert profile["memory_capacity_gib"] == 14.41 and profile["peak_memory_usage_gib"] == 5.78
    assert profile["allocator"] == "GPU_6_bfc" and profile["host_allocators_ignored"] == ["gpu_host_bfc"]
    assert client.asked == [None]


def test_each_host_of_a_multi_host_session_is_read_for_its_device_memory():
    profile, client = _memory_profile({"0": (32 * GIB, 20 * GIB)}, worker1={"0": (32 * GIB, 21 * GIB)})
    assert client.asked == ["h", "worker1"]
    assert profile["allocator"] == "worker1:0" and profile["peak_memory_usage_gib"] == 21.0


def test_a_profile_with_only_host_allocators_has_no_device_memory():
    profile, _ = _memory_profile({"xla_gpu_host_bfc": (64 * GIB, 256)})
    assert profile["memory_capacity_gib"] == -1.0 and profile["peak_memory_usage_gib"] == -1.0


def _stepping_host(kind=DeviceKind.CPU) -> HostEvidence:
    return _host(kind=kind, source=StepSource.STEP_MARKERS, dispatched=[HostActivity(
        name="PjitFunction(_mlp_step)", count_per_step=1, ms_per_step=1, share_of_step=0.1, encloses_dispatches=True)])


def test_peak_memory_is_the_step_programs_not_a_one_off_init():
    analysis = assessed(_stepping_host(), tools=[allocations(("jit__normal(16)", 4.0), ("jit__mlp_step(26)", 3.5))])
    assert analysis.metrics.peak_memory_bytes == int(3.5 * MIB)
    assert '"jit__mlp_step(26)"' in analysis.metrics.peak_memory_source
    assert analysis.metrics.memory_capacity_bytes is None and analysis.health.memory_fraction is None


def test_an_optimal_profile_without_a_capacity_does_not_call_memory_pressure_low():
    analysis = assessed(_stepping_host(), tools=[allocations(("jit__mlp_step(26)", 3.5))])
    assert analysis.status is HealthStatus.OPTIMAL
    assert ("Compute utilisation is high and idle time, communication and compilation are low (the device's "
            "memory capacity is unknown, so its peak memory is not weighed against it)") in analysis.summary
    assert "memory pressure" not in analysis.summary


STEP_WITH_TEMPORARIES = """HloModule jit__mlp_step

ENTRY %main (x: f32[1024,256], w: f32[256,256]) -> f32[1024,256] {
  %x = f32[1024,256]{1,0} parameter(0)
  %w = f32[256,256]{1,0} parameter(1)
  %scores = f32[1024,1024,64]{2,1,0} broadcast(%x), dimensions={0,2}
  %act = f32[1024,256]{1,0} fusion(%scores, %w), kind=kLoop, calls=%fused
  ROOT %out = (f32[1024,256]{1,0}) tuple(%act)
}
"""


def test_program_buffers_are_its_parameters_results_and_largest_intermediate():
    (program,) = hlo.program_buffers([hlo.parse_module("jit__mlp_step(26)", STEP_WITH_TEMPORARIES)])
    assert (program.inputs_bytes, program.outputs_bytes) == (1024 * 256 * 4 + 256 * 256 * 4, 1024 * 256 * 4)
    assert (program.largest_temporary, program.largest_temporary_bytes) == ("scores", 256 * MIB)
    assert program.parameters == {"x": "f32[1024,256]{1,0}", "w": "f32[256,256]{1,0}"}


def test_temporaries_that_dwarf_the_programs_inputs_and_outputs_are_a_memory_finding():
    programs = hlo.program_buffers([hlo.parse_module("jit__mlp_step(26)", STEP_WITH_TEMPORARIES)])
    analysis = assessed(_stepping_host(), tools=[allocations(("jit__mlp_step(26)", 258.25))], programs=programs)
    (finding,) = _of(analysis, FindingCategory.MEMORY)
    assert finding.priority is Priority.P2
    assert finding.title == "Temporaries are 114x the program's inputs, outputs and constants"
    assert finding.evidence[0] == ('the program launched most "jit__mlp_step(26)": peak 258.25 MiB (memory_viewer '
                                   'buffer assignment), inputs 1.25 MiB, outputs 1.00 MiB, constants 0 B (its HLO)')
    index = EvidenceIndex(analysis)
    assert why_unsupported(finding, index) == ""
    assert 'largest intermediate "scores": 256.00 MiB' in finding.evidence
    assert all(word in finding.fix for word in ("jax.checkpoint", "batch", "donate_argnums", "shard"))


def test_a_program_whose_memory_is_its_inputs_and_outputs_has_no_temporaries_finding():
    programs = hlo.program_buffers([hlo.parse_module("jit__mlp_step(26)", STEP_WITH_TEMPORARIES)])
    analysis = assessed(_stepping_host(), tools=[allocations(("jit__mlp_step(26)", 3.0))], programs=programs)
    assert not _of(analysis, FindingCategory.MEMORY)


# --- the reasoner -------------------------------------------------------------------------------


def test_the_reasoner_is_told_the_framework_and_devices_inside_the_fence():
    analysis = assessed(_op_by_op())
    digest = prompts.evidence_digest(analysis, [])
    assert digest["profiled_with"] == {"framework": "jax", "input_pipeline": False, "devices": ["GPU"]}
    message = prompts.evidence_message(analysis, [], "n0nce")
    assert message.index("<<<PROFILE-DATA n0nce>>>") < message.index('"profiled_with"') < message.index(
        "<<<END PROFILE-DATA n0nce>>>")


def _step_module(module_id: int, batch: int, rate: str = "0.001") -> hlo.HloModule:
    return hlo.parse_module(f"jit_train_step({module_id})", f"""HloModule jit_train_step

ENTRY %main (x.1: f32[{batch},128], w.1: f32[128,10]) -> f32[{batch},10] {{
  %x.1 = f32[{batch},128]{{1,0}} parameter(0)
  %w.1 = f32[128,10]{{1,0}} parameter(1)
  %c.2 = f32[] constant({rate})
  %b.3 = f32[128,10]{{1,0}} broadcast(f32[] %c.2), dimensions={{}}
  %s.4 = f32[128,10]{{1,0}} multiply(%w.1, %b.3)
  ROOT %dot.1 = f32[{batch},10]{{1,0}} dot(%x.1, %s.4), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
""")


def test_a_recompilation_names_the_function_and_the_shape_that_changes():
    programs = hlo.program_buffers([_step_module(3, 32), _step_module(7, 40), _step_module(9, 48)])
    host = _host(kind=DeviceKind.CPU, source=StepSource.STEP_MARKERS, steps=3, step_ms=300.0)
    host.compiles_in_steps, host.compile_ms_per_step = 3, 250.0
    host.recompiles_in_steps, host.recompile_ms_per_step = 2, 170.0  # the first step compiled it first
    analysis = assessed(host, programs=programs)
    (finding,) = _of(analysis, FindingCategory.RECOMPILATION)
    assert ('"jit_train_step" compiled 3 times with different parameter shapes: '
            '"x.1" f32[32,128]{1,0} / f32[40,128]{1,0} / f32[48,128]{1,0}') in finding.evidence
    assert "w.1" not in " ".join(finding.evidence)
    assert "persistent compilation cache" in finding.fix
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


@pytest.mark.parametrize(("compiled", "anew"), [
    ([(3, 32, "0.001")], True),  # one program left in the capture: each died with its jitted function
    ([(3, 32, "0.001"), (7, 32, "0.001"), (9, 32, "0.001")], True),  # the same program compiled again (a CPU keeps all)
    ([(3, 32, "0.001"), (7, 32, "0.0009"), (9, 32, "0.00081")], False),  # a constant that changes: a static argument
])
def test_recompiling_the_function_called_every_step_into_one_same_program_is_a_jit_made_anew(compiled, anew):
    programs = hlo.program_buffers([_step_module(module_id, batch, rate) for module_id, batch, rate in compiled])
    host = _host(kind=DeviceKind.TPU, source=StepSource.STEP_MARKERS, steps=10, step_ms=2600.0,
                 programs=[ProgramCalls(name="PjitFunction(train_step)", calls=10, ms_per_call=2600.0,
                                        device_ms_per_call=50.0, share_of_device=1.0)])
    host.compiles_in_steps, host.compile_ms_per_step = 10, 2500.0
    host.recompiles_in_steps, host.recompile_ms_per_step = 9, 2250.0
    analysis = assessed(host, programs=programs)
    (finding,) = _of(analysis, FindingCategory.RECOMPILATION)
    assert ("outside the loop" in finding.fix) is anew
    assert ("hash by value" in finding.fix) is anew  # or a static argument made anew each call
    assert ("jax.clear_caches()" in finding.fix) is anew  # or the caches cleared in the loop
    assert ("pad or bucket" in finding.fix) is not anew
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


def _eager_gather(module_id: int, count: int) -> hlo.HloModule:
    return hlo.parse_module(f"jit_gather({module_id})", f"""HloModule jit_gather

ENTRY %main (x.1: f32[4096,128], i.1: s32[{count},1]) -> f32[{count},128] {{
  %x.1 = f32[4096,128]{{1,0}} parameter(0)
  %i.1 = s32[{count},1]{{1,0}} parameter(1)
  ROOT %g.2 = f32[{count},128]{{1,0}} gather(%x.1, %i.1), offset_dims={{1}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,128}}
}}
""")


def test_a_recompilation_whose_shapes_follow_a_boolean_mask_is_told_to_keep_the_shape_fixed():
    # Each step keeps the examples a mask selects (x[mask]): the eager gather and the step compile for each count.
    programs = hlo.program_buffers([_eager_gather(3, 2171), _eager_gather(5, 2294), _step_module(7, 2171),
                                    _step_module(9, 2294)])
    host = _host(kind=DeviceKind.TPU, source=StepSource.STEP_MARKERS, steps=10, step_ms=3500.0)
    host.compiles_in_steps, host.compile_ms_per_step = 20, 3100.0
    host.recompiles_in_steps, host.recompile_ms_per_step = 18, 3000.0
    analysis = assessed(host, programs=programs)
    (finding,) = _of(analysis, FindingCategory.RECOMPILATION)
    assert "jnp.where(mask" in finding.fix and "size=k" in finding.fix and "x[mask]" in " ".join(finding.evidence)
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    assert "jnp.unique" not in finding.fix
    # Where the capture holds the program of the function that took its size from the data, the fix names it.
    unique = hlo.parse_module("jit__unique_sorted_mask(11)", """HloModule jit__unique_sorted_mask

ENTRY %main (ids.1: s32[4096]) -> s32[4096] {
  %ids.1 = s32[4096]{0} parameter(0)
  ROOT %sorted.2 = s32[4096]{0} sort(%ids.1), dimensions={0}, to_apply=%less
}
""")
    analysis = assessed(host, programs=programs + hlo.program_buffers([unique]))
    (finding,) = _of(analysis, FindingCategory.RECOMPILATION)
    assert finding.fix.startswith("Give the function that takes its size from the data a fixed one: "
                                  "jnp.unique(x, size=k, fill_value=...)")
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    without = assessed(host, programs=hlo.program_buffers([_step_module(7, 2171), _step_module(9, 2294)]))
    (finding,) = _of(without, FindingCategory.RECOMPILATION)
    assert "jnp.where(mask" not in finding.fix and "pad or bucket" in finding.fix


def _mean_of_history(module_id: int, length: int) -> hlo.HloModule:
    return hlo.parse_module(f"jit__mean({module_id})", f"""HloModule jit__mean

ENTRY %main (a.1: f32[{length}]) -> f32[] {{
  %a.1 = f32[{length}]{{0}} parameter(0)
  %zero.2 = f32[] constant(0)
  ROOT %sum.3 = f32[] reduce(%a.1, %zero.2), dimensions={{0}}, to_apply=%add
}}
""")


@pytest.mark.parametrize(("lengths", "growing"), [
    ((5, 6, 7, 8), True),  # jnp.mean(jnp.stack(history)) with one more loss each step
    ((8, 6, 5, 7), True),  # in whatever order the capture lists them
    ((5, 6, 8), False),  # a length that skips: not one more each call
    ((5, 6), False),  # two compilations tell no trend
])
def test_a_recompilation_for_one_more_element_each_step_is_told_to_keep_a_running_value(lengths, growing):
    programs = hlo.program_buffers([_mean_of_history(module_id, length) for module_id, length in enumerate(lengths)])
    host = _host(kind=DeviceKind.TPU, source=StepSource.STEP_MARKERS, steps=10, step_ms=150.0)
    host.compiles_in_steps, host.compile_ms_per_step = 10, 130.0
    host.recompiles_in_steps, host.recompile_ms_per_step = 9, 120.0
    analysis = assessed(host, programs=programs)
    (finding,) = _of(analysis, FindingCategory.RECOMPILATION)
    assert ("running total" in finding.fix) is growing
    assert ("pad or bucket" in finding.fix) is not growing
    if growing:
        assert (f'"jit__mean" compiled {len(lengths)} times, for every size of dimension 0 of argument 0 from '
                f"{min(lengths)} to {max(lengths)}") in " ".join(finding.evidence)
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


def _decode_with_cache(module_id: int, length: int) -> hlo.HloModule:
    return hlo.parse_module(f"jit_decode({module_id})", f"""HloModule jit_decode

ENTRY %main (x.1: bf16[8,1,1024], cache.2: bf16[8,{length},1024]) -> bf16[8,{length + 1},1024] {{
  %x.1 = bf16[8,1,1024]{{2,1,0}} parameter(0)
  %cache.2 = bf16[8,{length},1024]{{2,1,0}} parameter(1)
  ROOT %concatenate.3 = bf16[8,{length + 1},1024]{{2,1,0}} concatenate(%cache.2, %x.1), dimensions={{1}}
}}
""")


def _stack(module_id: int, count: int) -> hlo.HloModule:
    parameters = ", ".join(f"a.{n}: f32[]" for n in range(count))
    lines = "\n".join(f"  %a.{n} = f32[] parameter({n})" for n in range(count))
    operands = ", ".join(f"%a.{n}" for n in range(count))
    return hlo.parse_module(f"jit_stack({module_id})", f"""HloModule jit_stack

ENTRY %main ({parameters}) -> f32[{count}] {{
{lines}
  ROOT %s.{count} = f32[{count}]{{0}} concatenate({operands}), dimensions={{0}}
}}
""")


@pytest.mark.parametrize("stacked_list", [False, True])
def test_a_cache_extended_by_one_each_step_is_told_to_be_preallocated_and_written_in_place(stacked_list):
    # A KV cache concatenated with each token's entries inside the jitted step: one longer argument each call. A
    # list stacked anew (one more argument each call, then one longer array) is a history, not a cache.
    modules = [_decode_with_cache(module_id, length) for module_id, length in enumerate(range(256, 261))]
    if stacked_list:
        modules += [_mean_of_history(10 + count, count) for count in range(2, 7)]
        modules += [_stack(20 + count, count) for count in range(2, 7)]
    host = _host(kind=DeviceKind.TPU, source=StepSource.STEP_MARKERS, steps=5, step_ms=750.0)
    host.compiles_in_steps, host.compile_ms_per_step = 5, 700.0
    host.recompiles_in_steps, host.recompile_ms_per_step = 4, 690.0
    analysis = assessed(host, programs=hlo.program_buffers(modules))
    (finding,) = _of(analysis, FindingCategory.RECOMPILATION)
    said = " ".join(finding.evidence)
    if stacked_list:
        assert '"jit_stack" compiled 5 times, for every count of arguments from 2 to 6' in said
        assert finding.fix.startswith("Keep what the loop needs from the history")
    else:
        assert '"jit_decode" compiled 5 times, for every size of dimension 1 of argument 1 from 256 to 260' in said
        assert finding.fix.startswith("Allocate the array once") and "dynamic_update_slice" in finding.fix
        # The changing shapes, in order, the middle ones left out.
        assert ('"cache.2" bf16[8,256,1024]{2,1,0} / bf16[8,257,1024]{2,1,0} / … / bf16[8,260,1024]{2,1,0} '
                "(5 shapes)") in said
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


def test_a_host_callback_the_device_waits_on_is_named_and_is_no_communication():
    recv = "%pure_callback.11 = (f32[], token[]) recv-done(...), channel_id=2, is_host_transfer=true"
    host = _host(kind=DeviceKind.TPU, busy=0.8, top_ops=_ops(("pure_callback.11", 0.7), ("fusion.1", 0.1),
                                                           expression={"pure_callback.11": recv}))
    analysis = assessed(host)
    top = analysis.findings[0]
    assert top.priority is Priority.P0 and top.category is FindingCategory.DATA_MOVEMENT
    assert "callback" in top.title.lower() and "pure_callback.11" in " ".join(top.evidence)
    assert "jnp" in top.fix or "jax.numpy" in top.fix
    assert not [f for f in analysis.findings if f.category is FindingCategory.COMMUNICATION]


@pytest.mark.parametrize("donated", [False, True])
def test_the_kernels_updating_an_undonated_argument_in_place_are_its_whole_copy_with_a_donation_fix(donated):
    # A decode step's cache update: XLA names the kernel after its root, a convert, but it moves the whole cache.
    writer = "dynamic-update-slice_convert_fusion"
    host = _host(kind=DeviceKind.CPU, busy=0.9, top_ops=_ops((writer, 0.7), ("ynn_fusion", 0.3)))
    program = HloProgram(module="jit_decode(18)", inputs_bytes=1, outputs_bytes=1,
                         undonated={} if donated else {"cache.1": [writer]})
    found = [f for f in assessed(host, programs=[program]).findings if "donate_argnums" in f.fix]
    assert bool(found) is not donated
    if not donated:
        (finding,) = found
        assert finding.priority is Priority.P0 and finding.category is FindingCategory.DATA_MOVEMENT
        assert finding.title == "Copies of undonated arguments take 70% of device time"
        assert '"jit_decode(18)" updates its argument "cache.1" in place' in " ".join(finding.evidence)


@pytest.mark.parametrize(("launch_ms", "op_by_op"), [(0.07, True), (0.02, False)])
def test_fewer_small_launches_that_hold_much_of_the_step_are_op_by_op(launch_ms, op_by_op):
    # A gradient and an update a step that compute longer than their launch, and 28 eager launches of a norm:
    # op by op where launching those takes a quarter of the step or more.
    host = _host(kind=DeviceKind.CPU, busy=0.7, steps=15, step_ms=2.5, dispatches=39, ms_per_dispatch=0.033,
                 programs=[_launched("mlp_loss", 15, 0.1, 1.35), _launched("apply", 15, 0.1, 0.11),
                           *(_launched(name, 135, launch_ms, 0.002) for name in ("square", "add", "_reduce_sum")),
                           _launched("sqrt", 15, launch_ms, 0.001)])
    assert bool(_of(assessed(host), FindingCategory.DISPATCH_OVERHEAD)) is op_by_op


def test_a_host_callback_on_a_cpu_is_named_without_promising_that_the_device_would_do_it_for_less():
    # The CPU's device threads and the callback's Python share the same cores: its time is its work's.
    host = _host(kind=DeviceKind.CPU, busy=0.95, top_ops=_ops(("pure_callback.0", 0.7), ("ynn_fusion", 0.2)))
    (top,) = assessed(host).findings
    assert top.priority is Priority.P2 and "callback" in top.title.lower()
    assert top.fix.startswith("Measure before moving it") and "share the host's cores" in top.what


def test_launches_of_programs_longer_than_their_launch_queue_ahead_and_are_not_op_by_op():
    # Fourteen jitted stages a step, a third of the step spent launching them, but each runs longer on the device
    # than its launch takes: the launches queue ahead of the device and cost nothing.
    stages = _host(busy=0.9, dispatches=14, ms_per_dispatch=0.13, step_ms=5.6)
    assert not _of(assessed(stages), FindingCategory.DISPATCH_OVERHEAD)
    tiny = _host(busy=0.1, dispatches=14, ms_per_dispatch=0.13, step_ms=5.6)
    assert _of(assessed(tiny), FindingCategory.DISPATCH_OVERHEAD)
