"""Matmul chains multiplied in the costly order: ``(a @ b) @ c`` where ``a @ (b @ c)`` takes a fraction of the FLOPs.

A product is associative, but its cost depends on the order: with ``a`` [m, k], ``b``
[k, n] and ``c`` [n, p], ``(a @ b) @ c`` makes an [m, n] intermediate in m.k.n
multiply-adds and then m.n.p more, where ``a @ (b @ c)`` takes k.n.p + m.k.p. When
``c`` is narrow and the intermediate large, the first order costs many times the
second: a graph layer's two hops ``(adj @ adj) @ x`` over an 8192-node adjacency,
an n x n x n product, where ``adj @ (adj @ x)`` needs two n x n x 128 ones (measured
on a TPU v5e, reassociating saved 0.66 of the loop); linear attention written as
``(phi(q) @ phi(k).T) @ v``, which makes the n x n scores that
``phi(q) @ (phi(k).T @ v)`` never does (0.73). A scaling of rows or columns in
between (linear attention's normaliser) commutes with the products; a non-linear op
(softmax's exponential, a mask) does not, so softmax attention is not such a chain.

The compiled program shows the chain as a dot or convolution whose result reaches a
second one only through such ops, the second contracting one of the first's result
dimensions (:attr:`mldiag.analysis.xprof.hlo.KernelWork.costly_chain`). The kernels
that make or read arrays of the intermediate's size, the gradient's among them, are
the chain's cost. In the other order, each of them that multiplies the intermediate
(or, in training, an array of its size) by a thin matrix becomes two thin products,
``b @ c`` then ``a @ (b @ c)``, which read ``a`` and ``b`` in full; the rest have no
counterpart. Those products take at least their roofline: their FLOPs at the chip's
peak, or the bytes they read and write at its memory bandwidth, whichever is longer
(an 8192-node adjacency's two hops are bound by reading the adjacency, not by their
FLOPs). Where no peak is known (a CPU) they run at the FLOP rate the chain's own
kernels achieved. The kernels' time less that bound is what reassociating saves,
stated and ranked as a share of the loop.
"""

from __future__ import annotations

from mldiag.analysis.evidence import CostlyProductOrders
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.hardware import Chip
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import Rates, achieved_rates, matched_kernels, peak_rates
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import MIN_REASSOCIATED_GAIN, KernelWork, MatmulChain, describe, element_bytes
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop reassociating would save
MAX_KERNELS_QUOTED = 3
# A kernel's matmul FLOPs, over those of multiplying the intermediate by the chain's thin matrix, up to which it is
# such a product (a fused extra dot or two beside it): the other order makes two thin products in its place.
THROUGH_INTERMEDIATE = 2.0


def _chain(work: KernelWork) -> MatmulChain:
    assert work.costly_chain is not None
    return work.costly_chain


def _other_order(kernels: list[tuple[OpTime, KernelWork]], unit: int) -> tuple[float, float]:
    """The FLOPs (as a matrix unit ``unit`` wide computes them) and bytes per step of the products the other order
    makes in the kernels' place: two thin ones for each kernel that multiplies the intermediate, or an array of its
    size, by a thin matrix; one pair a run where no kernel does that alone (both products fused into one)."""
    through = [(op, work) for op, work in kernels
               if 0 < work.flops <= THROUGH_INTERMEDIATE * _chain(work).through_intermediate_flops]
    pairs = through or [max(kernels, key=lambda kernel: kernel[1].flops)]
    return (sum(op.count_per_step * _chain(work).reassociated_flops_on(unit) for op, work in pairs),
            sum(op.count_per_step * _chain(work).reassociated_elements * element_bytes(work.matmul_dtype)
                for op, work in pairs))


def _other_order_ms(kernels: list[tuple[OpTime, KernelWork]], unit: int, rates: Rates | None) -> float:
    """The least time per step the other order's products take in the kernels' place (at ``rates``, or at the rate
    the kernels achieved); the kernels' own time where no rate is known."""
    rates = rates or achieved_rates(kernels)
    current = sum(op.self_ms_per_step for op, _ in kernels)
    return current if rates is None else min(current, rates.least_ms(*_other_order(kernels, unit)))


def _saved(kernels: list[tuple[OpTime, KernelWork]], other_order_ms: float) -> float:
    """The share of device op time the kernels would no longer take with the chain multiplied in the other order."""
    current = sum(op.self_ms_per_step for op, _ in kernels)
    share = sum(op.share_of_busy for op, _ in kernels)
    return share * (1 - other_order_ms / current) if current > 0 else 0.0


def chains_in_the_costly_order(hosts: list[HostEvidence], works: list[KernelWork],
                               chip: Chip | None) -> tuple[CostlyProductOrders, Finding] | None:
    """Matmul chains multiplied in the order that costs several times the FLOPs of the other on the chip's matrix
    unit (a thin product costs there as if it were as wide as the unit), on the host where reassociating them saves
    the largest share of the loop: the costliest chain, its kernels and its finding."""
    unit = chip.matrix_unit if chip is not None else 0

    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, tuple[MatmulChain, float]] | None:
        kernels = matched_kernels(host, works, lambda work: work.costly_chain is not None
                                  and work.costly_chain.fewer_on(unit) >= MIN_REASSOCIATED_GAIN)
        if not kernels:
            return None
        chain = max((_chain(work) for _, work in kernels), key=lambda c: c.flops)
        other_order_ms = _other_order_ms(kernels, unit, peak_rates(chip, [work for _, work in kernels]))
        return kernels, _saved(kernels, other_order_ms) * host.loop_busy(), (chain, other_order_ms)

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, (chain, other_order_ms) = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    fewer = chain.flops / chain.reassociated_flops
    reordered = CostlyProductOrders(host=host.host, batch=chain.batch, m=chain.m, k=chain.k, n=chain.n, p=chain.p,
                                    flops=chain.flops, reassociated_flops=chain.reassociated_flops,
                                    fewer_flops=fewer, ms_per_step=group.ms_per_step,
                                    reassociated_ms_per_step=other_order_ms,
                                    share_of_device=group.share_of_device, share_of_loop_saved=saved,
                                    kernels=group.names)
    shapes = f"[{chain.m},{chain.k}] @ [{chain.k},{chain.n}] then @ [{chain.n},{chain.p}]"
    batched = f" ({chain.batch} such products at once)" if chain.batch > 1 else ""
    return reordered, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"A matmul chain multiplied in the costly order: {shapes}{batched}; reassociating saves about "
              f"{saved:.0%} of the loop",
        what=(f"The program multiplies {shapes}: it makes the [{chain.m},{chain.n}] product first and then "
              f"contracts it with a [{chain.n},{chain.p}] matrix. Reassociated, [{chain.m},{chain.k}] @ "
              f"([{chain.k},{chain.n}] @ [{chain.n},{chain.p}]) gives the same result with {fewer:.1f}x fewer "
              "FLOPs and never makes the large intermediate, nor, in training, its gradient."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, which makes or reads an array of the "
                  f"[{chain.m},{chain.n}] intermediate's size" for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels make or read such arrays: {group.ms_per_step:.2f} ms per {per}, "
           f"{group.share_of_device:.1%} of device op time; multiplied in the other order the chain takes "
           f"{fewer:.1f}x fewer FLOPs, and its products in their place at least {other_order_ms:.2f} ms per {per}"],
        impact=(f"About {saved:.0%} of the loop goes to the costly order's extra FLOPs and the large intermediate; "
                "reassociating the product saves it."),
        fix=("Reassociate the product: multiply the narrow operand first, a @ (b @ x) rather than (a @ b) @ x "
             "(jnp.linalg.multi_dot and torch.linalg.multi_dot choose the cheapest order). For a graph's two hops, "
             "adj @ (adj @ (h @ w)); for linear attention, phi(q) @ (phi(k).T @ v), with the normaliser computed "
             "as phi(q) @ phi(k).sum(0) rather than as the row sums of phi(q) @ phi(k).T. A scaling of rows between "
             "the products moves outside them unchanged."),
    )
