"""The same weights multiplied once per example: a batched matmul against copies of one matrix.

``jax.vmap`` batches whatever the mapped function reads from its batched arguments.
A ``lax.cond`` or ``lax.switch`` whose predicate differs per example is batched as
both branches computed and a select, and with every operand of the branches batched:
weights closed over or passed in are then broadcast to one copy per example, and each
example's features are multiplied by their own copy, a matrix-vector product per
example where one matrix product over the batch does the same math. The copies (and,
in training, per-example weight gradients as large, summed over the batch) are read
and written at every step. Measured on a TPU v5e, two experts of 1024-4096-1024
chosen per example by ``lax.cond`` under ``vmap`` over 2,048 examples took 63 ms a
step; the experts run on the examples grouped by choice took 1.4 ms (0.98 saved).

The compiled program shows it as a dot or convolution with a batch of at least
``MIN_COPIES`` whose operand is a broadcast, along that batch, of an array without
it (:attr:`mldiag.analysis.xprof.hlo.KernelWork.shared_matrix_copies`). Those
kernels and the ones that make or read arrays of the copies' size are the cost; one
product over the batch needs about ``1 / batch`` of it, so ``1 - 1/batch`` of their
time is the saving stated and ranked.
"""

from __future__ import annotations

import math

from mldiag.analysis.evidence import PerExampleWeights
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import matched_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, SharedMatrixCopies, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop one product would save
MAX_KERNELS_QUOTED = 3


def _copies(work: KernelWork) -> SharedMatrixCopies:
    assert work.shared_matrix_copies is not None
    return work.shared_matrix_copies


def weights_copied_per_example(hosts: list[HostEvidence],
                               works: list[KernelWork]) -> tuple[PerExampleWeights, Finding] | None:
    """Batched matmuls against per-example copies of one matrix, on the host where one product over the batch
    would save the largest share of the loop: their kernels and the finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, SharedMatrixCopies | None]:
        kernels = matched_kernels(host, works, lambda work: work.shared_matrix_copies)
        saved = sum(op.share_of_busy * (1 - 1 / _copies(work).batch) for op, work in kernels)
        largest = max((_copies(work) for _, work in kernels), key=lambda c: c.batch * math.prod(c.matrix),
                      default=None)
        return kernels, saved * host.loop_busy(), largest

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None or costly[0].detail is None:
        return None
    group, priority = costly
    host, saved, kernels, copies = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    matrix = "x".join(str(size) for size in copies.matrix)
    evidence = PerExampleWeights(host=host.host, batch=copies.batch, matrix=list(copies.matrix),
                                 ms_per_step=group.ms_per_step, share_of_device=group.share_of_device,
                                 share_of_loop_saved=saved, kernels=group.names)
    return evidence, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"The same weights multiplied once per example: {copies.batch:,} copies of a [{matrix}] matrix, "
              f"{saved:.0%} of the loop",
        what=(f"The program broadcasts a [{matrix}] matrix to {copies.batch:,} copies, one per batch element, and "
              "multiplies each element by its own copy: a matrix-vector product per example where one matrix "
              "product over the batch does the same math. jax.vmap does this when the weights are batched with "
              "the inputs: a lax.cond or lax.switch whose predicate differs per example runs both branches with "
              "every operand batched."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, over {_copies(work).batch:,} copies of a "
                  f"[{'x'.join(str(size) for size in _copies(work).matrix)}] matrix"
                  for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels multiply, make or read the per-example copies: {group.ms_per_step:.2f} ms per "
           f"{per}, {group.share_of_device:.1%} of device op time"],
        impact=(f"About {saved:.0%} of the loop goes to multiplying and moving per-example copies of the weights; "
                "one product over the batch takes a fraction of it."),
        fix=("Multiply the batch by the weights once: keep the weights out of what vmap batches (in_axes=None for "
             "them, or close over them outside the mapped function), and replace a per-example lax.cond or "
             "lax.switch by computing each branch on the whole batch and choosing with jnp.where, or, where the "
             "branches are costly, on the examples grouped by branch (sort or partition them by the choice, run "
             "each branch on its group, and scatter the results back)."),
    )
