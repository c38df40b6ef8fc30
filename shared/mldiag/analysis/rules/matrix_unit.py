"""Batched matmuls narrower than a TPU's matrix unit: attention heads of 64 on a 128-wide unit.

A TPU multiplies matrices in a systolic array (128 x 128 through v5p, 256 x 256
from Trillium). A matmul narrower than the array in its rows, its contracted
size or its columns leaves the rest of it idle; attention splits the model's
width into heads, and each head's matmuls (queries by keys, weights by values)
are as narrow as the head. Fewer, wider heads keep the parameters and FLOPs,
fill the array, and shrink the score matrices (batch x heads x queries x keys)
that the softmax and its gradient read and write, in proportion: measured on a
TPU v5e, training steps of attention over 2,048 and 4,096 tokens took 0.36-0.45
less time with heads of 128 than of 64, and a fused attention kernel (Pallas's
flash attention) at heads of 64 took no less.

The kernels counted are the batched matmuls narrower than the unit and every
kernel that reads or writes an array of their score matrices' size, matched to
the ops the trace timed; what wider heads would save is their time times
``1 - width / unit``, the share of it that scales with the number of heads.
"""

from __future__ import annotations

from mldiag.analysis.evidence import NarrowMatmuls
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.hardware import Chip
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import matched_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

# Share of the loop that wider heads would save at which the narrow ones are a P1 / P2 problem: a change of the
# model's shape, never a P0 on its own.
PRIORITIES = ((0.25, Priority.P1), (0.10, Priority.P2))
# Below this a batched matmul is a vector's product (a decode step's single query), bound by memory, not the unit.
NARROWEST = 16
MAX_KERNELS_QUOTED = 3


def _narrow(host: HostEvidence, works: list[KernelWork], unit: int) -> tuple[int, list[tuple[OpTime, KernelWork]]]:
    """The narrowest batched-matmul width under ``unit`` on the host, and its timed kernels that run such matmuls
    or read or write their score matrices; (0, []) where none is narrower."""
    timed = matched_kernels(host, works)
    narrow = [(op, work) for op, work in timed if NARROWEST <= work.matmul_width < unit]
    if not narrow:
        return 0, []
    width = min(work.matmul_width for _, work in narrow)
    scores = min(work.largest_elements for _, work in narrow)
    return width, [(op, work) for op, work in timed
                   if NARROWEST <= work.matmul_width < unit or work.largest_elements == scores]


def narrow_matmuls(hosts: list[HostEvidence], works: list[KernelWork],
                   chip: Chip | None) -> tuple[NarrowMatmuls, Finding] | None:
    """Batched matmuls narrower than the chip's matrix unit, on the host where wider ones would save the most: the
    time they take and their finding."""
    unit = chip.matrix_unit if chip is not None else 0
    if not unit:
        return None
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, int]:
        width, kernels = _narrow(host, works, unit)
        return kernels, sum(op.share_of_busy for op, _ in kernels) * (1 - width / unit) * host.loop_busy(), width

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, width = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    share, ms = group.share_of_device, group.ms_per_step
    narrow = NarrowMatmuls(host=host.host, width=width, matrix_unit=unit, fill=width / unit, ms_per_step=ms,
                           share_of_device=share, saved_share_of_loop=saved, kernels=group.names)
    return narrow, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"Heads of {width} on a {unit}-wide matrix unit: their matmuls and score matrices take {share:.0%} of "
              "device time",
        what=(f"Batched matmuls (attention's, one per head) are {width} wide where the {chip.name}'s matrix unit is "
              f"{unit}: each fills {width / unit:.0%} of it, and the score matrices (batch x heads x queries x keys) "
              "that the softmax and its gradient read and write grow with the number of heads the width is split "
              "into."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}"
                  + (f" with matmuls {work.matmul_width} wide" if work.matmul_width else "")
                  + f", kernel {quoted(op.name)}" for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels run the narrow matmuls or read or write their score matrices: {ms:.2f} ms per "
           f"{per}, {share:.1%} of device op time"],
        impact=(f"Heads {unit} wide would take about {1 - width / unit:.0%} of these kernels' time off: "
                f"{saved:.0%} of the loop."),
        fix=(f"Use fewer, wider heads: heads of {unit} (heads = model width / {unit}) keep the parameters and FLOPs, "
             f"fill the matrix unit, and make the score matrices {unit // width}x smaller. This changes the model, so "
             "compare its quality; where the head size is fixed (a pretrained model), a fused attention kernel "
             "(Pallas's flash or splash attention) keeps the scores out of memory, but its matmuls stay as "
             "narrow."),
    )
