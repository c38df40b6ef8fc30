"""The hardware model: the peaks table and its lookup, achieved rates and the roofline verdict per program, MFU,
and the dtype and precision checks, on evidence written by hand and HLO text as XLA prints it."""

from __future__ import annotations

import pytest

from mldiag.analysis.evidence import HloProgram, ProfileInput, ToolResult, ToolStatus
from mldiag.analysis.host_evidence import (
    DeviceKind,
    Distribution,
    HostActivity,
    HostEvidence,
    OpTime,
    ProgramCalls,
    StepSource,
)
from mldiag.analysis.reasoning import prompts
from mldiag.analysis.reasoning.validation import EvidenceIndex, why_unsupported
from mldiag.analysis.report import render_summary
from mldiag.analysis.rules import hardware
from mldiag.analysis.rules.analyst import assess
from mldiag.analysis.rules.hardware import GIB, chip_for, peak_dtype
from mldiag.analysis.xprof import hlo
from mldiag.domain import FindingCategory, HealthStatus, Priority

# --- the peaks table ------------------------------------------------------------------------------


@pytest.mark.parametrize(("device_type", "capacity", "chip"), [
    ("TPU v4", None, "TPU v4"),
    ("TPU v5 lite", None, "TPU v5e"),
    ("TPU v5e", None, "TPU v5e"),
    ("TPU v5", None, "TPU v5p"),
    ("TPU v5p", None, "TPU v5p"),
    ("TPU v6 Lite", None, "TPU v6e (Trillium)"),
    ("Tesla V100-SXM2-16GB", None, "NVIDIA V100 SXM2"),
    ("NVIDIA A100-SXM4-40GB", None, "NVIDIA A100 40GB"),
    ("NVIDIA A100-SXM4-80GB", None, "NVIDIA A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", None, "NVIDIA A100 80GB PCIe"),
    ("NVIDIA H100 80GB HBM3", None, "NVIDIA H100 SXM"),
    ("NVIDIA H200", None, "NVIDIA H200 SXM"),
    ("NVIDIA B200", None, "NVIDIA B200"),
    ("AMD Instinct MI250X", None, "AMD Instinct MI250X"),
    ("AMD Instinct MI300X", None, "AMD Instinct MI300X"),
    ("AMD Instinct MI355X", None, "AMD Instinct MI355X"),
    # The MI300X fixture's device type and the capacity its allocator reports (144 GiB of 192).
    ("AMD GPU (gfx942)", 154608085237, "AMD Instinct MI300X"),
])
def test_a_device_type_names_its_chip(device_type, capacity, chip):
    assert chip_for(device_type, capacity).name == chip


@pytest.mark.parametrize(("device_type", "capacity"), [
    ("TPU v4 lite", None),  # v4i: not in the table
    ("NVIDIA H100 PCIe", None),  # another part, other peaks
    ("NVIDIA GPU (compute capability 7.0)", 16 * GIB),  # V100, Titan V and Quadro GV100 alike
    ("GPU", None),
    ("AMD GPU (gfx942)", None),  # MI300X, MI300A or MI325X: the capacity would tell
    ("AMD GPU (gfx942)", 128 * GIB),  # MI300A's unified memory
    ("AMD GPU (gfx950)", 299939041116),  # MI350X and MI355X have the same memory and different clocks
    ("Intel Xeon", None),
])
def test_a_device_type_that_names_no_single_chip_gives_none(device_type, capacity):
    assert chip_for(device_type, capacity) is None


def test_every_chip_cites_its_source_and_has_a_bandwidth_and_a_peak():
    for chip in hardware.CHIPS:
        assert chip.source.startswith("https://"), chip.name
        assert chip.hbm_bytes_per_s > 1e11 and chip.memory_bytes >= 16 * GIB and chip.peak_flops, chip.name


def test_tpu_v5e_figures_are_googles():
    chip = chip_for("TPU v5 lite")
    assert chip.peak_flops == {"bf16": 197e12, "int8": 394e12}
    assert (chip.hbm_bytes_per_s, chip.memory_bytes) == (819e9, 16 * GIB)
    assert chip.ridge_point == pytest.approx(240.5, abs=0.1)


@pytest.mark.parametrize(("device_type", "dtype", "precision", "peak"), [
    ("TPU v5 lite", "f32", "", "bf16"),  # one bf16 pass through the MXU
    ("TPU v5 lite", "f32", "highest", "bf16"),  # six bf16 passes, held to the one peak the chip has
    ("TPU v5 lite", "f64", "", None),  # emulated
    ("TPU v5 lite", "s8", "", "int8"),
    ("NVIDIA A100-SXM4-80GB", "f32", "", "tf32"),
    ("NVIDIA A100-SXM4-80GB", "f32", "highest", "f32"),
    ("NVIDIA A100-SXM4-80GB", "f64", "", "f64"),
    ("Tesla V100-SXM2-16GB", "f32", "", "f32"),  # no TF32 before Ampere
    ("Tesla V100-SXM2-16GB", "bf16", "", None),
])
def test_a_matmuls_dtype_and_precision_pick_the_peak_it_runs_against(device_type, dtype, precision, peak):
    assert peak_dtype(chip_for(device_type), dtype, precision) == peak


# --- HLO: matmul FLOPs, dtype and precision -------------------------------------------------------

# jax.jit(lambda x, w: jnp.dot(x, w, precision="highest")) on CPU, as XLA prints the compiled module.
CPU_HIGHEST = """HloModule jit_g, is_scheduled=true, entry_computation_layout={(f32[8,16]{1,0}, f32[16,16]{1,0})->f32[8,16]{1,0}}

%fused_computation (param_0: f32[8,16], param_1: f32[16,16]) -> f32[8,16] {
  %param_0 = f32[8,16]{1,0} parameter(0)
  %param_1 = f32[16,16]{1,0} parameter(1)
  ROOT %dot_general.0 = f32[8,16]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={highest,highest}, metadata={op_name="jit(g)/dot_general" stack_frame_id=2}
}

ENTRY %main.1 (x.1: f32[8,16], w.1: f32[16,16]) -> f32[8,16] {
  %x.1 = f32[8,16]{1,0} parameter(0), metadata={op_name="x"}
  %w.1 = f32[16,16]{1,0} parameter(1), metadata={op_name="w"}
  ROOT %ynn_fusion = f32[8,16]{1,0} fusion(%x.1, %w.1), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(g)/dot_general" stack_frame_id=2}, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
}
"""

# The float64_matmul fixture's step, cut to one matmul: x64 on, a f64 dot fused with its tanh.
CPU_FLOAT64 = """HloModule jit_step, is_scheduled=true

%fused_computation (param_0: f64[384,512], param_1: f64[512,512]) -> f64[384,512] {
  %param_0 = f64[384,512]{1,0} parameter(0)
  %param_1 = f64[512,512]{1,0} parameter(1)
  ROOT %dot_general.0 = f64[384,512]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main.2 (x.1: f64[384,512], w.1: f64[512,512]) -> f64[384,512] {
  %x.1 = f64[384,512]{1,0} parameter(0)
  %w.1 = f64[512,512]{1,0} parameter(1)
  ROOT %ynn_fusion.1 = f64[384,512]{1,0} fusion(%x.1, %w.1), kind=kCustom, calls=%fused_computation
}
"""

# jax.jit(lambda x, w: jnp.tanh(jnp.dot(x, w, precision="highest"))) on a TPU v5e, as XLA prints the compiled
# module (its backend configs cut): the matmul is a convolution with batch-feature labels, in an output fusion.
TPU_HIGHEST = """HloModule jit__lambda, is_scheduled=true

%bitcast_fusion (bitcast_input: f32[4096,4096]) -> f32[4096,4096] {
  %bitcast_input = f32[4096,4096]{1,0:T(8,128)} parameter(0)
  ROOT %bitcast = f32[4096,4096]{1,0:T(8,128)} bitcast(%bitcast_input)
}

%bitcast_fusion.4 (bitcast_input.4: f32[4096,4096]) -> f32[4096,4096] {
  %bitcast_input.4 = f32[4096,4096]{1,0:T(8,128)S(1)} parameter(0)
  ROOT %bitcast.4 = f32[4096,4096]{1,0:T(8,128)} bitcast(%bitcast_input.4)
}

%fused_computation (param_0.1: f32[4096,4096], param_1: f32[4096,4096]) -> f32[4096,4096] {
  %param_0.1 = f32[4096,4096]{1,0:T(8,128)} parameter(0)
  %fusion = f32[4096,4096]{1,0:T(8,128)} fusion(%param_0.1), kind=kLoop, calls=%bitcast_fusion
  %param_1 = f32[4096,4096]{1,0:T(8,128)S(1)} parameter(1)
  %fusion.4 = f32[4096,4096]{1,0:T(8,128)} fusion(%param_1), kind=kLoop, calls=%bitcast_fusion.4
  %convolution.4 = f32[4096,4096]{1,0:T(8,128)} convolution(%fusion, %fusion.4), dim_labels=bf_io->bf, operand_precision={highest,highest}, metadata={op_name="jit(<lambda>)/dot_general" stack_frame_id=3}
  ROOT %tanh.0 = f32[4096,4096]{1,0:T(8,128)} tanh(%convolution.4), metadata={op_name="jit(<lambda>)/tanh" stack_frame_id=4}
}

ENTRY %main.1 (x.1: f32[4096,4096], w.1: f32[4096,4096]) -> f32[4096,4096] {
  %w.1 = f32[4096,4096]{1,0:T(8,128)} parameter(1), metadata={op_name="w"}
  %copy-start = (f32[4096,4096]{1,0:T(8,128)S(1)}, f32[4096,4096]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%w.1), cross_program_prefetch_index=0
  %x.1 = f32[4096,4096]{1,0:T(8,128)} parameter(0), metadata={op_name="x"}
  %copy-done = f32[4096,4096]{1,0:T(8,128)S(1)} copy-done(%copy-start)
  ROOT %convolution_tanh_fusion = f32[4096,4096]{1,0:T(8,128)} fusion(%x.1, %copy-done), kind=kOutput, calls=%fused_computation, metadata={op_name="jit(<lambda>)/dot_general" stack_frame_id=3}, backend_config={"convolution_algorithm_config":{"emitter":"EmitAllBatchInSublanes"}}
}
"""


# The device trace's HLO text of that fusion's runs (the analyst reads the instruction's name from it).
TPU_FUSION_TEXT = "%convolution_tanh_fusion = f32[4096,4096]{1,0:T(8,128)} fusion(f32[4096,4096]{1,0:T(8,128)} %x.1)"


def _work(name: str, text: str, instruction: str) -> hlo.KernelWork:
    return next(w for w in hlo.kernel_work([hlo.parse_module(name, text)]) if w.instruction == instruction)


def test_a_dots_flops_dtype_and_highest_precision_are_read_from_its_hlo():
    work = _work("jit_g(3)", CPU_HIGHEST, "ynn_fusion")
    assert (work.matmul_dtype, work.precision, work.flops) == ("f32", "highest", 2 * 8 * 16 * 16)


def test_a_tpu_convolution_matmul_counts_its_kernel_per_output_feature():
    work = _work("jit__lambda(113)", TPU_HIGHEST, "convolution_tanh_fusion")
    assert (work.matmul_dtype, work.precision, work.flops) == ("f32", "highest", 2 * 4096**3)


def test_a_float64_dot_is_float64_math_at_default_precision():
    work = _work("jit_step(20)", CPU_FLOAT64, "ynn_fusion.1")
    assert (work.matmul_dtype, work.precision, work.dtypes) == ("f64", "", ("f64",))
    assert work.flops == 2 * 384 * 512 * 512


def test_a_library_gemms_precision_is_read_from_its_backend_config():
    text = """HloModule jit_mm

ENTRY %main (a: f32[64,64], b: f32[64,64]) -> f32[64,64] {
  %a = f32[64,64]{1,0} parameter(0)
  %b = f32[64,64]{1,0} parameter(1)
  ROOT %custom-call.1 = f32[64,64]{1,0} custom-call(%a, %b), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"precision_config":{"operand_precision":["HIGHEST","HIGHEST"]}}}
}
"""
    work = _work("jit_mm(1)", text, "custom-call.1")
    assert (work.matmul_dtype, work.precision) == ("f32", "highest")


# --- evidence by hand ---------------------------------------------------------------------------

def _host(*, kind: DeviceKind, device_type: str, top_ops=(), program="PjitFunction(step)", steps=10,
          step_ms=10.0, busy=0.95, devices=1) -> HostEvidence:
    return HostEvidence(
        host="h", file="h.xplane.pb", bytes=1, events=1, device_kind=kind, device_type=device_type,
        devices=devices, compute_lanes=["lane"], step_source=StepSource.STEP_MARKERS, steps=steps,
        step_ms=Distribution.of([step_ms] * steps), busy_fraction=busy, loop_busy_fraction=busy,
        top_ops=list(top_ops), dispatched=[HostActivity(name=program, count_per_step=1, ms_per_step=1,
                                                        share_of_step=0.1, encloses_dispatches=True)],
    )


def _op(name: str, share: float, step_ms: float = 10.0, expression: str = "") -> OpTime:
    return OpTime(name=name, count_per_step=1.0, self_ms_per_step=share * step_ms, share_of_busy=share,
                  expression=expression)


def _op_profile(program: str, *, ms: float, flops: float, bytes_accessed: float) -> ToolResult:
    """XProf's get_hlo_op_profile answer holding one op of ``program``."""
    return ToolResult(name="get_hlo_op_profile", status=ToolStatus.OK, seconds=0.0, data={"grouped_operations": {
        "IDLE": [{"name": "by_program/IDLE", "total_self_time_ms": 1.0, "flops": 0.0, "bytes_accessed": 0.0}],
        "loop fusion": [{"name": f"by_program/{program}/loop fusion/fusion.1", "total_self_time_ms": ms,
                         "flops": flops, "bytes_accessed": bytes_accessed, "occurrences": 10}],
    }})


def _analysis(*hosts: HostEvidence, tools=(), modules=()):
    works = hlo.kernel_work([hlo.parse_module(name, text) for name, text in modules])
    return assess(hosts=list(hosts), tools=list(tools), hlo_issues={}, versions={}, seconds=0.0,
                  profile=ProfileInput(source="s", session="s", files=["h.xplane.pb"], bytes=1), hlo_kernels=works)


# --- roofline verdict and MFU -------------------------------------------------------------------

V5E = chip_for("TPU v5 lite")


def test_a_decode_loop_at_86_percent_of_hbm_bandwidth_is_memory_bound_near_the_roof_and_healthy():
    seconds = 0.1  # ten 10 ms steps
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", top_ops=[_op("fusion.1", 1.0)],
                 program="jit_decode(5)")
    streamed = 0.86 * V5E.hbm_bytes_per_s * seconds
    analysis = _analysis(host, tools=[_op_profile("jit_decode(5)", ms=seconds * 1e3, flops=2 * streamed / 2,
                                                  bytes_accessed=streamed)])
    (program,) = analysis.roofline
    assert program.verdict == "memory-bound" and program.bandwidth_fraction == pytest.approx(0.86)
    assert program.arithmetic_intensity == pytest.approx(1.0) and program.ridge_point == pytest.approx(240.5, abs=0.1)
    assert "near the memory roof: 86.0% of the HBM bandwidth" in program.statement
    assert analysis.metrics.hardware == "TPU v5e" and analysis.metrics.hbm_bandwidth_fraction == pytest.approx(0.86)
    assert analysis.status is HealthStatus.OPTIMAL and not analysis.findings


def test_a_program_at_high_intensity_near_peak_is_compute_bound_and_its_mfu_is_its_step_flops_over_the_peak():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit_train(2)", steps=10, step_ms=10.0)
    flops = 0.6 * V5E.peak_flops["bf16"] * 0.1  # ten steps of 10 ms at 60 % of the peak
    analysis = _analysis(host, tools=[_op_profile("jit_train(2)", ms=100.0, flops=flops, bytes_accessed=flops / 1000)])
    (program,) = analysis.roofline
    assert program.verdict == "compute-bound" and program.flops_fraction == pytest.approx(0.6)
    assert (program.peak_dtype, program.achieved_flops_per_s) == ("bf16", pytest.approx(0.6 * 197e12))
    assert analysis.metrics.mfu == pytest.approx(0.6) and analysis.metrics.achieved_tflops == pytest.approx(118.2)


@pytest.mark.parametrize(("of_peak", "claimed"), [(0.86, False), (0.3, True)])
def test_xprof_s_far_from_the_roof_is_said_only_where_the_measured_flops_are_not_near_the_peak(of_peak, claimed):
    # XProf's roofline model puts the program at 16.9 % (HBM-bound) while its measured FLOP/s say otherwise.
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit_train(2)", steps=10, step_ms=10.0)
    flops = of_peak * V5E.peak_flops["bf16"] * 0.1
    model = ToolResult(name="get_roofline_model", status=ToolStatus.OK, seconds=0.0,
                       data={"program": {"bound_by": "HBM", "roofline_efficiency_percent": "16.94%"}})
    analysis = _analysis(host, tools=[_op_profile("jit_train(2)", ms=100.0, flops=flops, bytes_accessed=flops / 1000),
                                      model])
    assert analysis.metrics.mfu == pytest.approx(of_peak)
    assert bool([f for f in analysis.findings if f.category is FindingCategory.COMPUTE]) is claimed


def test_mfu_divides_the_flops_among_the_devices():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit_train(2)", devices=4)
    flops = 4 * 0.3 * V5E.peak_flops["bf16"] * 0.1  # four chips, each at 30 % for ten 10 ms steps
    analysis = _analysis(host, tools=[_op_profile("jit_train(2)", ms=400.0, flops=flops, bytes_accessed=flops / 1000)])
    assert analysis.metrics.mfu == pytest.approx(0.3)


def test_a_program_far_from_both_limits_is_neither():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit_f(1)")
    analysis = _analysis(host, tools=[_op_profile("jit_f(1)", ms=100.0, flops=1e9, bytes_accessed=1e9)])
    (program,) = analysis.roofline
    assert program.verdict == "neither" and program.statement.startswith("far from both limits")


def test_an_unknown_chip_gets_the_achieved_rates_and_no_verdict():
    host = _host(kind=DeviceKind.GPU, device_type="NVIDIA GPU (compute capability 7.0)", program="jit_f(1)")
    analysis = _analysis(host, tools=[_op_profile("jit_f(1)", ms=100.0, flops=1e12, bytes_accessed=1e9)])
    (program,) = analysis.roofline
    assert program.achieved_flops_per_s == pytest.approx(1e13) and program.verdict == ""
    assert program.statement.startswith("no verdict") and analysis.metrics.mfu is None
    assert analysis.metrics.hardware == "" and analysis.metrics.achieved_tflops == pytest.approx(10.0)


def test_on_cpu_the_achieved_rate_comes_from_the_hlos_matmuls_and_the_timed_ops():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", top_ops=[_op("ynn_fusion.1", 1.0, step_ms=40.0)],
                 program="PjitFunction(step)")
    analysis = _analysis(host, modules=[("jit_step(20)", CPU_FLOAT64)])
    (program,) = analysis.roofline
    assert (program.program, program.source) == ("jit_step(20)", "hlo")
    assert program.achieved_flops_per_s == pytest.approx(2 * 384 * 512 * 512 / 0.040)
    assert program.verdict == "" and "no published peaks" in program.statement
    html = render_summary(analysis)
    assert "CPU: no published peaks" in html and "Hardware limits" in html


def test_the_hardware_section_escapes_program_names():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="<script>x</script>")
    analysis = _analysis(host, tools=[_op_profile("<script>x</script>", ms=100.0, flops=1e12, bytes_accessed=1e9)])
    html = render_summary(analysis)
    assert "<script>x" not in html and "&lt;script&gt;x&lt;/script&gt;" in html


# --- dtype and precision ------------------------------------------------------------------------


def test_float64_math_taking_most_of_device_time_is_a_p1_with_its_measured_share_and_the_x64_fix():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", program="PjitFunction(step)",
                 top_ops=[_op("ynn_fusion.1", 0.72), _op("ynn_fusion", 0.28)])
    analysis = _analysis(host, modules=[("jit_step(20)", CPU_FLOAT64)])
    (finding,) = [f for f in analysis.findings if "Float64" in f.title]
    assert (finding.priority, finding.category) == (Priority.P1, FindingCategory.COMPUTE)
    assert finding.title == "Float64 math takes 72% of device time"
    assert "jax_enable_x64" in finding.fix and "float32" in finding.fix
    (slow,) = analysis.slow_precision
    assert (slow.kind, slow.share_of_device, slow.kernels) == ("float64", pytest.approx(0.72), ["ynn_fusion.1"])
    assert analysis.status is HealthStatus.NEEDS_ATTENTION


def test_a_tpu_program_taking_float64_parameters_is_float64_emulation_in_all_its_kernels():
    # XLA on a TPU splits each f64 value into f32 pieces: the kernels read as f32, the parameters still say f64.
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="PjitFunction(run)", step_ms=57.0,
                 top_ops=[_op("fusion.1352", 0.034, step_ms=57.0, expression=TPU_FUSION_TEXT)])
    host.programs = [ProgramCalls(name="jit_run(22)", calls=10, ms_per_call=57.0, device_ms_per_call=56.7,
                                  share_of_device=1.0)]
    parameters = {"x.1": "f64[2048,2048]{1,0}", "ws_0_.1": "f64[2048,2048]{1,0}"}
    analysis = assess(hosts=[host], tools=[], hlo_issues={}, versions={}, seconds=0.0,
                      profile=ProfileInput(source="s", session="s", files=["h.xplane.pb"], bytes=1),
                      hlo_kernels=hlo.kernel_work([hlo.parse_module("jit_run(22)", TPU_HIGHEST)]),
                      hlo_programs=[HloProgram(module="jit_run(22)", inputs_bytes=1, outputs_bytes=1,
                                               parameters=parameters)])
    (finding,) = [f for f in analysis.findings if "Float64" in f.title]
    assert finding.title == "Float64 math takes 100% of device time" and finding.priority is Priority.P0
    assert any("takes float64 parameters" in line for line in finding.evidence)


def test_float64_below_a_measurable_share_is_no_finding():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", top_ops=[_op("ynn_fusion.1", 0.03), _op("other", 0.97)])
    analysis = _analysis(host, modules=[("jit_step(20)", CPU_FLOAT64)])
    assert not analysis.slow_precision and not any("Float64" in f.title for f in analysis.findings)


def test_highest_precision_f32_matmuls_on_a_tpu_are_a_finding_with_their_share():
    expression = TPU_FUSION_TEXT
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit__lambda(113)",
                 top_ops=[_op("convolution_tanh_fusion", 0.8, expression=expression), _op("copy.1", 0.2)])
    analysis = _analysis(host, modules=[("jit__lambda(113)", TPU_HIGHEST)])
    (finding,) = [f for f in analysis.findings if "HIGHEST" in f.title]
    assert finding.title == "Float32 matmuls at HIGHEST precision take 80% of device time"
    assert finding.priority is Priority.P0 and "six" in finding.what  # most of the device time, six passes each
    assert "jax.default_matmul_precision" in finding.fix and "preferred_element_type" in finding.fix
    assert analysis.slow_precision[0].kind == "highest"


def test_highest_precision_matmuls_of_a_program_running_a_decomposition_are_the_solver_s_own():
    # The same program with an LU's library call in it: a TPU expands the rest of the solver into f32 matmuls at
    # HIGHEST, which the program never asked for.
    with_lu = TPU_HIGHEST.replace(
        "  ROOT %convolution_tanh_fusion",
        "  %lu = (f32[4096,128]{1,0}, s32[128]{0}, s32[4096]{0}) custom-call(%x.1), "
        'custom_call_target="LuDecompositionBlock"\n  ROOT %convolution_tanh_fusion')
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit__lambda(113)",
                 top_ops=[_op("convolution_tanh_fusion", 0.8, expression=TPU_FUSION_TEXT), _op("lu", 0.2)])
    analysis = _analysis(host, modules=[("jit__lambda(113)", with_lu)])
    assert not [f for f in analysis.findings if "HIGHEST" in f.title] and not analysis.slow_precision
    assert [f for f in analysis.findings if f.title.startswith("A matrix decomposition every step")]


@pytest.mark.parametrize(("kind", "device_type", "flagged"), [
    (DeviceKind.CPU, "CPU", False),  # HIGHEST changes nothing on a CPU
    (DeviceKind.GPU, "Tesla V100-SXM2-16GB", False),  # no TF32 before Ampere
    (DeviceKind.GPU, "NVIDIA A100-SXM4-80GB", True),  # TF32 by default, full f32 at HIGHEST
])
def test_highest_precision_is_flagged_only_where_default_precision_is_faster(kind, device_type, flagged):
    host = _host(kind=kind, device_type=device_type, program="PjitFunction(g)", top_ops=[_op("ynn_fusion", 0.9)])
    analysis = _analysis(host, modules=[("jit_g(3)", CPU_HIGHEST)])
    assert any("HIGHEST" in f.title for f in analysis.findings) is flagged


# --- ratios in titles ---------------------------------------------------------------------------

DECODE_WITH_CONSTANT_WEIGHTS = """HloModule jit_decode

ENTRY %main (token: f32[1,256]) -> f32[1,256] {
  %token = f32[1,256]{1,0} parameter(0)
  %weights = f32[4096,4096]{1,0} constant({...})
  %hidden = f32[1,4096]{1,0} dot(%token, %weights), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %out = f32[1,256]{1,0} slice(%hidden), slice={[0:1], [0:256]}
}
"""


def _allocations(module: str, mib: float) -> ToolResult:
    return ToolResult(name="get_peak_allocations", status=ToolStatus.OK, seconds=0.0, data={
        "summary": {"top_modules": [{"module_name": module, "total_hbm_mib": mib}]}})


def _temporaries(text: str, peak_mib: float):
    programs = hlo.program_buffers([hlo.parse_module("jit_decode(4)", text)])
    host = _host(kind=DeviceKind.CPU, device_type="CPU", program="PjitFunction(decode)")
    return assess(hosts=[host], tools=[_allocations("jit_decode(4)", peak_mib)], hlo_issues={}, versions={},
                  seconds=0.0, profile=ProfileInput(source="s", session="s", files=["h"], bytes=1),
                  hlo_programs=programs)


def test_weights_closed_over_as_constants_count_beside_the_inputs_and_outputs():
    (program,) = hlo.program_buffers([hlo.parse_module("jit_decode(4)", DECODE_WITH_CONSTANT_WEIGHTS)])
    assert program.constants_bytes == 4096 * 4096 * 4
    analysis = _temporaries(DECODE_WITH_CONSTANT_WEIGHTS, 64.1)  # the weights and a little more
    assert not [f for f in analysis.findings if f.category is FindingCategory.MEMORY]


def test_a_ratio_above_1000x_is_said_in_words_with_the_sizes():
    text = DECODE_WITH_CONSTANT_WEIGHTS.replace("f32[4096,4096]{1,0} constant({...})",
                                                "f32[4096,4096]{1,0} broadcast(%token), dimensions={}")
    analysis = _temporaries(text, 1024.0)
    (finding,) = [f for f in analysis.findings if f.category is FindingCategory.MEMORY]
    assert finding.title.startswith("Temporaries far larger than the program's inputs, outputs and constants (")
    assert "x the" not in finding.title


def test_highest_precision_f32_matmuls_on_a_tpu_are_held_to_its_bf16_peak_and_the_verdict_says_why():
    # The measured run on a TPU v5e: four such matmuls of 4096 in 17.1 ms per step, 15.9 % of the bf16 peak.
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit__lambda(113)")
    flops = 4 * 2 * 4096**3 * 10
    analysis = _analysis(host, tools=[_op_profile("jit__lambda(113)", ms=175.15, flops=flops, bytes_accessed=9.4e9)],
                         modules=[("jit__lambda(113)", TPU_HIGHEST)])
    (program,) = analysis.roofline
    assert (program.matmul_dtype, program.peak_dtype, program.verdict) == ("f32", "bf16", "neither")
    assert program.flops_fraction == pytest.approx(0.159, abs=0.001)
    assert "HIGHEST precision" in program.statement and "latency" not in program.statement


def test_the_precision_findings_are_supported_by_the_evidence_the_reasoner_gets():
    expression = TPU_FUSION_TEXT
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit__lambda(113)",
                 top_ops=[_op("convolution_tanh_fusion", 0.55, expression=expression), _op("fusion.2", 0.45)])
    analysis = _analysis(host, tools=[_op_profile("jit__lambda(113)", ms=100.0, flops=1e12, bytes_accessed=1e9)],
                         modules=[("jit__lambda(113)", TPU_HIGHEST), ("jit_step(20)", CPU_FLOAT64)])
    (finding,) = [f for f in analysis.findings if "HIGHEST" in f.title]
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    digest = prompts.evidence_digest(analysis, [])
    assert digest["slow_precision"][0]["kernels"] == ["convolution_tanh_fusion"]
    assert digest["roofline"][0]["program"] == "jit__lambda(113)"


def test_a_program_whose_device_time_is_mostly_async_copies_is_said_to_wait_on_transfers():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v6 Lite", program="jit_f(12)")
    profile = _op_profile("jit_f(12)", ms=10.0, flops=1e9, bytes_accessed=1e9)
    profile.data["grouped_operations"]["copy-done"] = [
        {"name": "by_program/jit_f(12)/copy-done/copy-done.4", "total_self_time_ms": 90.0, "flops": 0.0,
         "bytes_accessed": 2e9}]
    (program,) = _analysis(host, tools=[profile]).roofline
    assert program.verdict == "neither" and program.device_ms == pytest.approx(100.0)
    assert "asynchronous copies" in program.statement and "latency" not in program.statement


# --- what the op profile leaves out ---------------------------------------------------------------

# A batched matmul as XLA writes it on TPU: the batch dimensions as windows over a dilated input, so that each
# window meets one element: of the kernel's 8 x 8 window per input feature, 63 taps fall on the zeros the
# dilation puts between the elements.
TPU_BATCHED_MATMUL = """HloModule jit_attention

ENTRY %main (q: bf16[8,512,8,128], k: bf16[8,512,8,128]) -> bf16[8,8,512,512] {
  %q = bf16[8,512,8,128]{3,2,1,0} parameter(0)
  %k = bf16[8,512,8,128]{3,2,1,0} parameter(1)
  ROOT %convolution-base-dilated.1 = bf16[8,8,512,512]{2,3,1,0} convolution(%q, %k), window={size=8x8 stride=7x7 lhs_dilate=8x8}, dim_labels=0b1f_0o1i->01bf
}
"""


def test_a_batched_matmul_over_a_dilated_input_counts_only_the_taps_that_meet_an_element():
    work = _work("jit_attention(1)", TPU_BATCHED_MATMUL, "convolution-base-dilated.1")
    assert work.flops == 2 * (8 * 8 * 512 * 512) * 128


def test_a_transposed_convolution_dilates_its_input_too_but_is_no_batched_matmul():
    (batched,) = [i for i in hlo.parse_module("m", TPU_BATCHED_MATMUL).instructions.values() if i.batched_mkn]
    assert batched.batched_mkn == (512, 128, 512)
    # lax.conv_transpose of stride 2: its outputs are far more than its 4 x 4 window, not one per window.
    transposed = TPU_BATCHED_MATMUL.replace(
        "bf16[8,8,512,512]{2,3,1,0} convolution(%q, %k), window={size=8x8 stride=7x7 lhs_dilate=8x8}",
        "bf16[8,1024,1024,128]{2,3,1,0} convolution(%q, %k), window={size=4x4 pad=2_2x2_2 lhs_dilate=2x2}")
    assert not [i for i in hlo.parse_module("m", transposed).instructions.values() if i.batched_mkn]


def _listed(program: str, category: str, ms: float, flops: float, bytes_accessed: float, runs: int = 10) -> dict:
    return {"name": f"by_program/{program}/{category}/op", "total_self_time_ms": ms, "flops": flops,
            "bytes_accessed": bytes_accessed, "occurrences": runs}


def _profile(grouped: dict, summary: list[dict]) -> ToolResult:
    return ToolResult(name="get_hlo_op_profile", status=ToolStatus.OK, seconds=0.0,
                      data={"grouped_operations": grouped, "category_summary": summary})


def test_a_program_is_costed_with_what_its_categories_total_not_only_the_few_operations_listed():
    # Five listed ops of 60 ms in a category of 100 ms; the rest of the category is the step program's too.
    flops = 0.6 * V5E.peak_flops["bf16"] * 0.1
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit_train(2)")
    listed = [_listed("jit_train(2)", "convolution fusion", 12.0, flops / 5, 1e6)] * 5
    profile = _profile({"convolution fusion": listed},
                       [{"category": "convolution fusion", "total_self_time_ms": 100.0, "total_flops": flops / 0.6,
                         "bytes_accessed": 1e7}])
    (program,) = _analysis(host, tools=[profile]).roofline
    assert program.device_ms == pytest.approx(100.0) and program.flops == pytest.approx(flops / 0.6)


def _roofline_model(hbm_gibs: float, every_space_gibs: float, total_time_ms: float | None = None) -> ToolResult:
    program = {"hbm_bw_gibs": hbm_gibs, "measured_memory_bw_gibs": every_space_gibs}
    if total_time_ms is not None:
        program["total_time_ms"] = total_time_ms
    return ToolResult(name="get_roofline_model", status=ToolStatus.OK, seconds=0.0, data={"program": program})


def _costed(*, bytes_accessed: float, flops: float, tools=(), buffers=(), modules=()):
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", program="jit_train(2)")
    profile = _profile({"convolution fusion": [_listed("jit_train(2)", "convolution fusion", 100.0, flops,
                                                       bytes_accessed)]}, [])
    works = hlo.kernel_work([hlo.parse_module(name, text) for name, text in modules])
    return assess(hosts=[host], tools=[profile, *tools], hlo_issues={}, versions={}, seconds=0.0,
                  profile=ProfileInput(source="s", session="s", files=["h.xplane.pb"], bytes=1), hlo_kernels=works,
                  hlo_programs=list(buffers))


def test_bytes_of_every_memory_space_count_as_hbm_traffic_only_for_the_share_xprof_measures_in_hbm():
    # 0.9 of the HBM peak in bytes of every memory space, a quarter of them in HBM: compute-bound, not memory.
    flops = 0.7 * V5E.peak_flops["bf16"] * 0.1
    analysis = _costed(bytes_accessed=0.9 * V5E.hbm_bytes_per_s * 0.1, flops=flops,
                       tools=[_roofline_model(250.0, 1000.0)])
    (program,) = analysis.roofline
    assert program.bandwidth_fraction == pytest.approx(0.225) and program.verdict == "compute-bound"
    assert analysis.metrics.hbm_bandwidth_fraction == pytest.approx(0.225)


def test_the_programs_move_at_least_the_hbm_bytes_xprofs_roofline_model_measures_over_the_capture():
    # The op profile costs a fusion that reads a custom call's result at nothing, so its bytes hold 0.3 of the HBM
    # peak over the 100 ms; the roofline model, counting every op, measures 0.7 of it in HBM (half its bytes).
    hbm_gibs = 0.7 * V5E.hbm_bytes_per_s / GIB
    analysis = _costed(bytes_accessed=0.3 * V5E.hbm_bytes_per_s * 0.1, flops=1e12,
                       tools=[_roofline_model(hbm_gibs, 2 * hbm_gibs, total_time_ms=100.0)])
    (program,) = analysis.roofline
    assert program.bandwidth_fraction == pytest.approx(0.7) and program.verdict == "memory-bound"
    assert analysis.metrics.hbm_bandwidth_fraction == pytest.approx(0.7)
    # Where the op profile counts more in HBM than the roofline model measures, its count stands.
    analysis = _costed(bytes_accessed=0.6 * V5E.hbm_bytes_per_s * 0.1, flops=1e12,
                       tools=[_roofline_model(hbm_gibs / 7, hbm_gibs / 7, total_time_ms=100.0)])
    assert analysis.roofline[0].bandwidth_fraction == pytest.approx(0.6)


def test_a_program_moves_at_least_its_inputs_and_outputs_each_run():
    # Ten runs in 100 ms, each reading 7 GB of weights: 0.85 of the HBM peak, whatever XProf counted in HBM.
    weights = int(0.85 * V5E.hbm_bytes_per_s * 0.01) - 1000
    buffers = [HloProgram(module="jit_train(2)", inputs_bytes=weights, outputs_bytes=1000)]
    analysis = _costed(bytes_accessed=1e9, flops=1e12, tools=[_roofline_model(100.0, 1000.0)], buffers=buffers)
    (program,) = analysis.roofline
    assert program.bandwidth_fraction == pytest.approx(0.85) and program.verdict == "memory-bound"


def test_a_program_does_at_least_the_work_of_its_matmuls_where_the_cost_model_counts_less():
    # The op profile gives the program's custom calls no FLOPs; its HLO holds a 4096^3 matmul per run.
    text = TPU_HIGHEST.replace("jit__lambda", "jit_train").replace("precision={highest,highest}", "")
    analysis = _costed(bytes_accessed=1e9, flops=1e9, modules=[("jit_train(2)", text)])
    (program,) = analysis.roofline
    assert program.flops == pytest.approx(10 * 2 * 4096**3)
    assert analysis.metrics.mfu == pytest.approx(2 * 4096**3 / 0.01 / V5E.peak_flops["bf16"])


def test_a_program_whose_cost_model_runs_faster_than_the_chip_can_is_costed_by_its_hlos_matmuls():
    # XProf's op profile counts 18x the chip's peak for a program that copies a large cache: impossible, so its
    # FLOPs are its HLO's 4096^3 matmul per run, its bytes unknown, and neither MFU nor bandwidth is claimed near 1.
    text = TPU_HIGHEST.replace("jit__lambda", "jit_train").replace("precision={highest,highest}", "")
    analysis = _costed(bytes_accessed=1e15, flops=18 * V5E.peak_flops["bf16"] * 0.1, modules=[("jit_train(2)", text)])
    (program,) = analysis.roofline
    assert program.flops == pytest.approx(10 * 2 * 4096**3) and program.bytes_accessed is None
    assert program.verdict != "compute-bound" and "counted more FLOP/s for it than the chip can run" in (
        program.statement)
    assert analysis.metrics.mfu == pytest.approx(2 * 4096**3 / 0.01 / V5E.peak_flops["bf16"])
    assert analysis.metrics.hbm_bandwidth_fraction is None


# --- batched matmuls narrower than a TPU's matrix unit ---------------------------------------------


def _attention(head: int, width: int = 512, seq: int = 4096, batch: int = 2) -> str:
    """A TPU's compiled attention of ``width / head`` heads of ``head`` as XLA prints it: the queries-by-keys
    batched matmul as a convolution over dilated windows, a softmax over its scores, and the MLP's plain matmul."""
    heads = width // head
    qk = f"bf16[{batch},{seq},{heads},{head}]{{1,3,2,0}}"
    scores = f"[{batch},{heads},{seq},{seq}]{{2,3,1,0}}"
    return f"""HloModule jit_step, is_scheduled=true

%fused_scores (param_0: bf16[{batch},{seq},{heads},{head}], param_1: bf16[{batch},{seq},{heads},{head}]) -> f32{scores} {{
  %param_0 = {qk} parameter(0)
  %param_1 = {qk} parameter(1)
  %convolution-base-dilated.1 = bf16{scores} convolution(%param_0, %param_1), window={{size={batch}x{heads} stride=1x{heads - 1} lhs_dilate={batch}x{heads}}}, dim_labels=0b1f_0o1i->01bf
  ROOT %convert.2 = f32{scores} convert(%convolution-base-dilated.1)
}}

%fused_softmax (param_0.1: f32{scores}) -> f32{scores} {{
  %param_0.1 = f32{scores} parameter(0)
  ROOT %exponential.3 = f32{scores} exponential(%param_0.1)
}}

%fused_mlp (param_0.2: bf16[8192,{width}], param_1.2: bf16[{width},2048]) -> bf16[8192,2048] {{
  %param_0.2 = bf16[8192,{width}]{{1,0}} parameter(0)
  %param_1.2 = bf16[{width},2048]{{1,0}} parameter(1)
  ROOT %convolution.4 = bf16[8192,2048]{{1,0}} convolution(%param_0.2, %param_1.2), dim_labels=bf_io->bf
}}

ENTRY %main (q: {qk}, k: {qk}, x: bf16[8192,{width}], w: bf16[{width},2048]) -> f32{scores} {{
  %q = {qk} parameter(0)
  %k = {qk} parameter(1)
  %x = bf16[8192,{width}]{{1,0}} parameter(2)
  %w = bf16[{width},2048]{{1,0}} parameter(3)
  %fusion.1 = f32{scores} fusion(%q, %k), kind=kOutput, calls=%fused_scores
  %fusion.3 = bf16[8192,2048]{{1,0}} fusion(%x, %w), kind=kOutput, calls=%fused_mlp
  ROOT %fusion.2 = f32{scores} fusion(%fusion.1), kind=kLoop, calls=%fused_softmax
}}
"""


CPU_BATCHED_DOT = """HloModule jit_attend

ENTRY %main (q.1: f32[4,16,256,64], k.2: f32[4,16,256,64], w.3: f32[64,64]) -> f32[4,16,256,256] {
  %q.1 = f32[4,16,256,64]{3,2,1,0} parameter(0)
  %k.2 = f32[4,16,256,64]{3,2,1,0} parameter(1)
  %w.3 = f32[64,64]{1,0} parameter(2)
  %dot.4 = f32[4,16,256,64]{3,2,1,0} dot(%q.1, %w.3), lhs_contracting_dims={3}, rhs_contracting_dims={0}
  ROOT %dot.5 = f32[4,16,256,256]{3,2,1,0} dot(%dot.4, %k.2), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}
}
"""


def test_a_batched_matmuls_rows_contracted_size_and_columns_are_read_from_a_dot_and_a_tpu_convolution():
    dot = hlo.parse_module("jit_attend(1)", CPU_BATCHED_DOT)
    assert dot.instructions["dot.5"].batched_mkn == (256, 64, 256)
    assert dot.instructions["dot.4"].batched_mkn is None  # no batch dimensions: a plain matmul
    tpu = hlo.parse_module("jit_step(2)", _attention(64))
    assert tpu.instructions["convolution-base-dilated.1"].batched_mkn == (4096, 64, 4096)
    assert tpu.instructions["convolution.4"].batched_mkn is None
    works = {w.instruction: w for w in hlo.kernel_work([tpu])}
    assert (works["fusion.1"].matmul_width, works["fusion.1"].largest_elements) == (64, 2 * 8 * 4096 * 4096)
    assert (works["fusion.2"].matmul_width, works["fusion.2"].largest_elements) == (0, 2 * 8 * 4096 * 4096)
    assert works["fusion.3"].matmul_width == 0


@pytest.mark.parametrize(("device_type", "kind", "head", "flagged"), [
    ("TPU v5 lite", DeviceKind.TPU, 64, "Heads of 64 on a 128-wide matrix unit"),
    ("TPU v5 lite", DeviceKind.TPU, 128, ""),  # as wide as the unit
    ("TPU v6 lite", DeviceKind.TPU, 128, "Heads of 128 on a 256-wide matrix unit"),
    ("NVIDIA A100-SXM4-80GB", DeviceKind.GPU, 64, ""),  # tensor cores take tiles of 16
])
def test_attention_heads_narrower_than_the_matrix_unit_cost_what_wider_heads_would_save(device_type, kind, head,
                                                                                         flagged):
    host = _host(kind=kind, device_type=device_type, program="PjitFunction(step)", busy=0.95,
                 top_ops=[_op("fusion.1", 0.3), _op("fusion.2", 0.5), _op("fusion.3", 0.2)])
    analysis = _analysis(host, modules=[("jit_step(2)", _attention(head))])
    found = [f for f in analysis.findings if f.title.startswith("Heads of")]
    assert bool(found) is bool(flagged) and bool(analysis.narrow_matmuls) is bool(flagged)
    if flagged:
        (finding,) = found
        assert finding.title == f"{flagged}: their matmuls and score matrices take 80% of device time"
        assert finding.priority is Priority.P1 and finding.category is FindingCategory.COMPUTE
        (narrow,) = analysis.narrow_matmuls
        # The scores' kernels and the matmul's, not the MLP's: half their time scales with the number of heads.
        assert narrow.kernels == ["fusion.2", "fusion.1"]
        assert narrow.saved_share_of_loop == pytest.approx(0.8 * 0.5 * 0.95)
        assert "fewer, wider heads" in finding.fix
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


# --- a lookup's gradient applied to the whole table ---------------------------------------------

DENSE_TABLE_UPDATE = """HloModule jit_step

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%fused_lookup (param_0.1: bf16[262144,512], param_1.1: s32[4096,1]) -> bf16[4096,512] {
  %param_0.1 = bf16[262144,512]{1,0} parameter(0)
  %param_1.1 = s32[4096,1]{1,0} parameter(1)
  ROOT %gather.1 = bf16[4096,512]{1,0} gather(%param_0.1, %param_1.1), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,512}
}

%fused_mlp (param_0.2: bf16[4096,512], param_1.2: bf16[512,512]) -> bf16[4096,512] {
  %param_0.2 = bf16[4096,512]{1,0} parameter(0)
  %param_1.2 = bf16[512,512]{1,0} parameter(1)
  ROOT %dot.1 = bf16[4096,512]{1,0} dot(%param_0.2, %param_1.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_scatter (param_0.3: bf16[262144,512], param_1.3: s32[4096,1], param_2.3: bf16[4096,512]) -> bf16[262144,512] {
  %param_0.3 = bf16[262144,512]{1,0} parameter(0)
  %param_1.3 = s32[4096,1]{1,0} parameter(1)
  %param_2.3 = bf16[4096,512]{1,0} parameter(2)
  ROOT %scatter.1 = bf16[262144,512]{1,0} scatter(%param_0.3, %param_1.3, %param_2.3), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

%fused_update (param_0.4: bf16[262144,512], param_1.4: bf16[262144,512]) -> bf16[262144,512] {
  %param_0.4 = bf16[262144,512]{1,0} parameter(0)
  %param_1.4 = bf16[262144,512]{1,0} parameter(1)
  ROOT %subtract.1 = bf16[262144,512]{1,0} subtract(%param_0.4, %param_1.4)
}

ENTRY %main (table: bf16[262144,512], ids: s32[4096,1], w: bf16[512,512]) -> (bf16[262144,512], bf16[4096,512]) {
  %table = bf16[262144,512]{1,0} parameter(0)
  %ids = s32[4096,1]{1,0} parameter(1)
  %w = bf16[512,512]{1,0} parameter(2)
  %lookup = bf16[4096,512]{1,0} fusion(%table, %ids), kind=kLoop, calls=%fused_lookup
  %mlp = bf16[4096,512]{1,0} fusion(%lookup, %w), kind=kOutput, calls=%fused_mlp
  %zero = bf16[] constant(0)
  %zeros = bf16[262144,512]{1,0} broadcast(%zero), dimensions={}
  %gradient = bf16[262144,512]{1,0} fusion(%zeros, %ids, %mlp), kind=kLoop, calls=%fused_scatter
  %update = bf16[262144,512]{1,0} fusion(%table, %gradient), kind=kLoop, calls=%fused_update
  ROOT %out = (bf16[262144,512]{1,0}, bf16[4096,512]{1,0}) tuple(%update, %mlp)
}
"""


@pytest.mark.parametrize(("update_share", "priority"), [(0.5, Priority.P0), (0.2, Priority.P1), (0.0, Priority.P2),
                                                        (None, None)])
def test_a_lookups_gradient_applied_to_the_whole_table_costs_what_updating_its_rows_would_save(update_share,
                                                                                              priority):
    shares = {"gradient": 0.05, "zeros": 0.05, "update": update_share, "lookup": 0.05, "mlp": 0.3}
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", busy=0.9,
                 top_ops=[_op(name, share) for name, share in shares.items() if share])
    module = DENSE_TABLE_UPDATE if update_share is not None else DENSE_TABLE_UPDATE.replace(
        "broadcast(%zero), dimensions={}", "parameter(3)")  # rows summed into an array given to the program
    analysis = _analysis(host, modules=[("jit_step(2)", module)])
    found = [f for f in analysis.findings if f.title.startswith("A lookup's gradient")]
    assert [f.priority for f in found] == ([priority] if priority else [])
    if priority:
        (finding,) = found
        (dense,) = analysis.dense_updates
        # The zeros, the scatter into them and the table's update; not the lookup, nor the model's matmul.
        assert set(dense.kernels) == {name for name in ("gradient", "zeros", "update") if shares[name]}
        assert dense.table_shape == [262144, 512] and dense.updates_per_element == pytest.approx(4096 / 262144)
        kernels_share = 0.1 + update_share
        assert dense.saved_share_of_loop == pytest.approx(kernels_share * (1 - 4096 / 262144) * 0.9)
        assert finding.title == (f"A lookup's gradient applied to a whole table of 262,144 rows of 512: "
                                 f"{kernels_share:.0%} of device time for the 1.6% of it the step looked up")
        assert "table.at[ids].add" in finding.fix and finding.category is FindingCategory.COMPUTE
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    else:
        assert analysis.dense_updates == []


# --- a matrix decomposition every step ---------------------------------------------------------

DECOMPOSITION = """HloModule jit_step

ENTRY %main (g: f32[2048,2048], w: f32[2048,2048]) -> f32[2048,2048] {
  %g = f32[2048,2048]{1,0} parameter(0)
  %w = f32[2048,2048]{1,0} parameter(1)
  %custom-call.1 = (f32[2048,128]{1,0}, s32[128]{0}) custom-call(%g), custom_call_target="LuDecompositionBlock"
  %custom-call.2 = f32[16,128,128]{2,1,0} custom-call(%g), custom_call_target="InvertDiagBlocksLowerTriangular"
  ROOT %dot.1 = f32[2048,2048]{1,0} dot(%g, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


@pytest.mark.parametrize(("lu_share", "priority"), [(0.7, Priority.P0), (0.3, Priority.P1), (0.1, Priority.P2), (0.01, None)])
def test_a_matrix_decomposition_every_step_is_named_by_its_library_kernels_share_of_the_loop(lu_share, priority):
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", busy=0.8,
                 top_ops=[_op("custom-call.1", lu_share), _op("custom-call.2", 0.05),
                          _op("dot.1", 0.95 - lu_share)])
    analysis = _analysis(host, modules=[("jit_step(3)", DECOMPOSITION)])
    found = [f for f in analysis.findings if f.title.startswith("A matrix decomposition every step")]
    assert [f.priority for f in found] == ([priority] if priority else [])
    if priority:
        (finding,) = found
        share = (lu_share + 0.05) * 0.8
        assert finding.title == f"A matrix decomposition every step: its library kernels take {share:.0%} of the loop"
        assert '"LuDecompositionBlock", "InvertDiagBlocksLowerTriangular"' in " ".join(finding.evidence)
        assert "every N steps" in finding.fix and "cho_solve" in finding.fix
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


# --- a convolution written by hand -------------------------------------------------------------

def _unfolded(windows: int) -> str:
    """A program that copies 3-wide windows of its input side by side (``windows`` of them) and multiplies them:
    the first window into a fresh buffer, the others into the buffer the last one wrote."""
    width = 512 * windows
    fusions, chain = [], "%buffer"
    for k in range(windows):
        fusions.append(f"""%fused_window.{k} (param_0.{k}: bf16[32,8192,{width}], param_1.{k}: bf16[32,8192,512]) -> bf16[32,8192,{width}] {{
  %param_0.{k} = bf16[32,8192,{width}]{{2,1,0}} parameter(0)
  %param_1.{k} = bf16[32,8192,512]{{2,1,0}} parameter(1)
  %zero.{k} = bf16[] constant(0)
  %pad.{k} = bf16[32,8194,512]{{2,1,0}} pad(%param_1.{k}, %zero.{k}), padding=0_0x1_1x0_0
  %slice.{k} = bf16[32,8192,512]{{2,1,0}} slice(%pad.{k}), slice={{[0:32], [{k}:{8192 + k}], [0:512]}}
  %start.{k} = s32[] constant(0)
  %offset.{k} = s32[] constant({512 * k})
  ROOT %dynamic-update-slice.{k} = bf16[32,8192,{width}]{{2,1,0}} dynamic-update-slice(%param_0.{k}, %slice.{k}, %start.{k}, %start.{k}, %offset.{k})
}}
""")
    entry = [f"  %window.{k} = bf16[32,8192,{width}]{{2,1,0}} fusion({'%buffer' if k == 0 else f'%window.{k - 1}'}, "
             f"%x), kind=kLoop, calls=%fused_window.{k}" for k in range(windows)]
    return (f"HloModule jit_step\n\n{''.join(fusions)}\n%fused_matmul (param_0.m: bf16[32,8192,{width}], param_1.m: "
            f"bf16[{width},512]) -> bf16[32,8192,512] {{\n  %param_0.m = bf16[32,8192,{width}]{{2,1,0}} parameter(0)\n"
            f"  %param_1.m = bf16[{width},512]{{1,0}} parameter(1)\n  ROOT %dot.m = bf16[32,8192,512]{{2,1,0}} "
            f"dot(%param_0.m, %param_1.m), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}\n}}\n\n"
            f"ENTRY %main (x: bf16[32,8192,512], w: bf16[{width},512], buffer: bf16[32,8192,{width}]) -> "
            f"bf16[32,8192,512] {{\n  %x = bf16[32,8192,512]{{2,1,0}} parameter(0)\n  %w = bf16[{width},512]{{1,0}} "
            f"parameter(1)\n  %buffer = bf16[32,8192,{width}]{{2,1,0}} parameter(2)\n" + "\n".join(entry)
            + f"\n  ROOT %matmul = bf16[32,8192,512]{{2,1,0}} fusion(%window.{windows - 1}, %w), kind=kOutput, "
              "calls=%fused_matmul\n}\n")


@pytest.mark.parametrize(("windows", "flagged"), [(3, True), (2, False)])
def test_an_input_copied_as_shifted_windows_side_by_side_and_multiplied_is_a_convolution_written_by_hand(
        windows, flagged):
    module = hlo.parse_module("jit_step(5)", _unfolded(windows))
    works = {w.instruction: w for w in hlo.kernel_work([module])}
    assert works["window.1"].windows_side_by_side == windows and works["matmul"].windows_side_by_side == 0
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", busy=0.9,
                 top_ops=[_op("matmul", 0.6), _op("window.0", 0.1), _op("window.1", 0.1)])
    analysis = _analysis(host, modules=[("jit_step(5)", _unfolded(windows))])
    found = [f for f in analysis.findings if f.title.startswith("A convolution written by hand")]
    assert bool(found) is flagged and bool(analysis.unfolded_inputs) is flagged
    if flagged:
        (finding,) = found
        assert finding.title == ("A convolution written by hand: an input copied as 3 shifted windows side by side, "
                                 "in kernels that take 72% of the loop")
        assert analysis.findings[0] is finding  # before the memory and roofline findings its copies cause
        assert analysis.unfolded_inputs[0].kernels == ["matmul", "window.0", "window.1"]
        assert "jax.lax.conv_general_dilated" in finding.fix
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


PATCHES_BY_AN_IDENTITY_CONVOLUTION = """HloModule jit_step

%fused_identity () -> bf16[9,9] {
  %iota.a = s32[9,9]{0,1} iota(), iota_dimension=0
  %iota.b = s32[9,9]{0,1} iota(), iota_dimension=1
  %eq.i = pred[9,9]{0,1} compare(%iota.a, %iota.b), direction=EQ
  ROOT %convert.i = bf16[9,9]{0,1} convert(%eq.i)
}

%fused_patches (param_0.p: bf16[32,64,64,128], param_1.p: bf16[9,9]) -> bf16[32,64,64,128,9] {
  %param_0.p = bf16[32,64,64,128]{3,2,1,0} parameter(0)
  %param_1.p = bf16[9,9]{0,1} parameter(1)
  %kernel.p = bf16[3,3,1,128,9]{4,3,2,1,0} broadcast(%param_1.p), dimensions={}
  ROOT %convolution.p = bf16[32,64,64,128,9]{4,3,2,1,0} convolution(%param_0.p, %kernel.p), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}

ENTRY %main (x: bf16[32,64,64,128]) -> bf16[32,64,64,128,9] {
  %x = bf16[32,64,64,128]{3,2,1,0} parameter(0)
  %identity = bf16[9,9]{0,1} fusion(), kind=kLoop, calls=%fused_identity
  ROOT %patches = bf16[32,64,64,128,9]{4,3,2,1,0} fusion(%x, %identity), kind=kOutput, calls=%fused_patches
}
"""


def test_patches_made_by_a_convolution_with_an_identity_kernel_are_copied_windows_too():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", busy=0.9, top_ops=[_op("patches", 0.5)])
    analysis = _analysis(host, modules=[("jit_step(6)", PATCHES_BY_AN_IDENTITY_CONVOLUTION)])
    (unfolded,) = analysis.unfolded_inputs
    assert unfolded.windows == 9 and unfolded.kernels == ["patches"]
    assert unfolded.share_of_loop == pytest.approx(0.45)
    # A one-hot of ids (an embedding's lookup as a matmul) is not an identity: no windows.
    lookup = PATCHES_BY_AN_IDENTITY_CONVOLUTION.replace("%iota.b = s32[9,9]{0,1} iota(), iota_dimension=1",
                                                        "%iota.b = s32[9,9]{0,1} constant(3)")
    assert not _analysis(host, modules=[("jit_step(6)", lookup)]).unfolded_inputs


# --- matmuls of 32-bit integers ----------------------------------------------------------------

INT32_COUNTS = """HloModule jit_counts

%fused_counts (param_0.c: s32[8192,8192]) -> s32[8192,8192] {
  %param_0.c = s32[8192,8192]{1,0} parameter(0)
  ROOT %convolution.c = s32[8192,8192]{1,0} convolution(%param_0.c, %param_0.c), dim_labels=fb_io->bf
}

ENTRY %main (c: s32[8192,8192]) -> s32[8192,8192] {
  %c = s32[8192,8192]{1,0} parameter(0)
  ROOT %fusion = s32[8192,8192]{1,0} fusion(%c), kind=kOutput, calls=%fused_counts
}
"""


@pytest.mark.parametrize(("kind", "device_type", "priority"), [(DeviceKind.TPU, "TPU v5 lite", Priority.P0),
                                                                (DeviceKind.CPU, "CPU", Priority.P1)])
def test_matmuls_of_int32_operands_are_a_dtype_finding_with_a_bf16_fix(kind, device_type, priority):
    host = _host(kind=kind, device_type=device_type, top_ops=[_op("fusion", 0.9), _op("reduce", 0.1)])
    analysis = _analysis(host, modules=[("jit_counts(1)", INT32_COUNTS)])
    (finding,) = [f for f in analysis.findings if "integers" in f.title]
    assert finding.title == "Matmuls of 32-bit integers take 90% of device time"
    assert finding.priority is priority and "preferred_element_type=jnp.float32" in finding.fix
    assert [(s.kind, s.kernels) for s in analysis.slow_precision] == [("wide_integer", ["fusion"])]
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    # int8 operands accumulating in int32 are what the matrix unit takes: no finding.
    int8 = INT32_COUNTS.replace("(param_0.c: s32", "(param_0.c: s8").replace("%param_0.c = s32", "%param_0.c = s8")
    int8 = int8.replace("(c: s32[8192,8192]) -> s32", "(c: s8[8192,8192]) -> s32").replace("%c = s32", "%c = s8")
    assert not [f for f in _analysis(host, modules=[("jit_counts(1)", int8)]).findings if "integers" in f.title]


# --- results computed in full and subsampled ---------------------------------------------------

def _subsampled(stride: int) -> str:
    """A stride-1 convolution whose result a fusion reads through a ``stride`` slice, and on the gradient's side
    the slice's transpose (a pad with ``stride - 1`` zeros between elements) convolved at full size."""
    small = 64 // stride
    return f"""HloModule jit_step

%fused_conv (param_0.f: bf16[32,64,64,128], param_1.f: bf16[3,3,128,128]) -> bf16[32,64,64,128] {{
  %param_0.f = bf16[32,64,64,128]{{3,2,1,0}} parameter(0)
  %param_1.f = bf16[3,3,128,128]{{3,2,1,0}} parameter(1)
  ROOT %conv.f = bf16[32,64,64,128]{{3,2,1,0}} convolution(%param_0.f, %param_1.f), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
}}

%fused_relu (param_0.r: bf16[32,64,64,128]) -> bf16[32,{small},{small},128] {{
  %param_0.r = bf16[32,64,64,128]{{3,2,1,0}} parameter(0)
  %slice.r = bf16[32,{small},{small},128]{{3,2,1,0}} slice(%param_0.r), slice={{[0:32:1], [0:64:{stride}], [0:64:{stride}], [0:128:1]}}
  %zero.r = bf16[] constant(0)
  %zeros.r = bf16[32,{small},{small},128]{{3,2,1,0}} broadcast(%zero.r), dimensions={{}}
  ROOT %max.r = bf16[32,{small},{small},128]{{3,2,1,0}} maximum(%slice.r, %zeros.r)
}}

%fused_input_grad (param_0.g: bf16[32,64,64,128], param_1.g: bf16[3,3,128,128]) -> bf16[32,64,64,128] {{
  %param_0.g = bf16[32,64,64,128]{{3,2,1,0}} parameter(0)
  %param_1.g = bf16[3,3,128,128]{{3,2,1,0}} parameter(1)
  ROOT %conv.g = bf16[32,64,64,128]{{3,2,1,0}} convolution(%param_0.g, %param_1.g), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01oi->b01f
}}

ENTRY %main (x: bf16[32,64,64,128], w: bf16[3,3,128,128], g: bf16[32,{small},{small},128]) -> (bf16[32,{small},{small},128], bf16[32,64,64,128]) {{
  %x = bf16[32,64,64,128]{{3,2,1,0}} parameter(0)
  %w = bf16[3,3,128,128]{{3,2,1,0}} parameter(1)
  %g = bf16[32,{small},{small},128]{{3,2,1,0}} parameter(2)
  %conv = bf16[32,64,64,128]{{3,2,1,0}} fusion(%x, %w), kind=kOutput, calls=%fused_conv
  %relu = bf16[32,{small},{small},128]{{3,2,1,0}} fusion(%conv), kind=kLoop, calls=%fused_relu
  %zero = bf16[] constant(0)
  %pad.g = bf16[32,64,64,128]{{3,2,1,0}} pad(%g, %zero), padding=0_0_0x0_{stride - 1}_{stride - 1}x0_{stride - 1}_{stride - 1}x0_0_0
  %input_grad = bf16[32,64,64,128]{{3,2,1,0}} fusion(%pad.g, %w), kind=kOutput, calls=%fused_input_grad
  ROOT %out = (bf16[32,{small},{small},128], bf16[32,64,64,128]) tuple(%relu, %input_grad)
}}
"""


@pytest.mark.parametrize(("stride", "flagged"), [(2, True), (1, False)])
def test_a_convolution_kept_one_output_in_four_by_a_strided_slice_is_work_thrown_away(stride, flagged):
    module = hlo.parse_module("jit_step(7)", _subsampled(stride))
    works = {w.instruction: w.computed_per_kept for w in hlo.kernel_work([module])}
    expected = 4 if flagged else 1
    assert (works["conv"], works["pad.g"], works["input_grad"], works["relu"]) == (expected, expected, expected, 1)
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", busy=0.9,
                 top_ops=[_op("conv", 0.3), _op("input_grad", 0.3), _op("pad.g", 0.1), _op("relu", 0.3)])
    analysis = _analysis(host, modules=[("jit_step(7)", _subsampled(stride))])
    found = [f for f in analysis.findings if "mostly dropped" in f.title]
    assert bool(found) is flagged and bool(analysis.subsampled_results) is flagged
    if flagged:
        (finding,) = found
        assert finding.priority is Priority.P0
        # A quarter of each kernel's FLOPs and bytes at the chip's roofline: the convolutions' FLOPs at the bf16
        # peak, the pad's bytes at the HBM bandwidth, far below the 3 and 1 ms the kernels took.
        convolution_ms = 32 * 64 * 64 * 128 * 3 * 3 * 128 * 2 / 4 / V5E.peak_flops["bf16"] * 1e3
        pad_ms = 2 * (32 * 32 * 32 * 128 + 1 + 32 * 64 * 64 * 128) / 4 / V5E.hbm_bytes_per_s * 1e3
        kept = 0.3 * convolution_ms / 3.0 * 2 + 0.1 * pad_ms / 1.0
        assert analysis.subsampled_results[0].share_of_loop_discarded == pytest.approx(0.9 * (0.7 - kept))
        assert finding.title == ("Matmul or convolution results computed in full and mostly dropped (one element in "
                                 "4 read): 62% of the loop computes what is thrown away")
        assert analysis.subsampled_results[0].kernels == ["conv", "input_grad", "pad.g"]
        assert "window_strides" in finding.fix
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


def test_on_a_cpu_the_read_elements_alone_take_their_share_of_each_kernels_time():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", busy=0.9,
                 top_ops=[_op("conv", 0.3), _op("input_grad", 0.3), _op("pad.g", 0.1), _op("relu", 0.3)])
    (subsampled,) = _analysis(host, modules=[("jit_step(7)", _subsampled(2))]).subsampled_results
    assert subsampled.share_of_loop_discarded == pytest.approx(0.7 * 3 / 4 * 0.9)  # no peaks: 1/4 of their time


# --- matmul chains multiplied in the costly order -----------------------------------------------

TRANSPOSED_BACK = """  %squared = f32[1024,1024]{0,1} transpose(%bitcast.f), dimensions={1,0}
  %back = f32[1024,32]{1,0} dot(%squared, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""
ADDED_TO_A_RESIDUAL = """  %squared = f32[1024,1024]{1,0} add(%bitcast.f, %other)"""


def _two_hops(cheap_order: bool, beside: str = TRANSPOSED_BACK) -> str:
    """A graph layer's two hops over a 1024-node adjacency: (adj @ adj) @ x, or adj @ (adj @ x); beside them
    ``beside``, kernels that read the first product (by default its transpose's product, as a gradient's), and one
    of the same size that does not."""
    first, first_shape = ("%adj, %x", "f32[1024,32]") if cheap_order else ("%adj, %adj", "f32[1024,1024]")
    second = "%adj, %first" if cheap_order else "%first, %x"
    return f"""HloModule jit_step

%fused_first (param_0.a: f32[1024,1024], param_1.a: {"f32[1024,32]" if cheap_order else "f32[1024,1024]"}) -> {first_shape} {{
  %param_0.a = f32[1024,1024]{{1,0}} parameter(0)
  %param_1.a = {"f32[1024,32]" if cheap_order else "f32[1024,1024]"}{{1,0}} parameter(1)
  ROOT %dot.a = {first_shape}{{1,0}} dot(%param_0.a, %param_1.a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}

%fused_second (param_0.b: f32[1024,1024], param_1.b: {first_shape if cheap_order else "f32[1024,32]"}) -> f32[1024,32] {{
  %param_0.b = f32[1024,1024]{{1,0}} parameter(0)
  %param_1.b = {first_shape if cheap_order else "f32[1024,32]"}{{1,0}} parameter(1)
  %copy.b = {first_shape if cheap_order else "f32[1024,32]"}{{1,0}} copy(%param_1.b)
  ROOT %dot.b = f32[1024,32]{{1,0}} dot(%param_0.b, %copy.b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}

ENTRY %main (adj: f32[1024,1024], x: f32[1024,32], other: f32[1024,1024]) -> f32[1024,32] {{
  %adj = f32[1024,1024]{{1,0}} parameter(0)
  %x = f32[1024,32]{{1,0}} parameter(1)
  %other = f32[1024,1024]{{1,0}} parameter(2)
  %unrelated = f32[1024,1024]{{1,0}} exponential(%other)
  %first = {first_shape}{{1,0}} fusion({first}), kind=kOutput, calls=%fused_first
  %bitcast.f = {first_shape}{{1,0}} bitcast(%first)
{beside if not cheap_order else ""}
  ROOT %second = f32[1024,32]{{1,0}} fusion({second.replace("%first", "%bitcast.f")}), kind=kOutput, calls=%fused_second
}}
"""


def _scores_then_mix(weights: str) -> str:
    """Per-head scores q @ k.T (16 heads, 512 tokens, head dim 64) turned into weights by ``weights``, a fused
    computation's instructions from %param_0.m to %weights.m, and multiplied with v."""
    return f"""HloModule jit_step

%add (a.r: f32[], b.r: f32[]) -> f32[] {{
  %a.r = f32[] parameter(0)
  %b.r = f32[] parameter(1)
  ROOT %sum.r = f32[] add(%a.r, %b.r)
}}

%fused_scores (param_0.s: f32[16,512,64], param_1.s: f32[16,512,64]) -> f32[16,512,512] {{
  %param_0.s = f32[16,512,64]{{2,1,0}} parameter(0)
  %param_1.s = f32[16,512,64]{{2,1,0}} parameter(1)
  ROOT %dot.s = f32[16,512,512]{{2,1,0}} dot(%param_0.s, %param_1.s), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{2}}
}}

%fused_mix (param_0.m: f32[16,512,512], param_1.m: f32[16,512,64]) -> f32[16,512,64] {{
  %param_0.m = f32[16,512,512]{{2,1,0}} parameter(0)
  %param_1.m = f32[16,512,64]{{2,1,0}} parameter(1)
{weights}
  ROOT %dot.m = f32[16,512,64]{{2,1,0}} dot(%weights.m, %param_1.m), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
}}

ENTRY %main (q: f32[16,512,64], k: f32[16,512,64], v: f32[16,512,64]) -> f32[16,512,64] {{
  %q = f32[16,512,64]{{2,1,0}} parameter(0)
  %k = f32[16,512,64]{{2,1,0}} parameter(1)
  %v = f32[16,512,64]{{2,1,0}} parameter(2)
  %scores = f32[16,512,512]{{2,1,0}} fusion(%q, %k), kind=kOutput, calls=%fused_scores
  ROOT %mix = f32[16,512,64]{{2,1,0}} fusion(%scores, %v), kind=kOutput, calls=%fused_mix
}}
"""


ROW_SUMS = """  %zero.m = f32[] constant(0)
  %rowsum.m = f32[16,512]{1,0} reduce(%values.m, %zero.m), dimensions={2}, to_apply=%add
  %norm.m = f32[16,512,512]{2,1,0} broadcast(%rowsum.m), dimensions={0,1}"""
LINEAR_ATTENTION = ("  %values.m = f32[16,512,512]{2,1,0} copy(%param_0.m)\n" + ROW_SUMS
                    + "\n  %weights.m = f32[16,512,512]{2,1,0} divide(%values.m, %norm.m)")
INNER_PRODUCT_SUMMED = """
  %pairs.m = f32[16,512,512]{2,1,0} dot(%param_1.m, %param_1.m), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  %inner.m = f32[16,512,512]{2,1,0} multiply(%values.m, %pairs.m)
  %narrow.m = bf16[16,512,512]{2,1,0} convert(%inner.m)
  %inner_sum.m = bf16[16,512]{1,0} reduce(%narrow.m, %zero.m), dimensions={2}, to_apply=%add"""
SOFTMAX_ATTENTION = ("  %values.m = f32[16,512,512]{2,1,0} exponential(%param_0.m)\n" + ROW_SUMS
                     + "\n  %weights.m = f32[16,512,512]{2,1,0} divide(%values.m, %norm.m)")
CAUSAL_LINEAR_ATTENTION = """  %rows.m = s32[16,512,512]{2,1,0} iota(), iota_dimension=1
  %columns.m = s32[16,512,512]{2,1,0} iota(), iota_dimension=2
  %causal.m = pred[16,512,512]{2,1,0} compare(%rows.m, %columns.m), direction=GE
  %zero.m = f32[] constant(0)
  %zeros.m = f32[16,512,512]{2,1,0} broadcast(%zero.m), dimensions={}
  %weights.m = f32[16,512,512]{2,1,0} select(%causal.m, %param_0.m, %zeros.m)"""
MASK_MULTIPLIED = """  %mask.m = f32[512,512]{1,0} constant({...})
  %masks.m = f32[16,512,512]{2,1,0} broadcast(%mask.m), dimensions={1,2}
  %weights.m = f32[16,512,512]{2,1,0} multiply(%param_0.m, %masks.m)"""


@pytest.mark.parametrize(("module", "chain"), [
    (_two_hops(cheap_order=False), hlo.MatmulChain(batch=1, m=1024, k=1024, n=1024, p=32)),
    (_two_hops(cheap_order=True), None),
    (_two_hops(cheap_order=False, beside=ADDED_TO_A_RESIDUAL), None),
    (_scores_then_mix(LINEAR_ATTENTION), hlo.MatmulChain(batch=16, m=512, k=64, n=512, p=64)),
    (_scores_then_mix(LINEAR_ATTENTION + INNER_PRODUCT_SUMMED), hlo.MatmulChain(batch=16, m=512, k=64, n=512, p=64)),
    (_scores_then_mix(SOFTMAX_ATTENTION), None),
    (_scores_then_mix(CAUSAL_LINEAR_ATTENTION), None),
    (_scores_then_mix(MASK_MULTIPLIED), None),
], ids=["two_hops", "two_hops_in_the_cheap_order", "two_hops_whose_square_is_also_added",
        "row_scaled_linear_attention", "linear_attention_whose_scores_are_also_in_an_inner_product", "softmax_attention",
        "causal_linear_attention", "mask_multiplied"])
def test_a_matmul_chain_is_in_the_costly_order_only_when_linear_ops_join_its_products(module, chain):
    works = {w.instruction: w.costly_chain for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", module)])}
    if "%fused_first" in module:
        assert [works.get(name) for name in ("first", "second", "squared", "unrelated")] == [chain, chain, chain, None]
    else:
        assert [works[name] for name in ("scores", "mix")] == [chain, chain]


def test_two_hops_multiplied_adjacency_first_are_a_compute_finding_that_says_to_reassociate():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", busy=0.9, top_ops=[_op("first", 0.9), _op("second", 0.1)])
    analysis = _analysis(host, modules=[("jit_step(3)", _two_hops(cheap_order=False))])
    (finding,) = [f for f in analysis.findings if "costly order" in f.title]
    # (0.9 + 0.1) of device time x (1 - 1/16.5) fewer FLOPs x 0.9 busy
    assert finding.title == ("A matmul chain multiplied in the costly order: [1024,1024] @ [1024,1024] then @ "
                             "[1024,32]; reassociating saves about 85% of the loop")
    assert finding.priority is Priority.P0 and finding.category is FindingCategory.COMPUTE
    assert "16.5x fewer FLOPs" in finding.what and "a @ (b @ x)" in finding.fix
    (chain,) = analysis.costly_product_orders
    assert (chain.m, chain.k, chain.n, chain.p, chain.kernels) == (1024, 1024, 1024, 32, ["first", "second"])
    assert chain.share_of_loop_saved == pytest.approx(0.9 * (1 - 1 / 16.5))
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    cheap = _analysis(host, modules=[("jit_step(3)", _two_hops(cheap_order=True))])
    assert not cheap.costly_product_orders and not [f for f in cheap.findings if "costly order" in f.title]


def _two_hops_trained() -> str:
    """Two hops multiplied adjacency first, trained: the forward's second product and the gradient's product of
    the transposed intermediate with the loss's gradient both read the [1024,1024] intermediate."""
    return _two_hops(cheap_order=False).replace(
        "ENTRY %main (adj: f32[1024,1024], x: f32[1024,32], other: f32[1024,1024]) -> f32[1024,32] {",
        "ENTRY %main (adj: f32[1024,1024], x: f32[1024,32], other: f32[1024,1024], g: f32[1024,32]) -> "
        "(f32[1024,32], f32[1024,32]) {\n  %g = f32[1024,32]{1,0} parameter(3)").replace(
        "  ROOT %second = f32[1024,32]{1,0} fusion(%bitcast.f, %x), kind=kOutput, calls=%fused_second",
        "  %second = f32[1024,32]{1,0} fusion(%bitcast.f, %x), kind=kOutput, calls=%fused_second\n"
        "  %grad = f32[1024,32]{1,0} dot(%bitcast.f, %g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
        "  ROOT %out = (f32[1024,32], f32[1024,32]) tuple(%second, %grad)")


def test_on_a_chip_the_other_order_takes_at_least_the_time_its_thin_products_take_to_read_their_operands():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", busy=0.9,
                 top_ops=[_op("first", 0.8), _op("second", 0.1), _op("grad", 0.1)])
    analysis = _analysis(host, modules=[("jit_step(3)", _two_hops_trained())])
    (chain,) = analysis.costly_product_orders
    assert chain.kernels == ["first", "second", "grad"]
    # Two kernels read the intermediate: in the other order each is adj @ x then adj @ that, reading the f32
    # adjacency twice; 16 MiB at 819 GB/s, far longer than their FLOPs at the peak.
    pair_bytes = 4 * (2 * 1024 * 1024 + 4 * 1024 * 32)
    assert chain.reassociated_ms_per_step == pytest.approx(2 * pair_bytes / V5E.hbm_bytes_per_s * 1e3)
    assert chain.share_of_loop_saved == pytest.approx(0.9 * (1 - chain.reassociated_ms_per_step / 10.0))
    (finding,) = [f for f in analysis.findings if "costly order" in f.title]
    assert "at least 0.02 ms per step" in finding.evidence[-1]
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


def test_on_a_cpu_the_other_order_runs_at_the_flop_rate_the_chains_kernels_achieved():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", busy=0.9,
                 top_ops=[_op("first", 0.8), _op("second", 0.1), _op("grad", 0.1)])
    (chain,) = _analysis(host, modules=[("jit_step(3)", _two_hops_trained())]).costly_product_orders
    pair = 2 * 1024 * 32 * 2048
    current = 2 * 1024 ** 3 + 2 * (2 * 1024 * 1024 * 32)
    assert chain.reassociated_ms_per_step == pytest.approx(10.0 * 2 * pair / current)


def test_a_thin_product_costs_on_a_matrix_unit_what_one_as_wide_as_the_unit_does():
    # A Gram matrix first, (x.T @ x) @ w with w of 8 columns: 32x fewer FLOPs reassociated on a CPU, but on a
    # 128-wide matrix unit both thin products of x.T @ (x @ w) cost as if w had 128 columns: 2x, not worth saying.
    gram_first = hlo.MatmulChain(batch=1, m=512, k=65536, n=512, p=8)
    assert gram_first.fewer_on(0) == pytest.approx(512 * 512 * (65536 + 8) / (65536 * 8 * 1024))
    assert gram_first.fewer_on(128) == pytest.approx(2.0, rel=0.01)
    assert hlo.MatmulChain(batch=1, m=8192, k=8192, n=8192, p=128).fewer_on(128) == pytest.approx(32.5)


def test_linear_attention_normalised_between_its_products_names_the_batched_chain():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", busy=0.95,
                 top_ops=[_op("scores", 0.3), _op("mix", 0.2), _op("other", 0.5)])
    analysis = _analysis(host, modules=[("jit_step(3)", _scores_then_mix(LINEAR_ATTENTION))])
    (finding,) = [f for f in analysis.findings if "costly order" in f.title]
    # Both kernels read the [512,512] scores: two pairs of thin products, padded to the 128-wide matrix unit, whose
    # bytes bound them at about 0.02 ms against the 5 ms the kernels took.
    other_order_ms = 2 * 4 * 16 * (4 * 512 * 64 + 2 * 64 * 64) / V5E.hbm_bytes_per_s * 1e3
    assert analysis.costly_product_orders[0].reassociated_ms_per_step == pytest.approx(other_order_ms)
    assert finding.title == ("A matmul chain multiplied in the costly order: [512,64] @ [64,512] then @ [512,64] "
                             "(16 such products at once); reassociating saves about 47% of the loop")
    assert "phi(q) @ (phi(k).T @ v)" in finding.fix
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    softmax = _analysis(host, modules=[("jit_step(3)", _scores_then_mix(SOFTMAX_ATTENTION))])
    assert not [f for f in softmax.findings if "costly order" in f.title]


def _decoding(read_at: str = "%t", writes: str = "tokens") -> str:
    """A step that runs a matmul over every position of a 1024-position buffer, reads one position's row at
    ``read_at`` and writes the next token at a computed position into ``writes``: the buffer it is given
    (``tokens``), an array of zeros (``zeros``: a dynamic slice's gradient), or nowhere (``""``)."""
    written = {"tokens": "%written = s32[8,1024]{1,0} dynamic-update-slice(%tokens, %next, %zero, %position)",
               "zeros": "%written = s32[8,1024]{1,0} dynamic-update-slice(%zeros, %next, %zero, %position)",
               "": "%written = s32[8,1024]{1,0} copy(%tokens)"}[writes]
    return f"""HloModule jit_decode

%fused_read (param_0.r: f32[8,1024,512], param_1.r: s32[]) -> f32[8,1,512] {{
  %param_0.r = f32[8,1024,512]{{2,1,0}} parameter(0)
  %param_1.r = s32[] parameter(1)
  %zero.r = s32[] constant(0)
  ROOT %row.r = f32[8,1,512]{{2,1,0}} dynamic-slice(%param_0.r, %zero.r, %param_1.r, %zero.r), dynamic_slice_sizes={{8,1,512}}
}}

ENTRY %main (tokens: s32[8,1024], h: f32[8,1024,512], w: f32[512,512], t: s32[], head: f32[512,4096]) -> s32[8,1024] {{
  %tokens = s32[8,1024]{{1,0}} parameter(0)
  %h = f32[8,1024,512]{{2,1,0}} parameter(1)
  %w = f32[512,512]{{1,0}} parameter(2)
  %t = s32[] parameter(3)
  %head = f32[512,4096]{{1,0}} parameter(4)
  %last = s32[] constant(1023)
  %hidden = f32[8,1024,512]{{2,1,0}} dot(%h, %w), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
  %row = f32[8,1,512]{{2,1,0}} fusion(%hidden, {read_at}), kind=kLoop, calls=%fused_read
  %row2 = f32[8,512]{{1,0}} bitcast(%row)
  %logits = f32[8,4096]{{1,0}} dot(%row2, %head), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %first = f32[8,1]{{1,0}} slice(%logits), slice={{[0:8], [0:1]}}
  %next = s32[8,1]{{1,0}} convert(%first)
  %one = s32[] constant(1)
  %zero = s32[] constant(0)
  %zeros = s32[8,1024]{{1,0}} broadcast(%zero), dimensions={{}}
  %position = s32[] add(%t, %one)
  ROOT {written}
}}
"""


@pytest.mark.parametrize(("read_at", "writes", "flagged"), [
    ("%t", "tokens", True),
    ("%last", "tokens", False),  # a fixed position (a prefill's last token) is a slice, not a decoding step's read
    ("%t", "", False),  # no position of a buffer written: one row read, no decoding loop
    ("%t", "zeros", False),  # a training step's gradient of the row it read, written into zeros
])
def test_a_decoding_step_that_recomputes_every_position_is_decoding_without_a_cache(read_at, writes, flagged):
    module = hlo.parse_module("jit_decode(3)", _decoding(read_at, writes))
    works = {w.instruction: w.recomputed_positions for w in hlo.kernel_work([module])}
    assert (works["hidden"], works["row"], works["logits"]) == ((1024 if flagged else 0), 0, 0)
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", busy=0.9,
                 top_ops=[_op("hidden", 0.9), _op("logits", 0.1)])
    analysis = _analysis(host, modules=[("jit_decode(3)", _decoding(read_at, writes))])
    found = [f for f in analysis.findings if "key/value cache" in f.title]
    assert bool(found) is flagged and bool(analysis.uncached_decoding) is flagged
    if flagged:
        (finding,) = found
        assert finding.priority is Priority.P0  # 0.9 of device time x 1023/1024 recomputed x 0.9 busy
        assert finding.title == ("Decoding without a key/value cache: each call recomputes all 1,024 positions to "
                                 "add one token, 81% of the loop")
        assert analysis.uncached_decoding[0].kernels == ["hidden"]
        assert "dynamic_update_slice" in finding.fix and "past_key_values" in finding.fix
        assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


DFT_BY_MATMUL = """HloModule jit_step

%fused_dft () -> f32[256,256] {
  %iota.r = s32[256,256]{1,0} iota(), iota_dimension=0
  %iota.c = s32[256,256]{1,0} iota(), iota_dimension=1
  %product = s32[256,256]{1,0} multiply(%iota.r, %iota.c)
  %angle = f32[256,256]{1,0} convert(%product)
  ROOT %cosine.d = f32[256,256]{1,0} cosine(%angle)
}

%fused_transform (param_0.t: f32[512,256]) -> f32[512,256] {
  %param_0.t = f32[512,256]{1,0} parameter(0)
  %dft = f32[256,256]{1,0} fusion(), kind=kLoop, calls=%fused_dft
  ROOT %dot.t = f32[512,256]{1,0} dot(%param_0.t, %dft), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={highest,highest}
}

ENTRY %main (x: f32[512,256]) -> f32[512,256] {
  %x = f32[512,256]{1,0} parameter(0)
  ROOT %transform = f32[512,256]{1,0} fusion(%x), kind=kOutput, calls=%fused_transform
}
"""


def test_a_tpu_s_fft_lowered_to_matmuls_by_a_dft_matrix_is_not_a_precision_the_program_asked_for():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", top_ops=[_op("transform", 0.9)])
    analysis = _analysis(host, modules=[("jit_step(8)", DFT_BY_MATMUL)])
    assert not analysis.slow_precision and not [f for f in analysis.findings if "HIGHEST" in f.title]
    # The same matmul by a matrix the program passes in is the precision it asked for.
    asked = DFT_BY_MATMUL.replace("%dft = f32[256,256]{1,0} fusion(), kind=kLoop, calls=%fused_dft",
                                  "%dft = f32[256,256]{1,0} parameter(1)").replace(
        "(param_0.t: f32[512,256])", "(param_0.t: f32[512,256], dft: f32[256,256])").replace(
        "fusion(%x), kind=kOutput", "fusion(%x, %w), kind=kOutput").replace(
        "%x = f32[512,256]{1,0} parameter(0)", "%x = f32[512,256]{1,0} parameter(0)\n  %w = f32[256,256]{1,0} parameter(1)")
    assert [s.kind for s in _analysis(host, modules=[("jit_step(8)", asked)]).slow_precision] == ["highest"]


# --- the same weights multiplied once per example -----------------------------------------------

def _experts_per_example(weights: str, batch: int = 256) -> str:
    """A vmapped per-example product of 128 features by ``weights`` (the broadcast's source: a [128,512] matrix, a
    [512] bias, or a [batch,128,512] stack of its own per example), as a batched dot of width 1, and the
    per-example weight gradient summed over the batch in one fusion."""
    copies = f"f32[{batch},128,512]{{2,1,0}}"
    made = (f"%copies = {copies} parameter(1)" if weights == "stack" else
            f"%w = f32[128,512]{{1,0}} parameter(1)\n  %copies = {copies} broadcast(%w), dimensions={{1,2}}"
            if weights == "matrix" else
            f"%w = f32[512]{{0}} parameter(1)\n  %copies = {copies} broadcast(%w), dimensions={{2}}")
    parameter = f"{copies}" if weights == "stack" else "f32[128,512]" if weights == "matrix" else "f32[512]"
    return f"""HloModule jit_step

%add (a.r: f32[], b.r: f32[]) -> f32[] {{
  %a.r = f32[] parameter(0)
  %b.r = f32[] parameter(1)
  ROOT %sum.r = f32[] add(%a.r, %b.r)
}}

%fused_grad (param_0.g: f32[{batch},128], param_1.g: f32[{batch},512]) -> f32[128,512] {{
  %param_0.g = f32[{batch},128]{{1,0}} parameter(0)
  %param_1.g = f32[{batch},512]{{1,0}} parameter(1)
  %rows.g = {copies} broadcast(%param_0.g), dimensions={{0,1}}
  %columns.g = {copies} broadcast(%param_1.g), dimensions={{0,2}}
  %outer.g = {copies} multiply(%rows.g, %columns.g)
  %zero.g = f32[] constant(0)
  ROOT %sum.g = f32[128,512]{{1,0}} reduce(%outer.g, %zero.g), dimensions={{0}}, to_apply=%add
}}

ENTRY %main (x: f32[{batch},1,128], w: {parameter}, dy: f32[{batch},512]) -> f32[{batch},1,512] {{
  %x = f32[{batch},1,128]{{2,1,0}} parameter(0)
  {made}
  %dy = f32[{batch},512]{{1,0}} parameter(2)
  %product = f32[{batch},1,512]{{2,1,0}} dot(%x, %copies), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
  %rows = f32[{batch},128]{{1,0}} bitcast(%x)
  %grad = f32[128,512]{{1,0}} fusion(%rows, %dy), kind=kLoop, calls=%fused_grad
  ROOT %out = f32[{batch},1,512]{{2,1,0}} copy(%product)
}}
"""


@pytest.mark.parametrize(("weights", "batch", "copies"), [
    ("matrix", 256, hlo.SharedMatrixCopies(batch=256, matrix=(128, 512))),
    ("matrix", 4, None),
    ("bias", 256, None),
    ("stack", 256, None),
], ids=["one_matrix_broadcast_per_example", "a_batch_too_small_to_say", "a_bias_broadcast", "a_matrix_per_example"])
def test_a_batched_matmul_copies_the_weights_per_example_only_when_one_matrix_is_broadcast_along_its_batch(
        weights, batch, copies):
    works = {w.instruction: w.shared_matrix_copies
             for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", _experts_per_example(weights, batch))])}
    assert [works.get(name) for name in ("product", "copies", "grad", "out")] == [
        copies, copies if weights == "matrix" else None, copies, None]


def test_weights_copied_per_example_are_a_compute_finding_that_says_to_multiply_the_batch_once():
    host = _host(kind=DeviceKind.TPU, device_type="TPU v5 lite", busy=0.9,
                 top_ops=[_op("product", 0.5), _op("grad", 0.3), _op("copies", 0.1), _op("out", 0.1)])
    analysis = _analysis(host, modules=[("jit_step(3)", _experts_per_example("matrix"))])
    (finding,) = [f for f in analysis.findings if "once per example" in f.title]
    # (0.5 + 0.3 + 0.1) of device time x (1 - 1/256) x 0.9 busy
    assert finding.title == ("The same weights multiplied once per example: 256 copies of a [128x512] matrix, "
                             "81% of the loop")
    assert finding.priority is Priority.P0 and finding.category is FindingCategory.COMPUTE
    assert "lax.cond" in finding.what and "jnp.where" in finding.fix
    (copied,) = analysis.per_example_weights
    assert (copied.batch, copied.matrix, copied.kernels) == (256, [128, 512], ["product", "grad", "copies"])
    assert copied.share_of_loop_saved == pytest.approx(0.9 * 0.9 * (1 - 1 / 256))
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    stacked = _analysis(host, modules=[("jit_step(3)", _experts_per_example("stack"))])
    assert not stacked.per_example_weights and not [f for f in stacked.findings if "once per example" in f.title]


# --- running sums as a matmul by a triangular matrix of ones ---------------------------------------

def _running_means(direction: str, ones: str = "%one.t", positions: int = 1024) -> str:
    """A [positions, positions] matrix selecting ``ones`` where ``iota(0) <direction> iota(1)`` (zeros elsewhere),
    made by one fusion and multiplied by a [positions, 64] sequence in another."""
    n = positions
    return f"""HloModule jit_step

%fused_triangle (param_0.t: f32[{n},{n}]) -> f32[{n},{n}] {{
  %param_0.t = f32[{n},{n}]{{1,0}} parameter(0)
  %rows.t = s32[{n},{n}]{{1,0}} iota(), iota_dimension=0
  %columns.t = s32[{n},{n}]{{1,0}} iota(), iota_dimension=1
  %lower.t = pred[{n},{n}]{{1,0}} compare(%rows.t, %columns.t), direction={direction}
  %constant_one.t = f32[] constant(1)
  %one.t = f32[{n},{n}]{{1,0}} broadcast(%constant_one.t), dimensions={{}}
  %constant_zero.t = f32[] constant(0)
  %zero.t = f32[{n},{n}]{{1,0}} broadcast(%constant_zero.t), dimensions={{}}
  ROOT %triangle.t = f32[{n},{n}]{{1,0}} select(%lower.t, {ones}, %zero.t)
}}

%fused_sums (param_0.s: f32[{n},{n}], param_1.s: f32[{n},64]) -> f32[{n},64] {{
  %param_0.s = f32[{n},{n}]{{1,0}} parameter(0)
  %param_1.s = f32[{n},64]{{1,0}} parameter(1)
  ROOT %dot.s = f32[{n},64]{{1,0}} dot(%param_0.s, %param_1.s), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}

ENTRY %main (x: f32[{n},64], scores: f32[{n},{n}]) -> f32[{n},64] {{
  %x = f32[{n},64]{{1,0}} parameter(0)
  %scores = f32[{n},{n}]{{1,0}} parameter(1)
  %triangle = f32[{n},{n}]{{1,0}} fusion(%scores), kind=kLoop, calls=%fused_triangle
  ROOT %sums = f32[{n},64]{{1,0}} fusion(%triangle, %x), kind=kOutput, calls=%fused_sums
}}
"""


@pytest.mark.parametrize(("module", "positions"), [
    (_running_means("GE"), 1024),
    (_running_means("LT"), 1024),
    (_running_means("EQ"), 0),
    (_running_means("GE", ones="%param_0.t"), 0),
], ids=["lower_triangle", "strictly_upper_triangle", "identity", "a_causal_mask_of_scores"])
def test_a_matmul_sums_running_positions_only_by_a_triangle_of_ones(module, positions):
    works = {w.instruction: w.running_sum_positions
             for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", module)])}
    assert [works[name] for name in ("sums", "triangle")] == [positions, positions]


def test_triangular_running_sums_are_a_compute_finding_that_says_to_sum_in_chunks():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", busy=0.9, top_ops=[_op("sums", 0.8), _op("triangle", 0.2)])
    analysis = _analysis(host, modules=[("jit_step(3)", _running_means("GE"))])
    (finding,) = [f for f in analysis.findings if "triangular matrix of ones" in f.title]
    assert finding.title.startswith("Running sums as a matmul by a triangular matrix of ones over 1,024 positions")
    assert finding.category is FindingCategory.COMPUTE and "jnp.cumsum" in finding.fix and "[chunks, 128" in finding.fix
    (summed,) = analysis.triangular_running_sums
    assert (summed.positions, summed.chunk, summed.kernels) == (1024, 128, ["sums", "triangle"])
    # At the rate the kernels achieved (their FLOPs over both kernels' time), an eighth of the FLOPs takes an eighth
    # of that time.
    assert summed.chunked_ms_per_step == pytest.approx(summed.ms_per_step / 8)
    assert summed.share_of_loop_saved == pytest.approx(0.9 * (1.0 - 1 / 8))
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
    short = _analysis(host, modules=[("jit_step(3)", _running_means("GE", positions=128))])
    assert not short.triangular_running_sums


# --- pairwise differences by broadcasting -----------------------------------------------------------

def _pairwise(combine: str = "subtract", other_dimensions: str = "{1,2}", rows: int = 512) -> str:
    """Squared distances between the rows of a [rows,32] and a [512,32] matrix by broadcasting: ``combine`` of the
    two broadcast to [rows,512,32] (the second along ``other_dimensions``), squared and summed over the features in
    one fusion, the differences read again by a second (a gradient's)."""
    pairs = f"f32[{rows},512,32]"
    return f"""HloModule jit_step

%add (a.r: f32[], b.r: f32[]) -> f32[] {{
  %a.r = f32[] parameter(0)
  %b.r = f32[] parameter(1)
  ROOT %sum.r = f32[] add(%a.r, %b.r)
}}

%fused_differences (param_0.d: f32[{rows},32], param_1.d: f32[512,32]) -> {pairs} {{
  %param_0.d = f32[{rows},32]{{1,0}} parameter(0)
  %param_1.d = f32[512,32]{{1,0}} parameter(1)
  %rows.d = {pairs}{{2,1,0}} broadcast(%param_0.d), dimensions={{0,2}}
  %columns.d = {pairs}{{2,1,0}} broadcast(%param_1.d), dimensions={other_dimensions}
  ROOT %differences.d = {pairs}{{2,1,0}} {combine}(%rows.d, %columns.d)
}}

%fused_distances (param_0.s: {pairs}) -> f32[{rows},512] {{
  %param_0.s = {pairs}{{2,1,0}} parameter(0)
  %squares.s = {pairs}{{2,1,0}} multiply(%param_0.s, %param_0.s)
  %zero.s = f32[] constant(0)
  ROOT %distances.s = f32[{rows},512]{{1,0}} reduce(%squares.s, %zero.s), dimensions={{2}}, to_apply=%add
}}

ENTRY %main (a: f32[{rows},32], b: f32[512,32], w: f32[32,32]) -> f32[{rows},512] {{
  %a = f32[{rows},32]{{1,0}} parameter(0)
  %b = f32[512,32]{{1,0}} parameter(1)
  %w = f32[32,32]{{1,0}} parameter(2)
  %projected = f32[{rows},32]{{1,0}} dot(%a, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %differences = {pairs}{{2,1,0}} fusion(%projected, %b), kind=kLoop, calls=%fused_differences
  ROOT %distances = f32[{rows},512]{{1,0}} fusion(%differences), kind=kInput, calls=%fused_distances
}}
"""


@pytest.mark.parametrize(("module", "pairs"), [
    (_pairwise(), (512, 512, 32)),
    (_pairwise(combine="multiply"), ()),
    (_pairwise(other_dimensions="{0,2}"), ()),
    (_pairwise(rows=64), ()),
], ids=["differences_of_every_pair", "an_outer_product", "both_along_the_same_rows", "too_few_pairs"])
def test_every_pair_is_combined_feature_by_feature_only_by_a_difference_of_two_matrices_broadcast_apart(
        module, pairs):
    works = {w.instruction: w.pairs_combined for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", module)])}
    assert [works[name] for name in ("differences", "distances", "projected")] == [pairs, pairs, ()]


def test_pairwise_differences_are_a_compute_finding_that_says_to_expand_the_squared_distance():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", busy=0.9,
                 top_ops=[_op("differences", 0.5), _op("distances", 0.499), _op("projected", 0.001)])
    analysis = _analysis(host, modules=[("jit_step(3)", _pairwise())])
    (finding,) = [f for f in analysis.findings if "Pairwise differences" in f.title]
    assert finding.title.startswith("Pairwise differences by broadcasting: 512 by 512 pairs of 32 features")
    assert finding.priority is Priority.P0 and "- 2 * a @ b.T" in finding.fix
    (pairwise,) = analysis.pairwise_by_broadcast
    assert (pairwise.rows, pairwise.other_rows, pairwise.features) == (512, 512, 32)
    assert pairwise.kernels == ["differences", "distances"]
    # At the rate the program's own matmul achieved (2 x 512 x 32 x 32 FLOPs in 0.01 ms), a matmul of
    # 2 x 512 x 512 x 32 FLOPs in each kernel's place takes 0.16 ms: 0.32 ms of the 9.99 ms the two took.
    assert pairwise.matmul_ms_per_step == pytest.approx(0.32)
    assert pairwise.share_of_loop_saved == pytest.approx(0.999 * (1 - 0.32 / 9.99) * 0.9)
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


# --- a Kronecker product made in full ------------------------------------------------------------

def _kron_layer(dimensions: tuple[str, str] = ("{0,2}", "{1,3}")) -> str:
    """x [256,1024] @ kron(a, b) for two [32,32] factors, their broadcasts to [32,32,32,32] along ``dimensions``
    multiplied in one fusion, the product reshaped to [1024,1024] and multiplied in another, and the gradient's
    [1024,1024] product of x and the upstream gradient."""
    first, second = dimensions
    return f"""HloModule jit_step

%fused_kron (param_0.k: f32[32,32], param_1.k: f32[32,32]) -> f32[32,32,32,32] {{
  %param_0.k = f32[32,32]{{1,0}} parameter(0)
  %param_1.k = f32[32,32]{{1,0}} parameter(1)
  %left.k = f32[32,32,32,32]{{3,2,1,0}} broadcast(%param_0.k), dimensions={first}
  %right.k = f32[32,32,32,32]{{3,2,1,0}} broadcast(%param_1.k), dimensions={second}
  ROOT %product.k = f32[32,32,32,32]{{3,2,1,0}} multiply(%left.k, %right.k)
}}

%fused_layer (param_0.l: f32[256,1024], param_1.l: f32[32,32,32,32]) -> f32[256,1024] {{
  %param_0.l = f32[256,1024]{{1,0}} parameter(0)
  %param_1.l = f32[32,32,32,32]{{3,2,1,0}} parameter(1)
  %matrix.l = f32[1024,1024]{{1,0}} reshape(%param_1.l)
  ROOT %dot.l = f32[256,1024]{{1,0}} dot(%param_0.l, %matrix.l), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}

ENTRY %main (a: f32[32,32], b: f32[32,32], x: f32[256,1024], g: f32[256,1024]) -> f32[256,1024] {{
  %a = f32[32,32]{{1,0}} parameter(0)
  %b = f32[32,32]{{1,0}} parameter(1)
  %x = f32[256,1024]{{1,0}} parameter(2)
  %g = f32[256,1024]{{1,0}} parameter(3)
  %kron = f32[32,32,32,32]{{3,2,1,0}} fusion(%a, %b), kind=kLoop, calls=%fused_kron
  %layer = f32[256,1024]{{1,0}} fusion(%x, %kron), kind=kOutput, calls=%fused_layer
  %kron_grad = f32[1024,1024]{{1,0}} dot(%x, %g), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  ROOT %out = f32[256,1024]{{1,0}} add(%layer, %g)
}}
"""


@pytest.mark.parametrize(("module", "factors"), [
    (_kron_layer(), (32, 32, 32, 32)),
    (_kron_layer(("{0,1}", "{2,3}")), ()),
], ids=["interleaved_broadcasts_a_kronecker_product", "an_outer_product_of_matrices"])
def test_a_matmul_by_a_kronecker_product_is_found_only_where_its_factors_interleave(module, factors):
    works = {w.instruction: w.kronecker_factors for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", module)])}
    assert [works[name] for name in ("layer", "kron", "kron_grad", "out")] == [factors, factors, factors, ()]


def test_a_kronecker_product_made_in_full_is_a_compute_finding_that_says_to_apply_the_factors_in_turn():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", busy=0.9,
                 top_ops=[_op("layer", 0.45), _op("kron_grad", 0.45), _op("kron", 0.05), _op("out", 0.05)])
    analysis = _analysis(host, modules=[("jit_step(3)", _kron_layer())])
    (finding,) = [f for f in analysis.findings if "Kronecker" in f.title]
    assert finding.title.startswith("A Kronecker product made in full and multiplied: [32,32] (x) [32,32] as a "
                                    "[1024,1024] matrix")
    assert finding.priority is Priority.P0 and "jnp.einsum('npr,pq,rs->nqs'" in finding.fix
    (kron,) = analysis.kronecker_products
    assert kron.factors == [[32, 32], [32, 32]] and kron.kernels == ["layer", "kron_grad", "kron"]
    # At the rate the kernels achieved, the factors in turn take 1/32 + 1/32 of their FLOPs' time.
    assert kron.factored_ms_per_step == pytest.approx(kron.ms_per_step / 16)
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


# --- matmul results computed in full and mostly masked ---------------------------------------------

def _banded_scores(mask: str) -> str:
    """Scores q @ k.T over 256 tokens, ``mask`` (instructions ending in %keep.m, a pred[256,256]) selecting them
    against -1e9 in one fusion, and their exponential read by a second."""
    return f"""HloModule jit_step

%fused_mask (param_0.m: f32[256,256], param_1.m: pred[256,256]) -> f32[256,256] {{
  %param_0.m = f32[256,256]{{1,0}} parameter(0)
  %param_1.m = pred[256,256]{{1,0}} parameter(1)
  %rows.m = s32[256,256]{{1,0}} iota(), iota_dimension=0
  %columns.m = s32[256,256]{{1,0}} iota(), iota_dimension=1
{mask}
  %low.m = f32[] constant(-1e+09)
  %lows.m = f32[256,256]{{1,0}} broadcast(%low.m), dimensions={{}}
  ROOT %masked.m = f32[256,256]{{1,0}} select(%keep.m, %param_0.m, %lows.m)
}}

%fused_exp (param_0.e: f32[256,256]) -> f32[256,256] {{
  %param_0.e = f32[256,256]{{1,0}} parameter(0)
  ROOT %exp.e = f32[256,256]{{1,0}} exponential(%param_0.e)
}}

ENTRY %main (q: f32[256,64], k: f32[256,64], data: pred[256,256]) -> f32[256,256] {{
  %q = f32[256,64]{{1,0}} parameter(0)
  %k = f32[256,64]{{1,0}} parameter(1)
  %data = pred[256,256]{{1,0}} parameter(2)
  %scores = f32[256,256]{{1,0}} dot(%q, %k), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  %masked = f32[256,256]{{1,0}} fusion(%scores, %data), kind=kLoop, calls=%fused_mask
  ROOT %weights = f32[256,256]{{1,0}} fusion(%masked), kind=kLoop, calls=%fused_exp
}}
"""


BAND = """  %causal.m = pred[256,256]{1,0} compare(%columns.m, %rows.m), direction=LE
  %window.m = s32[] constant(-16)
  %windows.m = s32[256,256]{1,0} broadcast(%window.m), dimensions={}
  %start.m = s32[256,256]{1,0} add(%rows.m, %windows.m)
  %recent.m = pred[256,256]{1,0} compare(%columns.m, %start.m), direction=GT
  %keep.m = pred[256,256]{1,0} and(%causal.m, %recent.m)"""
CAUSAL = """  %keep.m = pred[256,256]{1,0} compare(%columns.m, %rows.m), direction=LE"""
FROM_DATA = """  %keep.m = pred[256,256]{1,0} and(%param_1.m, %param_1.m)"""
DIAGONAL = """  %keep.m = pred[256,256]{1,0} compare(%columns.m, %rows.m), direction=EQ"""
# Blocks of 32 along the diagonal, (i // 32) == (j // 32): by a division, and as XLA lowers a floor division of
# positions by a power of two (a shift, with a select for negative values that positions never take).
BLOCKS = """  %size.m = s32[] constant(32)
  %sizes.m = s32[256,256]{1,0} broadcast(%size.m), dimensions={}
  %row_block.m = s32[256,256]{1,0} divide(%rows.m, %sizes.m)
  %column_block.m = s32[256,256]{1,0} divide(%columns.m, %sizes.m)
  %keep.m = pred[256,256]{1,0} compare(%row_block.m, %column_block.m), direction=EQ"""
BLOCKS_BY_SHIFTS = """  %five.m = s32[] constant(5)
  %fives.m = s32[256,256]{1,0} broadcast(%five.m), dimensions={}
  %zero.m = s32[] constant(0)
  %zeros.m = s32[256,256]{1,0} broadcast(%zero.m), dimensions={}
  %negative.m = pred[256,256]{1,0} compare(%rows.m, %zeros.m), direction=LT
  %shifted.m = s32[256,256]{1,0} shift-right-logical(%rows.m, %fives.m)
  %lowered.m = s32[256,256]{1,0} negate(%shifted.m)
  %row_block.m = s32[256,256]{1,0} select(%negative.m, %lowered.m, %shifted.m)
  %column_block.m = s32[256,256]{1,0} shift-right-logical(%columns.m, %fives.m)
  %keep.m = pred[256,256]{1,0} compare(%row_block.m, %column_block.m), direction=EQ"""


def test_a_mask_of_positions_made_once_and_copied_to_the_kernel_that_masks_is_still_measured():
    # XLA makes a mask two layers share once and copies it asynchronously (another memory space) to each.
    module = _banded_scores(FROM_DATA).replace("ENTRY %main", """%fused_band () -> pred[256,256] {
  %rows.b = s32[256,256]{1,0} iota(), iota_dimension=0
  %columns.b = s32[256,256]{1,0} iota(), iota_dimension=1
""" + BAND.replace(".m", ".b") + """
  ROOT %band.b = pred[256,256]{1,0} copy(%keep.b)
}

ENTRY %main""").replace("  %masked = f32[256,256]{1,0} fusion(%scores, %data)", """  %band = pred[256,256]{1,0} fusion(), kind=kLoop, calls=%fused_band
  %band_start = (pred[256,256]{1,0}, pred[256,256]{1,0}, u32[]) copy-start(%band)
  %band_done = pred[256,256]{1,0} copy-done(%band_start)
  %masked = f32[256,256]{1,0} fusion(%scores, %band_done)""")
    works = {w.instruction: w.masked_per_kept for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", module)])}
    assert works["scores"] == works["masked"] == 16


def test_a_band_applied_by_multiplying_a_float_mask_made_in_another_kernel_is_measured_too():
    # scores * band + (1 - band) * -1e9: the band and its complement made by one kernel, the first multiplied in.
    module = _banded_scores(FROM_DATA).replace("ENTRY %main", """%fused_band (unused.b: f32[]) -> (f32[256,256], f32[256,256]) {
  %rows.b = s32[256,256]{1,0} iota(), iota_dimension=0
  %columns.b = s32[256,256]{1,0} iota(), iota_dimension=1
""" + BAND.replace(".m", ".b") + """
  %ones.b = f32[256,256]{1,0} convert(%keep.b)
  %drop.b = pred[256,256]{1,0} not(%keep.b)
  %zeros.b = f32[256,256]{1,0} convert(%drop.b)
  ROOT %both.b = (f32[256,256]{1,0}, f32[256,256]{1,0}) tuple(%ones.b, %zeros.b)
}

%fused_multiplied (param_0.p: f32[256,256], param_1.p: f32[256,256]) -> f32[256,256] {
  %param_0.p = f32[256,256]{1,0} parameter(0)
  %param_1.p = f32[256,256]{1,0} parameter(1)
  ROOT %kept.p = f32[256,256]{1,0} multiply(%param_0.p, %param_1.p)
}

ENTRY %main""").replace("  %masked = f32[256,256]{1,0} fusion(%scores, %data), kind=kLoop, calls=%fused_mask", """  %nothing = f32[] constant(0)
  %bands = (f32[256,256]{1,0}, f32[256,256]{1,0}) fusion(%nothing), kind=kLoop, calls=%fused_band
  %band = f32[256,256]{1,0} get-tuple-element(%bands), index=0
  %masked = f32[256,256]{1,0} fusion(%scores, %band), kind=kLoop, calls=%fused_multiplied""")
    works = {w.instruction: w.masked_per_kept for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", module)])}
    assert works["scores"] == works["masked"] == 16


@pytest.mark.parametrize(("mask", "per_kept"), [(BAND, 16), (CAUSAL, 0), (FROM_DATA, 0), (DIAGONAL, 0),
                                                (BLOCKS, 8), (BLOCKS_BY_SHIFTS, 8)],
                         ids=["a_band_of_16", "causal", "a_mask_from_data", "a_diagonal", "diagonal_blocks",
                              "diagonal_blocks_by_shifts"])
def test_a_matmul_result_is_mostly_masked_only_by_a_mask_of_positions_that_keeps_little(mask, per_kept):
    works = {w.instruction: w.masked_per_kept
             for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", _banded_scores(mask))])}
    assert [works[name] for name in ("scores", "masked", "weights")] == [per_kept] * 3


def test_mostly_masked_results_are_a_compute_finding_that_says_to_compute_the_band_in_blocks():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", busy=0.9,
                 top_ops=[_op("scores", 0.5), _op("masked", 0.2), _op("weights", 0.3)])
    analysis = _analysis(host, modules=[("jit_step(3)", _banded_scores(BAND))])
    (finding,) = [f for f in analysis.findings if "mostly masked" in f.title]
    # (0.5 + 0.2 + 0.3) of device time x (1 - 2/16) x 0.9 busy
    assert finding.title == ("Matmul results computed in full and mostly masked (one element in 16 kept): computing "
                             "only the kept blocks saves about 79% of the loop")
    assert finding.priority is Priority.P0 and "local_window_size" in finding.fix
    assert "conv_general_dilated" in finding.fix  # a banded matrix made from a filter is a convolution
    (masked,) = analysis.masked_results
    assert masked.kept_one_in == 16 and masked.share_of_loop_saved == pytest.approx(0.9 * (1 - 2 / 16))
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


# --- a Jacobian built in full ---------------------------------------------------------------------

def _jacobian_by_identity(seed: str = "compare(%rows.e, %cols.e), direction=EQ", n: int = 128) -> str:
    """jax.jacrev of x @ w for a batch of 16: an [n,n] matrix made from positions by ``seed`` (the identity where
    rows == cols) multiplied by w.T, each example's Jacobian scaled, contracted with v, and an unrelated kernel."""
    return f"""HloModule jit_step

%fused_seed () -> f32[{n},{n}] {{
  %rows.e = s32[{n},{n}]{{1,0}} iota(), iota_dimension=0
  %cols.e = s32[{n},{n}]{{1,0}} iota(), iota_dimension=1
  %eq.e = pred[{n},{n}]{{1,0}} {seed}
  ROOT %convert.e = f32[{n},{n}]{{1,0}} convert(%eq.e)
}}

%fused_scale (param_0.s: f32[{n},256], param_1.s: f32[16,256]) -> f32[16,{n},256] {{
  %param_0.s = f32[{n},256]{{1,0}} parameter(0)
  %param_1.s = f32[16,256]{{1,0}} parameter(1)
  %rows.s = f32[16,{n},256]{{2,1,0}} broadcast(%param_0.s), dimensions={{1,2}}
  %scales.s = f32[16,{n},256]{{2,1,0}} broadcast(%param_1.s), dimensions={{0,2}}
  ROOT %product.s = f32[16,{n},256]{{2,1,0}} multiply(%rows.s, %scales.s)
}}

ENTRY %main (w: f32[256,{n}], d: f32[16,256], v: f32[16,{n}], x: f32[16,256]) -> (f32[16,1,256], f32[16,256]) {{
  %w = f32[256,{n}]{{1,0}} parameter(0)
  %d = f32[16,256]{{1,0}} parameter(1)
  %v = f32[16,{n}]{{1,0}} parameter(2)
  %x = f32[16,256]{{1,0}} parameter(3)
  %seed = f32[{n},{n}]{{1,0}} fusion(), kind=kLoop, calls=%fused_seed
  %pulled = f32[{n},256]{{1,0}} dot(%seed, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  %jacobians = f32[16,{n},256]{{2,1,0}} fusion(%pulled, %d), kind=kLoop, calls=%fused_scale
  %vjp = f32[16,1,256]{{2,1,0}} dot(%v, %jacobians), lhs_batch_dims={{0}}, lhs_contracting_dims={{1}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
  %other = f32[16,256]{{1,0}} multiply(%x, %d)
  ROOT %out = (f32[16,1,256]{{2,1,0}}, f32[16,256]{{1,0}}) tuple(%vjp, %other)
}}
"""


@pytest.mark.parametrize(("module", "basis"), [
    (_jacobian_by_identity(), 128),
    (_jacobian_by_identity("compare(%rows.e, %cols.e), direction=GE"), 0),
    (_jacobian_by_identity("compare(%cols.e, %rows.e), direction=NE"), 0),
    (_jacobian_by_identity(n=32), 0),
], ids=["an_identity_seeds_a_jacobian", "a_triangle_is_no_identity", "its_complement_is_none", "a_small_identity"])
def test_a_matmul_by_an_identity_made_from_positions_and_all_it_feeds_are_a_jacobian_built_in_full(module, basis):
    works = {w.instruction: w.jacobian_basis for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", module)])}
    assert [works[name] for name in ("pulled", "jacobians", "vjp", "other", "seed")] == [basis, basis, basis, 0, 0]


# The Hessian of a Newton step read by its conjugate-gradient loop: %pulled's result is the loop's state.
_HESSIAN_IN_A_LOOP = _jacobian_by_identity().replace("ENTRY %main", """%cg_body (state.b: (f32[128,256], s32[])) -> (f32[128,256], s32[]) {
  %state.b = (f32[128,256]{1,0}, s32[]) parameter(0)
  ROOT %same.b = (f32[128,256]{1,0}, s32[]) copy(%state.b)
}

%cg_condition (state.c: (f32[128,256], s32[])) -> pred[] {
  %state.c = (f32[128,256]{1,0}, s32[]) parameter(0)
  ROOT %more.c = pred[] constant(true)
}

ENTRY %main""").replace("  %other = ", """  %zero = s32[] constant(0)
  %start = (f32[128,256]{1,0}, s32[]) tuple(%pulled, %zero)
  %cg = (f32[128,256]{1,0}, s32[]) while(%start), condition=%cg_condition, body=%cg_body
  %other = """)


def test_a_jacobian_a_loop_reads_is_reused_there_and_not_counted():
    works = {w.instruction: w.jacobian_basis
             for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", _HESSIAN_IN_A_LOOP)])}
    assert [works[name] for name in ("pulled", "jacobians", "vjp", "cg")] == [0, 0, 0, 0]


def test_a_jacobian_built_in_full_is_a_compute_finding_that_says_to_use_vjp_or_jvp():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", busy=0.9,
                 top_ops=[_op("jacobians", 0.5), _op("vjp", 0.3), _op("pulled", 0.1), _op("other", 0.1)])
    analysis = _analysis(host, modules=[("jit_step(3)", _jacobian_by_identity())])
    (finding,) = [f for f in analysis.findings if "Jacobian" in f.title]
    assert finding.title.startswith("A Jacobian built in full: derivatives seeded by a 128 by 128 identity")
    assert finding.priority is Priority.P0 and "jax.vjp(f, x)[1](v)" in finding.fix
    (jacobian,) = analysis.full_jacobians
    assert jacobian.basis == 128 and jacobian.kernels == ["jacobians", "vjp", "pulled"]
    # 0.9 of the device time of a loop busy 0.9, all but 1/128 of it.
    assert jacobian.share_of_loop_saved == pytest.approx(0.9 * 0.9 * (1 - 1 / 128))
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""


# --- work multiplied by zero ----------------------------------------------------------------------

def _auxiliary_head(weight: str = "0") -> str:
    """A main loss and an auxiliary head's: the head's forward (%head), its loss multiplied by ``weight`` in the
    kernel that sums the two (%total), and its backward: the loss's gradient times the weight (%scaled) through the
    head's matmul (%head_grad) into a parameter update (%update)."""
    return f"""HloModule jit_step

%fused_total (param_0.t: f32[], param_1.t: f32[]) -> f32[] {{
  %param_0.t = f32[] parameter(0)
  %param_1.t = f32[] parameter(1)
  %weight.t = f32[] constant({weight})
  %weighted.t = f32[] multiply(%param_1.t, %weight.t)
  ROOT %sum.t = f32[] add(%param_0.t, %weighted.t)
}}

%fused_scaled (param_0.s: f32[256,128]) -> f32[256,128] {{
  %param_0.s = f32[256,128]{{1,0}} parameter(0)
  %weight.s = f32[] constant({weight})
  %weights.s = f32[256,128]{{1,0}} broadcast(%weight.s), dimensions={{}}
  ROOT %scaled.s = f32[256,128]{{1,0}} multiply(%param_0.s, %weights.s)
}}

%fused_update (param_0.u: f32[128,128], param_1.u: f32[256,128], param_2.u: f32[256,128]) -> f32[128,128] {{
  %param_0.u = f32[128,128]{{1,0}} parameter(0)
  %param_1.u = f32[256,128]{{1,0}} parameter(1)
  %param_2.u = f32[256,128]{{1,0}} parameter(2)
  %grad.u = f32[128,128]{{1,0}} dot(%param_1.u, %param_2.u), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  ROOT %new.u = f32[128,128]{{1,0}} subtract(%param_0.u, %grad.u)
}}

ENTRY %main (x: f32[256,128], w: f32[128,128], a: f32[128,128], main_loss: f32[]) -> (f32[], f32[128,128], f32[256,128]) {{
  %x = f32[256,128]{{1,0}} parameter(0)
  %w = f32[128,128]{{1,0}} parameter(1)
  %a = f32[128,128]{{1,0}} parameter(2)
  %main_loss = f32[] parameter(3)
  %head = f32[256,128]{{1,0}} dot(%x, %a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %zero = f32[] constant(0)
  %head_loss = f32[] reduce(%head, %zero), dimensions={{0,1}}, to_apply=%fused_total
  %total = f32[] fusion(%main_loss, %head_loss), kind=kLoop, calls=%fused_total
  %scaled = f32[256,128]{{1,0}} fusion(%head), kind=kLoop, calls=%fused_scaled
  %head_grad = f32[256,128]{{1,0}} dot(%scaled, %a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  %update = f32[128,128]{{1,0}} fusion(%a, %x, %head_grad), kind=kOutput, calls=%fused_update
  %trunk = f32[256,128]{{1,0}} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %callback = () custom-call(%head), custom_call_target="xla_python_cpu_callback", custom_call_has_side_effect=true
  ROOT %out = (f32[], f32[128,128]{{1,0}}, f32[256,128]{{1,0}}) tuple(%total, %update, %trunk)
}}
"""


@pytest.mark.parametrize(("weight", "zeroed"), [
    ("0", {"head": 1.0, "head_loss": 1.0, "scaled": 1.0, "head_grad": 1.0, "update": 1.0}),
    ("0.5", {}),
], ids=["weighted_zero", "weighted_a_half"])
def test_what_only_feeds_a_product_with_a_constant_zero_and_the_matmuls_of_zeros_are_zeroed_work(weight, zeroed):
    works = {w.instruction: w.zeroed_share
             for w in hlo.kernel_work([hlo.parse_module("jit_step(3)", _auxiliary_head(weight))])}
    assert {name: share for name, share in works.items() if share} == zeroed
    assert works["total"] == works["trunk"] == 0  # the sum and the unrelated matmul hold values
    assert works["callback"] == 0  # nothing reads it: it runs for its effect


def test_work_multiplied_by_zero_is_a_compute_finding_that_says_to_leave_the_term_out():
    host = _host(kind=DeviceKind.CPU, device_type="CPU", busy=0.9,
                 top_ops=[_op("head", 0.3), _op("head_grad", 0.3), _op("update", 0.2), _op("total", 0.2)])
    analysis = _analysis(host, modules=[("jit_step(3)", _auxiliary_head())])
    (finding,) = [f for f in analysis.findings if f.title.startswith("Work multiplied by zero")]
    assert finding.priority is Priority.P0 and "jax.lax.cond" in finding.fix
    (zeroed,) = analysis.zeroed_work
    assert zeroed.kernels == ["head", "head_grad", "update"]
    assert zeroed.share_of_loop_saved == pytest.approx(0.8 * 0.9)
    assert why_unsupported(finding, EvidenceIndex(analysis)) == ""
