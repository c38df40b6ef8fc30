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
the chain's cost; of their time, the share ``1 - reassociated / current`` FLOPs is
what reassociating saves, stated and ranked as a share of the loop.
"""

from __future__ import annotations

from mldiag.analysis.evidence import CostlyProductOrders
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.hardware import Chip
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import timed_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import MIN_REASSOCIATED_GAIN, KernelWork, MatmulChain, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop reassociating would save
MAX_KERNELS_QUOTED = 3


def _chain(work: KernelWork) -> MatmulChain:
    assert work.costly_chain is not None
    return work.costly_chain


def _saved(kernels: list[tuple[OpTime, KernelWork]], unit: int) -> float:
    """The share of device op time the kernels would no longer take with the chain multiplied in the other order."""
    return sum(op.share_of_busy * (1 - 1 / _chain(work).fewer_on(unit)) for op, work in kernels)


def chains_in_the_costly_order(hosts: list[HostEvidence], works: list[KernelWork],
                               chip: Chip | None) -> tuple[CostlyProductOrders, Finding] | None:
    """Matmul chains multiplied in the order that costs several times the FLOPs of the other on the chip's matrix
    unit (a thin product costs there as if it were as wide as the unit), on the host where reassociating them saves
    the largest share of the loop: the costliest chain, its kernels and its finding."""
    unit = chip.matrix_unit if chip is not None else 0

    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, MatmulChain | None]:
        kernels = [(op, ran[0]) for op, ran in timed_kernels(host, works) if ran and ran[0].costly_chain is not None
                   and ran[0].costly_chain.fewer_on(unit) >= MIN_REASSOCIATED_GAIN]
        chain = max((_chain(work) for _, work in kernels), key=lambda c: c.flops, default=None)
        return kernels, _saved(kernels, unit) * host.loop_busy(), chain

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None or costly[0].detail is None:
        return None
    group, priority = costly
    host, saved, kernels, chain = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    fewer = chain.flops / chain.reassociated_flops
    reordered = CostlyProductOrders(host=host.host, batch=chain.batch, m=chain.m, k=chain.k, n=chain.n, p=chain.p,
                                    flops=chain.flops, reassociated_flops=chain.reassociated_flops,
                                    fewer_flops=fewer, ms_per_step=group.ms_per_step,
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
           f"{fewer:.1f}x fewer FLOPs"],
        impact=(f"About {saved:.0%} of the loop goes to the costly order's extra FLOPs and the large intermediate; "
                "reassociating the product saves it."),
        fix=("Reassociate the product: multiply the narrow operand first, a @ (b @ x) rather than (a @ b) @ x "
             "(jnp.linalg.multi_dot and torch.linalg.multi_dot choose the cheapest order). For a graph's two hops, "
             "adj @ (adj @ (h @ w)); for linear attention, phi(q) @ (phi(k).T @ v), with the normaliser computed "
             "as phi(q) @ phi(k).sum(0) rather than as the row sums of phi(q) @ phi(k).T. A scaling of rows between "
             "the products moves outside them unchanged."),
    )
