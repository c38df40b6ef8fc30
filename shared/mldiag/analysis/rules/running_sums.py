"""Running sums written as a matmul by a triangular matrix of ones: ``jnp.tril(jnp.ones((n, n))) @ x``.

Multiplying a sequence by a lower-triangular matrix of ones sums, at every position,
all the positions before it: a cumulative sum (a causal running mean, an exclusive
prefix, a discounted return with a constant factor) in n x n multiply-adds per
column, where the sum itself needs n additions. The matrix unit hides much of that
at a few thousand positions, but the work grows with the square of the length. Done
in chunks, each chunk's running sums are a triangular matmul as wide as the matrix
unit and a cumulative sum carries the chunks' totals across: measured on a TPU v5e
at 8,192 positions (four layers, trained), the chunked form saved 0.65 of the loop;
``jnp.cumsum``, which XLA computes there as a windowed reduction, saved 0.29.

The compiled program shows it as a dot or convolution whose operand is ``iota >=
iota`` selecting between ones and zeros
(:attr:`mldiag.analysis.xprof.hlo.KernelWork.running_sum_positions`). Those kernels,
and the one that makes the matrix, are the cost; the chunked form does ``chunk / n``
of their FLOPs, and its least time at the chip's peak (at the rate the kernels
achieved on a CPU) is what it would take instead: the rest is the saving stated and
ranked.
"""

from __future__ import annotations

from mldiag.analysis.evidence import TriangularRunningSums
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.hardware import Chip
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import achieved_rates, matched_kernels, peak_rates
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop chunking would save
MIN_CHUNK = 128  # positions a chunk's triangular matmul spans: the matrix unit's width, at least
MAX_KERNELS_QUOTED = 3


def _chunked_ms(kernels: list[tuple[OpTime, KernelWork]], chunk: int, chip: Chip | None) -> float:
    """The least time per step the chunked form takes in the kernels' place: ``chunk / n`` of their FLOPs and the
    bytes they move, at the chip's peak rates (at the rate the kernels achieved without them); their own time where
    no rate is known."""
    current = sum(op.self_ms_per_step for op, _ in kernels)
    rates = peak_rates(chip, [work for _, work in kernels]) or achieved_rates(kernels)
    if rates is None:
        return current
    flops = sum(work.flops * op.count_per_step * min(1.0, chunk / work.running_sum_positions) for op, work in kernels)
    moved = sum(work.bytes_accessed * op.count_per_step for op, work in kernels)
    return min(current, rates.least_ms(flops, moved))


def triangular_running_sums(hosts: list[HostEvidence], works: list[KernelWork],
                            chip: Chip | None) -> tuple[TriangularRunningSums, Finding] | None:
    """Matmuls by a triangular matrix of ones, on the host where summing in chunks would save the largest share of
    the loop: their kernels and the finding."""
    chunk = max(chip.matrix_unit if chip is not None else 0, MIN_CHUNK)

    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, tuple[int, float]] | None:
        kernels = matched_kernels(host, works, lambda work: work.running_sum_positions)
        positions = max((work.running_sum_positions for _, work in kernels), default=0)
        if positions <= chunk:
            return None
        current = sum(op.self_ms_per_step for op, _ in kernels)
        chunked = _chunked_ms(kernels, chunk, chip)
        share = sum(op.share_of_busy for op, _ in kernels)
        return kernels, share * (1 - chunked / current) * host.loop_busy(), (positions, chunked)

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, (positions, chunked_ms) = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    evidence = TriangularRunningSums(host=host.host, positions=positions, chunk=chunk, ms_per_step=group.ms_per_step,
                                     chunked_ms_per_step=chunked_ms, share_of_device=group.share_of_device,
                                     share_of_loop_saved=saved, kernels=group.names)
    return evidence, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"Running sums as a matmul by a triangular matrix of ones over {positions:,} positions: summing in "
              f"chunks saves about {saved:.0%} of the loop",
        what=(f"The program multiplies by a {positions:,} x {positions:,} lower-triangular matrix of ones (iota >= "
              "iota), which sums every position's predecessors: a cumulative sum computed in "
              f"{positions:,} multiply-adds per position where it needs one addition, and growing with the square "
              "of the length."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, summing over {work.running_sum_positions:,} "
                  "positions" for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels multiply by or make the triangular matrix: {group.ms_per_step:.2f} ms per {per}, "
           f"{group.share_of_device:.1%} of device op time; in chunks of {chunk} positions the same sums take at "
           f"least {chunked_ms:.2f} ms"],
        impact=(f"About {saved:.0%} of the loop goes to multiply-adds by zeros and ones that a chunked running sum "
                "does not do."),
        fix=(f"Sum in chunks: reshape the sequence to [chunks, {chunk}, ...], multiply each chunk by a {chunk} x "
             f"{chunk} triangular matrix of ones (a matmul the size of the matrix unit), and add to each chunk the "
             "cumulative sum of the chunks before it (jnp.cumsum over the chunks' totals, exclusive). jnp.cumsum "
             "over the whole length is the simplest form, but XLA runs it as a windowed reduction, which on a TPU "
             "saved less than the chunked form (0.29 against 0.65 of such a loop)."),
    )
