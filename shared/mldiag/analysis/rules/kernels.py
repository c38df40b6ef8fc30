"""What to change when one kernel holds most of the busy devices' time, from what its HLO computes.

A device busy at a small share of the roofline is a fault of the ops it runs, and
some ops have a cheaper way to the same result that no fusion or tiling finds: a
full sort where only the top of each row is used; an exact top-k where an
approximate one serves (a TPU's approx_max_k took 0.98 less of a retrieval loop's
time than top_k over a million scores a query); a scatter-add of many updates
into each element (rows summed into a few segments), which the device applies one
after another where a matmul would sum them at the chip's rate; a loop that writes
a buffer one slice at a time, where one vectorised write would do. An op whose time
is the model's own work (an embedding's gather, and its gradient's scatter of
about one update per row) has no entry. The kernel's HLO
(:func:`mldiag.analysis.xprof.hlo.describe`) says which op it is; the fix names
that op's alternatives.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from mldiag.analysis.evidence import KernelShare
from mldiag.analysis.host_evidence import DeviceKind

DOMINANT = 0.5  # share of a host's device op time at which one kernel's op decides the fix
COLLIDING_UPDATES = 8.0  # a scatter's updates per element from which they queue behind each other
SLICE_WRITES = 8  # runs a step of one slice-writing kernel that tell a loop of writes, not a cache's one update
# The classes of a one-hot matrix from which a matmul by it costs more than the gather (or scatter-add) it stands
# for. A TPU's matrix unit runs a one-hot matmul of a few thousand classes faster than its gathers and scatters
# (the scatter's fix recommends it up to that); a CPU's gather costs far less than a matmul of 2,048 classes (a
# jnp.take saves 0.40 of a CPU loop whose lookup is one), and a GPU's is no slower.
ONE_HOT_CLASSES = {DeviceKind.TPU: 4096}
ONE_HOT_CLASSES_ELSEWHERE = 512


def wide_one_hot(device: DeviceKind, classes: int) -> bool:
    """Whether a matmul by a one-hot matrix of ``classes`` costs more on ``device`` than the gather it stands for."""
    return classes >= ONE_HOT_CLASSES.get(device, ONE_HOT_CLASSES_ELSEWHERE)


@dataclass(frozen=True)
class KernelFix:
    op: str  # the op in the title's words
    fix: str
    applies: Callable[[KernelShare], bool] = lambda kernel: True


_FIXES = (
    (re.compile(r"\bsort\b"), KernelFix(
        "a sort",
        "A sort holds the device time. Where only the largest (or smallest) values of each row are used, take "
        "them without sorting: jax.lax.top_k, or jax.lax.approx_max_k / approx_min_k on a TPU (tf.math.top_k, "
        "torch.topk); otherwise sort fewer elements (a shorter axis, a cheap filter first) or sort the keys once "
        "outside the loop.")),
    (re.compile(r'"TopK"'), KernelFix(
        "an exact top-k",
        "An exact top-k (jax.lax.top_k, tf.math.top_k, torch.topk) holds the device time: it selects each row's "
        "largest values by sorting its candidates. Where an approximate answer serves (retrieval, nearest "
        "neighbours, sampling), take them with jax.lax.approx_max_k / approx_min_k and a recall_target (0.95 by "
        "default), which a TPU runs at close to the speed of reading the scores; otherwise select from fewer "
        "candidates: a cheaper first-stage score, or the top k of each block of a row, then the top k of those.")),
    (re.compile(r"\bscatter\b"), KernelFix(
        "a scatter of many updates per element",
        "A scatter-add that sums many rows into each element of a small result (segment sums, pooling by id, a "
        "histogram) applies the updates to one element one after another. Where the segments are few (up to a "
        "few thousand), sum with a matmul the chip runs at its full rate: jax.nn.one_hot(ids, segments, "
        "dtype=values.dtype).T @ values; otherwise sort the ids once and call jax.ops.segment_sum(values, ids, "
        "segments, indices_are_sorted=True) (torch: index_add_ on sorted ids, or a one-hot matmul).",
        applies=lambda kernel: kernel.updates_per_element >= COLLIDING_UPDATES)),
    (re.compile(r"\bdynamic-update-slice\b"), KernelFix(
        "writes of one slice at a time",
        "The device spends its time writing one slice at a time into a larger buffer, in a loop (the body of a "
        "fori_loop or scan writing with dynamic_update_slice or x.at[i].set): each write is a kernel of its own, "
        "and on a TPU a slice thinner than the buffer's tiles (8 rows of f32, 16 of bf16) rewrites whole tiles. "
        "Where the slices are all known in the step, compute them together, not in a loop: one vectorised op over "
        "all of them (jax.vmap of the loop's body, or the body written over the whole array), whose result is "
        "written at once; a lax.scan's stacked outputs are written one slice per iteration too.",
        applies=lambda kernel: kernel.runs_per_step >= SLICE_WRITES)),
)


def dominant(kernels: list[KernelShare]) -> tuple[KernelShare, KernelFix] | None:
    """The kernel that holds at least ``DOMINANT`` of its host's device op time and the fix for its op, where the
    op has one."""
    for kernel in sorted(kernels, key=lambda k: -k.share_of_device):
        if kernel.share_of_device < DOMINANT:
            return None
        found = next((fix for pattern, fix in _FIXES if pattern.search(kernel.what) and fix.applies(kernel)), None)
        if found is not None:
            return kernel, found
    return None
