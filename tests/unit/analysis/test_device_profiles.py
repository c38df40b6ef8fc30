"""The device-side paths on real TPU and GPU captures: device lanes, program runs as steps, XProf's device tools."""

from __future__ import annotations

import pytest

from mldiag.analysis.evidence import ToolStatus
from mldiag.analysis.host_evidence import DeviceKind, StepSource
from mldiag.domain import FindingCategory, HealthStatus, Priority


def _status(analysis, tool):
    return next(t.status for t in analysis.tools if t.name == tool)


def test_tpu_runs_of_the_dominant_program_are_the_steps(analysis_of):
    analysis = analysis_of("tpu_v6e4_inference")
    (host,) = analysis.hosts
    assert host.device_kind is DeviceKind.TPU and host.device_type == "TPU v6 Lite" and host.devices == 4
    assert host.step_source is StepSource.PROGRAM_RUNS and host.step_marker.startswith("jit_f(")
    assert analysis.metrics.steps == 100
    assert analysis.metrics.step_time_ms == pytest.approx(784, rel=0.05)
    assert host.top_ops[0].name.startswith("copy-done")
    assert host.top_ops[0].expression.startswith("%copy-done")


def test_tpu_device_tools_carry_data_and_feed_the_metrics(analysis_of):
    analysis = analysis_of("tpu_v6e4_inference")
    for tool in ("get_roofline_model", "get_hlo_op_profile", "get_memory_profile", "get_device_information"):
        assert _status(analysis, tool) is ToolStatus.OK, tool
    assert analysis.metrics.roofline_efficiency == pytest.approx(0.0435, abs=0.001)
    assert analysis.metrics.peak_memory_bytes == pytest.approx(20.02 * 2**30, rel=0.01)
    assert analysis.metrics.memory_capacity_bytes == pytest.approx(31.25 * 2**30, rel=0.01)
    assert analysis.metrics.peak_memory_source.startswith("memory_profile")


def test_busy_tpus_far_from_the_roofline_need_attention(analysis_of):
    analysis = analysis_of("tpu_v6e4_inference")
    assert analysis.health.compute_fraction > 0.9
    assert analysis.status is HealthStatus.NEEDS_ATTENTION
    (compute,) = [f for f in analysis.findings if f.category is FindingCategory.COMPUTE]
    assert compute.priority is Priority.P1
    assert any('bound by "HBM"' in e for e in compute.evidence)


def test_gpu_streams_are_the_compute_lanes(analysis_of):
    analysis = analysis_of("mi300x_gemm")
    (host,) = analysis.hosts
    assert host.device_kind is DeviceKind.GPU and host.device_type.startswith("AMD GPU")
    assert host.compute_lanes and all("/device:GPU:0/Stream #" in lane for lane in host.compute_lanes)
    # Three programs called alike (18 dots of several sizes, 12 broadcasts, 12 converts): a benchmark, not steps.
    assert host.step_source is StepSource.PROFILE_WINDOW and analysis.metrics.steps == 0
    assert host.launches == 42
    assert {(p.name, p.calls) for p in host.programs} == {
        ("PjitFunction(dot)", 18), ("PjitFunction(broadcast_in_dim)", 12), ("PjitFunction(convert_element_type)", 12)}
    assert 0 < analysis.metrics.busy_fraction < 0.5
    assert _status(analysis, "get_hlo_op_profile") is ToolStatus.OK
    (kernel,) = [f for f in analysis.findings if f.category is FindingCategory.KERNEL]
    assert "custom_call_share_pct 34.04" in kernel.evidence[0]
