"""What to change when one kernel holds most of the busy devices' time, from what its HLO computes.

A device busy at a small share of the roofline is a fault of the ops it runs, and
some ops have a cheaper way to the same result that no fusion or tiling finds: a
full sort where only the top of each row is used. An op whose time is the model's
own work (an embedding's gather and scatter) has no entry. The kernel's HLO
(:func:`mldiag.analysis.xprof.hlo.describe`) says which op it is; the fix names
that op's alternatives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mldiag.analysis.evidence import KernelShare

DOMINANT = 0.5  # share of a host's device op time at which one kernel's op decides the fix


@dataclass(frozen=True)
class KernelFix:
    op: str  # the op in the title's words
    fix: str


_FIXES = (
    (re.compile(r"\bsort\b"), KernelFix(
        "a sort",
        "A sort holds the device time. Where only the largest (or smallest) values of each row are used, take "
        "them without sorting: jax.lax.top_k, or jax.lax.approx_max_k / approx_min_k on a TPU (tf.math.top_k, "
        "torch.topk); otherwise sort fewer elements (a shorter axis, a cheap filter first) or sort the keys once "
        "outside the loop.")),
)


def dominant(kernels: list[KernelShare]) -> tuple[KernelShare, KernelFix] | None:
    """The kernel that holds at least ``DOMINANT`` of its host's device op time and the fix for its op, where the
    op has one."""
    for kernel in sorted(kernels, key=lambda k: -k.share_of_device):
        if kernel.share_of_device < DOMINANT:
            return None
        found = next((fix for pattern, fix in _FIXES if pattern.search(kernel.what)), None)
        if found is not None:
            return kernel, found
    return None
