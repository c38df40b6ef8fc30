"""A Kronecker product made in full and multiplied: ``x @ jnp.kron(a, b)``.

A Kronecker-factored layer (a structured weight, a K-FAC or Shampoo preconditioner, a
separable 2-D transform) keeps two small factors, a [p, q] and an [r, s] matrix. Made
in full, ``jnp.kron(a, b)`` is a [p.r, q.s] matrix whose product with x costs
2 n.p.r.q.s FLOPs; applied as the factors in turn to x reshaped to [n, p, r]
(``jnp.einsum("npr,pq,rs->nqs", ...)``) it costs 2 n.p.s.(r + q), 1/q + 1/r of it, and
the large matrix is never made nor, in training, its gradient. Measured on a TPU v5e,
four layers with 64 x 64 factors (4096 wide, batch 2048), trained: the factored form
saved 0.64 of the loop.

The compiled program shows it as a dot or convolution whose operand is the product
of two 2-D matrices broadcast to [p, r, q, s] along interleaved dimensions
(:attr:`mldiag.analysis.xprof.hlo.KernelWork.kronecker_factors`). Those kernels, the
one that makes the product and the ones joined to them by arrays of its size (its
gradient's) are the cost; the factored form's least time, ``1/q + 1/r`` of their FLOPs
at the chip's peak (at the rate the kernels achieved on a CPU), is what it would take.
"""

from __future__ import annotations

from mldiag.analysis.evidence import KroneckerProducts
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.hardware import Chip
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import achieved_rates, matched_kernels, peak_rates
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop the factored form saves
MAX_KERNELS_QUOTED = 3


def _factored_share(factors: tuple[int, ...]) -> float:
    """Of a product by the full Kronecker product of a [p, q] and an [r, s] matrix, the FLOPs the factors applied in
    turn take: 1/q + 1/r."""
    _, q, r, _ = factors
    return min(1.0, 1 / q + 1 / r)


def _factored_ms(kernels: list[tuple[OpTime, KernelWork]], chip: Chip | None) -> float:
    current = sum(op.self_ms_per_step for op, _ in kernels)
    rates = peak_rates(chip, [work for _, work in kernels]) or achieved_rates(kernels)
    if rates is None:
        return current
    flops = sum(work.flops * op.count_per_step * _factored_share(work.kronecker_factors) for op, work in kernels)
    return min(current, rates.least_ms(flops, 0.0))


def kronecker_products_made_in_full(hosts: list[HostEvidence], works: list[KernelWork],
                                    chip: Chip | None) -> tuple[KroneckerProducts, Finding] | None:
    """Matmuls by a Kronecker product made in full, on the host where applying its factors in turn would save the
    largest share of the loop: their kernels and the finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, tuple[tuple[int, ...], float]] | None:
        kernels = matched_kernels(host, works, lambda work: work.kronecker_factors)
        if not kernels:
            return None
        current = sum(op.self_ms_per_step for op, _ in kernels)
        factored = _factored_ms(kernels, chip)
        share = sum(op.share_of_busy for op, _ in kernels)
        return kernels, share * (1 - factored / current) * host.loop_busy(), (kernels[0][1].kronecker_factors, factored)

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, ((p, q, r, s), factored_ms) = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    evidence = KroneckerProducts(host=host.host, factors=[[p, q], [r, s]], ms_per_step=group.ms_per_step,
                                 factored_ms_per_step=factored_ms, share_of_device=group.share_of_device,
                                 share_of_loop_saved=saved, kernels=group.names)
    return evidence, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"A Kronecker product made in full and multiplied: [{p},{q}] (x) [{r},{s}] as a [{p * r},{q * s}] "
              f"matrix; applying the factors in turn saves about {saved:.0%} of the loop",
        what=(f"The program multiplies by the Kronecker product of a [{p},{q}] and an [{r},{s}] matrix, made in full "
              f"as a [{p * r},{q * s}] matrix (jnp.kron): a product by it costs "
              f"{1 / _factored_share((p, q, r, s)):.0f}x the FLOPs of applying the two factors in turn, and the "
              "large matrix (and in training its gradient) is made every step."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, by or for the [{p * r},{q * s}] product"
                  for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels make, multiply by or differentiate the Kronecker product: "
           f"{group.ms_per_step:.2f} ms per {per}, {group.share_of_device:.1%} of device op time; factored, at least "
           f"{factored_ms:.2f} ms"],
        impact=(f"About {saved:.0%} of the loop goes to the full Kronecker product's FLOPs and memory; its factors "
                "applied in turn do the same math in a fraction."),
        fix=(f"Apply the factors in turn: x.reshape(n, {p}, {r}) contracted with each factor, "
             f"jnp.einsum('npr,pq,rs->nqs', x.reshape(n, {p}, {r}), a, b).reshape(n, {q * s}), never jnp.kron(a, b) "
             "in the step."),
    )
