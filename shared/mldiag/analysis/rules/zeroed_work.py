"""Work a constant zero throws away: ``loss = main + 0.0 * auxiliary``.

A term whose weight is a constant zero (an auxiliary loss switched off in the config,
a regulariser at 0.0) stays in the traced program: XLA does not drop a product with
zero, since 0 x NaN is not 0, so the term's forward pass is computed to be multiplied
by zero and, in training, its backward pass multiplies gradients of zeros through every
layer it touches. Measured on a TPU v5e, an auxiliary head as large as the trunk
weighted 0.0: leaving it out saved 0.39 of the loop (0.65 on a CPU).

The compiled program shows it as a product (a multiply, a dot or a convolution) by an
operand that holds only zeros, followed from a zero constant through the ops that keep,
multiply or sum zeros (:attr:`mldiag.analysis.xprof.hlo.KernelWork.zeroed_share`): the
kernels whose results only feed such products, and the matmuls that multiply zeros.
"""

from __future__ import annotations

from mldiag.analysis.evidence import ZeroedWork
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import matched_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop the zeroed work takes
MAX_KERNELS_QUOTED = 3


def work_multiplied_by_zero(hosts: list[HostEvidence], works: list[KernelWork]) -> tuple[ZeroedWork, Finding] | None:
    """The work a constant zero throws away, on the host where it takes the largest share of the loop: its kernels
    and the finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, None] | None:
        kernels = matched_kernels(host, works, lambda work: work.zeroed_share)
        if not kernels:
            return None
        return kernels, sum(op.share_of_busy * work.zeroed_share for op, work in kernels) * host.loop_busy(), None

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels = group.host, group.share_of_loop, group.kernels
    per = host.per()
    evidence = ZeroedWork(host=host.host, ms_per_step=group.ms_per_step, share_of_device=group.share_of_device,
                          share_of_loop_saved=saved, kernels=group.names)
    return evidence, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"Work multiplied by zero: {len(kernels)} kernels compute what a constant zero throws away, about "
              f"{saved:.0%} of the loop",
        what=("The program multiplies a term by a constant zero (a loss weighted 0.0, a regulariser switched off in "
              "the config), and XLA keeps everything that feeds it, since 0 x NaN is not 0: the term's forward pass "
              "is computed to be multiplied by zero and, in training, its backward pass multiplies gradients of "
              "zeros through every layer it touches."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, "
                  + ("its result only multiplied by zero" if work.zeroed_share >= 1 else
                     f"{work.zeroed_share:.0%} of its matmul FLOPs on zeros")
                  for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels compute for the zero-weighted term: {group.ms_per_step:.2f} ms per {per}, "
           f"{group.share_of_device:.1%} of device op time"],
        impact=f"About {saved:.0%} of the loop computes results a constant zero discards.",
        fix=("Leave a zero-weighted term out of the traced program: decide in Python (if aux_weight: loss = loss + "
             "aux_weight * aux_loss), so jit never traces the term; a weight that reaches zero during training (a "
             "schedule) can go through jax.lax.cond(weight > 0, ...) so that the zero branch skips the term's "
             "computation, or retrace once it is zero."),
    )
