"""Pairwise distances by broadcasting: every row of one matrix against every row of another, feature by feature.

``((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)`` computes an [n, m, d] array of
differences, squares it and sums it over the features: 3 n.m.d element-wise operations
on the vector units, and, in training, as many again for the gradient, where
``(a ** 2).sum(-1)[:, None] + (b ** 2).sum(-1)[None, :] - 2 * a @ b.T`` does the same
with one [n, d] x [d, m] matmul on the matrix unit. Measured on a TPU v5e, squared
distances between 2,048 projected queries and 2,048 keys of 128 features in a trained
loss: the expanded form saved 0.68 of the loop (0.94 on a CPU).

The compiled program shows it as the difference (or sum) of two matrices broadcast to
[n, m, d] along different dimensions
(:attr:`mldiag.analysis.xprof.hlo.KernelWork.pairs_combined`). Those kernels, and the
ones that read or write arrays of that size, are the cost; the matmul form's least time
(2 n.m.d FLOPs and the [n, m] result in each kernel's place, at the chip's peak, or at the rate the
program's own matmuls achieved where no peak is known) is what it would take instead.
"""

from __future__ import annotations

from mldiag.analysis.evidence import PairwiseByBroadcast
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.hardware import Chip
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import Rates, achieved_rates, matched_kernels, peak_rates
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop the matmul form would save
RESULT_BYTES = 4  # per pair: the distances in f32
MAX_KERNELS_QUOTED = 3


def _matmul_form_ms(kernels: list[tuple[OpTime, KernelWork]], rates: Rates | None) -> float:
    """The least time per step the matmul form takes in the kernels' place: a matmul of 2 n.m.d FLOPs writing the
    [n, m] result in each kernel's place (the forward's and the gradient's); their own time where no rate is
    known."""
    current = sum(op.self_ms_per_step for op, _ in kernels)
    if rates is None:
        return current
    flops = moved = 0.0
    for op, work in kernels:
        n, m, d = work.pairs_combined
        flops += 2.0 * n * m * d * op.count_per_step
        moved += RESULT_BYTES * n * m * op.count_per_step
    return min(current, rates.least_ms(flops, moved))


def pairwise_by_broadcast(hosts: list[HostEvidence], works: list[KernelWork],
                          chip: Chip | None) -> tuple[PairwiseByBroadcast, Finding] | None:
    """Every pair of two matrices' rows combined feature by feature, on the host where the matmul form would save
    the largest share of the loop: the kernels and the finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, tuple[tuple[int, ...], float]] | None:
        timed = matched_kernels(host, works)
        kernels = [(op, work) for op, work in timed if work.pairs_combined]
        if not kernels:
            return None
        rates = peak_rates(chip, [work for _, work in timed if work.flops]) or achieved_rates(
            [(op, work) for op, work in timed if work.flops])
        current = sum(op.self_ms_per_step for op, _ in kernels)
        matmul_ms = _matmul_form_ms(kernels, rates)
        share = sum(op.share_of_busy for op, _ in kernels)
        largest = max((work.pairs_combined for _, work in kernels), key=lambda p: p[0] * p[1] * p[2])
        return kernels, share * (1 - matmul_ms / current) * host.loop_busy(), (largest, matmul_ms)

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, ((n, m, d), matmul_ms) = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    evidence = PairwiseByBroadcast(host=host.host, rows=n, other_rows=m, features=d, ms_per_step=group.ms_per_step,
                                   matmul_ms_per_step=matmul_ms, share_of_device=group.share_of_device,
                                   share_of_loop_saved=saved, kernels=group.names)
    return evidence, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"Pairwise differences by broadcasting: {n:,} by {m:,} pairs of {d} features element by element; the "
              f"matmul form saves about {saved:.0%} of the loop",
        what=(f"The program subtracts every row of a [{n},{d}] matrix from every row of a [{m},{d}] one, an "
              f"[{n},{m},{d}] array of differences (a[:, None, :] - b[None, :, :]), and reduces it: element-wise "
              "work on the vector units that grows with n x m x d, where the expanded form of a squared distance "
              "puts it on the matrix unit as one matmul."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, over "
                  f"{'x'.join(str(size) for size in work.pairs_combined)} differences"
                  for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels make or read the pairwise differences: {group.ms_per_step:.2f} ms per {per}, "
           f"{group.share_of_device:.1%} of device op time; as one matmul at least {matmul_ms:.2f} ms"],
        impact=(f"About {saved:.0%} of the loop goes to element-wise work over every pair that one matmul does on "
                "the matrix unit."),
        fix=("Expand the squared distance: (a ** 2).sum(-1)[:, None] + (b ** 2).sum(-1)[None, :] - 2 * a @ b.T "
             "(in float32, clipped at zero against rounding), or for a dot-product similarity a @ b.T alone; "
             "for other pairwise functions, compute them in blocks of rows so no [n, m, d] array is made."),
    )
