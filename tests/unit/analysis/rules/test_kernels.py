"""The fix for one kernel that holds most of the device time, from what its HLO computes."""

from __future__ import annotations

from mldiag.analysis.evidence import KernelShare
from mldiag.analysis.rules import kernels


def _kernel(what: str, share: float, updates_per_element: float = 0.0, runs_per_step: float = 1.0) -> KernelShare:
    return KernelShare(host="h", name="%op.1", share_of_device=share, ms_per_step=1.0, runs_per_step=runs_per_step,
                       what=what, updates_per_element=updates_per_element)


def test_a_sort_that_holds_most_of_the_device_time_gets_top_k_as_its_fix():
    found = kernels.dominant([_kernel("bf16 matmul", 0.03), _kernel("f32 sort", 0.97)])
    assert found is not None
    kernel, fix = found
    assert kernel.what == "f32 sort" and fix.op == "a sort"
    assert "jax.lax.top_k" in fix.fix and "approx_max_k" in fix.fix


def test_an_embedding_s_scatter_is_the_model_s_own_work_with_no_fix_of_its_own():
    assert kernels.dominant([_kernel("bf16 custom-call (custom-call, gather, scatter; root fusion)", 0.56)]) is None


def test_a_scatter_summing_many_rows_into_each_element_gets_a_matmul_or_sorted_segment_sum_fix():
    found = kernels.dominant([_kernel("f32 scatter of 256 updates per element (add, scatter; root fusion)", 0.84,
                                      updates_per_element=256.0)])
    assert found is not None
    _, fix = found
    assert fix.op == "a scatter of many updates per element"
    assert "jax.nn.one_hot" in fix.fix and "indices_are_sorted=True" in fix.fix
    # An embedding's gradient, a quarter of an update per row of its table, is the model's own work.
    assert kernels.dominant([_kernel("f32 scatter (add, scatter; root fusion)", 0.84, updates_per_element=0.25)]) is (
        None)


def test_a_loop_writing_a_buffer_one_slice_at_a_time_is_told_to_write_at_once():
    found = kernels.dominant([_kernel("f32 dynamic-update-slice", 0.52, runs_per_step=32)])
    assert found is not None
    _, fix = found
    assert fix.op == "writes of one slice at a time"
    assert "jax.vmap" in fix.fix and "lax.scan's stacked outputs are written one slice per iteration" in fix.fix
    # One write a step (a KV cache's new position) is the update the loop exists for.
    assert kernels.dominant([_kernel("f32 dynamic-update-slice", 0.52, runs_per_step=1)]) is None


def test_no_fix_of_its_own_for_a_kernel_below_half_the_device_time_or_an_op_without_one():
    assert kernels.dominant([_kernel("f32 sort", 0.4), _kernel("bf16 matmul", 0.6)]) is None
    assert kernels.dominant([_kernel("bf16 matmul", 0.9)]) is None
    assert kernels.dominant([]) is None


def test_an_exact_top_k_that_holds_most_of_the_device_time_gets_approx_max_k_as_its_fix():
    found = kernels.dominant([_kernel('custom call "TopK" returning f32', 0.98)])
    assert found is not None
    _, fix = found
    assert fix.op == "an exact top-k"
    assert "jax.lax.approx_max_k" in fix.fix and "recall_target" in fix.fix
