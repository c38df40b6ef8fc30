"""The device-side paths on real TPU and GPU captures: device lanes, program runs as steps, XProf's device tools."""

from __future__ import annotations

import pytest
from analysis_support import xplane

from mldiag.analysis import analyze_profile
from mldiag.analysis.evidence import ToolStatus
from mldiag.analysis.host_evidence import DeviceKind, StepSource
from mldiag.domain import FindingCategory, HealthStatus, Priority

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs


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


def test_tpus_waiting_on_host_memory_copies_are_a_data_movement_p0_not_compute(analysis_of):
    analysis = analysis_of("tpu_v6e4_inference")
    # copy-done is the TPU waiting for a copy from or to host memory: busy, but not computing.
    assert analysis.health.compute_fraction < 0.1
    assert analysis.status is HealthStatus.NEEDS_ATTENTION and not analysis.health.optimal
    assert not [f for f in analysis.findings if f.category is FindingCategory.COMPUTE]
    top = analysis.findings[0]
    assert top.priority is Priority.P0 and top.category is FindingCategory.DATA_MOVEMENT
    assert top.title == "Host-device memory transfers take 97% of device time"
    assert any(e.startswith('"copy-done.2": 219.89 ms per step') for e in top.evidence)
    assert any("14.99 GiB host to device, 14.35 GiB device to host" in e for e in top.evidence)
    assert "jax.device_put" in top.fix and "tf.data" not in top.fix


def test_gpu_streams_are_the_compute_lanes(analysis_of):
    analysis = analysis_of("mi300x_gemm")
    (host,) = analysis.hosts
    assert host.device_kind is DeviceKind.GPU and host.device_type == "AMD GPU (gfx942)"
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


def test_a_tpus_utilization_viewer_is_left_for_the_viewer_to_convert(monkeypatch):
    """Nothing the report, the analyst or the investigation says reads it, and its conversion reads the whole
    profile again: the analysis does not convert it, and says where it is converted."""
    from xprof.convert import raw_to_tool_data

    convert, converters = raw_to_tool_data.xspace_to_tool_data, []

    def recorded(paths, tool, options):
        converters.append(tool)
        return convert(paths, tool, options)

    monkeypatch.setattr(raw_to_tool_data, "xspace_to_tool_data", recorded)
    analysis = analyze_profile([xplane("tpu_v6e4_inference")])
    (tool,) = [tool for tool in analysis.tools if tool.name == "get_utilization_viewer"]
    assert tool.status is ToolStatus.ON_OPEN and "the XProf viewer converts it" in tool.reason
    assert "utilization_viewer" not in converters and "overview_page" in converters
