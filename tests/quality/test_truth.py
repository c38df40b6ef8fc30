"""The device captures' truth can be measured again from their traces, by the script the expectation files name.

Each case re-derives one ``truth`` number of an expectation file with
``scripts/measure_device_trace.py`` (JAX's trace reader, not the analyser) and
compares it with the number written down, within its tolerance.
"""

from __future__ import annotations

import importlib.util
import re
import statistics
import sys

import pytest
from quality_support import REPO, load_expectations

pytestmark = pytest.mark.quality

EXPECTATIONS = load_expectations()


def _measurer():
    spec = importlib.util.spec_from_file_location("measure_device_trace", REPO / "scripts" / "measure_device_trace.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


MEASURER = _measurer()


def _share(plane, prefix: str) -> float:
    return sum(ns for name, ns in plane.by_name.items() if name.startswith(prefix)) / plane.op_ns


def _largest_share(plane) -> float:
    return plane.by_name.most_common(1)[0][1] / plane.op_ns


def _flop_rate(plane, flops_per_run: float) -> float:
    """The largest kernel's FLOP/s over its op time, given its FLOPs per run (from its program's HLO shapes)."""
    name, ns = plane.by_name.most_common(1)[0]
    return plane.count_by_name[name] * flops_per_run / (ns / 1e9)


def _gpu(planes, name: str):
    (plane,) = [p for p in planes if p.name == name]
    return plane


CASES = {
    ("mi355x_jax08_te_fused_attn", "runs"): lambda planes, runs: len(runs["jit_loss_fn"]),
    ("mi355x_jax08_te_fused_attn", "period_ms"): lambda planes, runs: MEASURER.mean_period_ms(runs["jit_loss_fn"]),
    ("mi355x_jax08_te_fused_attn", "busy_fraction"): lambda planes, runs: (
        planes[0].op_ns / 1e6 / (len(runs["jit_loss_fn"]) * MEASURER.mean_period_ms(runs["jit_loss_fn"]))),
    ("mi355x_jax08_te_fused_attn", "te_share"): lambda planes, runs: planes[0].groups["TE"],
    ("mi355x_jax08_te_fused_attn", "fmha_bwd_share"): lambda planes, runs: _largest_share(planes[0]),
    ("gpu_v100x8_tf_bert_multiworker", "busy_fraction"): lambda planes, runs: statistics.mean(
        busy for plane in planes for _, busy in plane.steps),
    ("gpu_v100x8_tf_bert_multiworker", "step_ms"): lambda planes, runs: statistics.mean(
        ms for plane in planes for ms, _ in plane.steps),
    ("gpu_v100x8_tf_bert_multiworker", "device_memory_bytes"): lambda planes, runs: _gpu(
        planes, "/device:GPU:4").stats["memory_size"],
    ("mi300x_jax08_elementwise", "convert_share"): lambda planes, runs: _share(planes[0], "loop_convert_fusion"),
    ("mi300x_jax08_conv3d", "devices"): lambda planes, runs: len(planes),
    ("mi300x_jax08_conv3d", "runs_per_device"): lambda planes, runs: len(runs["jit_forward_3d_conv"]) / len(planes),
    ("mi300x_jax08_conv3d", "transpose_share"): lambda planes, runs: statistics.median(
        _share(plane, "input_transpose_fusion.kd") for plane in planes),
    ("mi300x_jax06_conv3d_legacy", "runs"): lambda planes, runs: _gpu(
        planes, "/device:GPU:7").count_by_name["input_transpose_fusion"],
    ("mi300x_jax06_conv3d_legacy", "transpose_share"): lambda planes, runs: _gpu(
        planes, "/device:GPU:7").by_name["input_transpose_fusion"] / _gpu(planes, "/device:GPU:7").op_ns,
    ("mi300x_jax08_attention", "idle_fraction"): lambda planes, runs: 1 - planes[0].busy,
    ("mi300x_gemm", "gemm_share"): lambda planes, runs: planes[0].groups["gemm"],
    ("mi300x_gemm", "top_kernel_share"): lambda planes, runs: _largest_share(planes[0]),
    ("mi300x_gemm", "largest_gemm_flop_rate"): lambda planes, runs: _flop_rate(planes[0], 2 * 8192 * 8192 * 4096),
    ("tpu_v6e4_inference", "runs"): lambda planes, runs: max(map(len, runs.values())),
    ("tpu_v6e4_inference", "period_ms"): lambda planes, runs: MEASURER.mean_period_ms(max(runs.values(), key=len)),
    ("tpu_v6e4_inference", "copy_share"): lambda planes, runs: statistics.mean(plane.groups["copies"] for plane in planes),
}
GROUPS = {"TE": re.compile(r"ck_tile|[Ff]mha|te_"), "gemm": re.compile("Cijk_"),
          "copies": re.compile(r"^%copy-(start|done)")}


@pytest.fixture(scope="module")
def measured():
    cache = {}

    def measure(fixture: str):
        if fixture not in cache:
            cache[fixture] = MEASURER.measure(str(REPO / EXPECTATIONS[fixture]["source"]), GROUPS)
        return cache[fixture]

    return measure


@pytest.mark.parametrize(("fixture", "key"), sorted(CASES), ids=[f"{f}::{k}" for f, k in sorted(CASES)])
def test_device_truth_measures_again_from_the_trace(fixture: str, key: str, measured) -> None:
    truth = EXPECTATIONS[fixture]["truth"][key]
    value = CASES[fixture, key](*measured(fixture))
    allowed = max(truth.get("abs", 0.0), truth.get("rel", 0.0) * abs(truth["value"]))
    assert abs(value - truth["value"]) <= allowed + 1e-9, f"measured {value:.6g}, written {truth['value']}"


def test_every_device_truth_is_measured_again() -> None:
    device = {f for f, d in EXPECTATIONS.items() if "/third_party/" in d["source"]}
    written = {(f, key) for f in device for key, number in EXPECTATIONS[f]["truth"].items()
               if number["how"].startswith("by hand from the trace")}
    assert written <= set(CASES), f"not measured again: {sorted(written - set(CASES))}"
