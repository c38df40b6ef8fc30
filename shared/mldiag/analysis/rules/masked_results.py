"""Matmul results computed in full and mostly masked: sliding-window attention written as full attention.

Local attention (each query sees the w keys before it) written as full attention with
a band mask, ``jnp.where((j <= i) & (j > i - w), q @ k.T, -inf)``, computes the n x n
scores, their softmax and, in training, their gradients, and throws away all but w of
every n. Blocks of w queries against their own and the previous block's keys compute
2 w of them: measured on a CPU, a 64-token window over 1,024 tokens in two trained
layers, the blocked form saved 0.85 of the loop. A 1-D convolution written as a matmul
by a banded (Toeplitz) matrix made from its filter, ``t[i, j] = w[i - j]`` for
``0 <= i - j < taps``, is the same band: in training its gradient is the full product
masked to the band (and summed into the taps by a scatter); on a TPU v5e a 64-tap
filter over 4,096 steps took 74x the time of ``conv_general_dilated``.

The compiled program shows it as a select, on a mask computed from positions alone
(iotas, constants, comparisons), between a matmul's result and a constant; the share
the mask keeps is measured at sampled positions
(:attr:`mldiag.analysis.xprof.hlo.KernelWork.masked_per_kept`). The matmul's kernel,
the select's, and those joined to them by arrays of the result's size are the cost;
the blocked form leaves ``2/N`` of their work, at the rate they ran, for a mask that
keeps one element in N.
"""

from __future__ import annotations

from mldiag.analysis.evidence import MaskedResults
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import matched_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop the blocked form saves
BLOCKS_KEPT = 2  # blocks of w keys a block of queries is multiplied by: its own and the one before
MAX_KERNELS_QUOTED = 3


def mostly_masked_results(hosts: list[HostEvidence], works: list[KernelWork]) -> tuple[MaskedResults, Finding] | None:
    """Matmul results a mask of positions mostly discards, on the host where computing only the kept blocks would
    save the largest share of the loop: their kernels and the finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, int] | None:
        kernels = matched_kernels(host, works, lambda work: work.masked_per_kept)
        if not kernels:
            return None
        saved = sum(op.share_of_busy * max(0.0, 1 - BLOCKS_KEPT / work.masked_per_kept) for op, work in kernels)
        return kernels, saved * host.loop_busy(), max(work.masked_per_kept for _, work in kernels)

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, per_kept = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    evidence = MaskedResults(host=host.host, kept_one_in=per_kept, ms_per_step=group.ms_per_step,
                             share_of_device=group.share_of_device, share_of_loop_saved=saved, kernels=group.names)
    return evidence, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"Matmul results computed in full and mostly masked (one element in {per_kept} kept): computing only "
              f"the kept blocks saves about {saved:.0%} of the loop",
        what=(f"The program multiplies in full and then keeps one element in {per_kept} of the result by a mask of "
              "positions (a select against a constant, the mask made from iotas alone): a band, as sliding-window "
              "attention written as full attention with jnp.where keeps (the rest computed, soft-maxed and, in "
              "training, differentiated to be thrown away), or a convolution written as a matmul by a banded "
              "matrix made from its filter (its gradient the full product, masked to the band)."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, one element in {work.masked_per_kept} kept"
                  for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels compute, mask or read the full result: {group.ms_per_step:.2f} ms per {per}, "
           f"{group.share_of_device:.1%} of device op time"],
        impact=(f"About {saved:.0%} of the loop computes elements the mask throws away; blocks of queries against "
                "their own and the previous block's keys compute only what the band keeps."),
        fix=("Compute only the band: split the sequence into blocks as long as the window and multiply each block of "
             "queries by its own and the previous block's keys (two blocks, then the band mask inside them), or use "
             "a local-attention kernel (Pallas's splash attention with a LocalMask; "
             "jax.nn.dot_product_attention's local_window_size). Where the banded matrix is made from a filter by "
             "lag (t[i, j] = w[i - j], a convolution written as a matmul by a Toeplitz matrix), convolve instead: "
             "jax.lax.conv_general_dilated (feature_group_count for a filter per channel) computes only the taps."),
    )
