"""A Jacobian built in full where products with vectors would do: ``jax.jacrev(f)(x)`` then ``v @ J``.

``jax.jacrev`` pulls back every row of an n x n identity through the program, one
reverse pass per output, and ``jax.jacfwd`` pushes every column forward, one per
input; ``jax.hessian`` does both. Where the Jacobian is only multiplied by vectors
(a vector-Jacobian product, a Jacobian-vector product, a trace or a divergence
estimated by random probes, a Gauss-Newton or Hessian-vector product), ``jax.vjp``
and ``jax.jvp`` compute each product in one pass, 1/n of the work. Measured on a CPU,
per-example vector-Jacobian products of a 128-wide network by ``vmap(jax.jacrev)``
and then a product with v, trained: ``jax.vjp`` saved 0.97 of the loop.

The compiled program shows the seed as a matmul by the identity made from positions
(:attr:`mldiag.analysis.xprof.hlo.KernelWork.jacobian_basis`); its kernels and every
kernel that reads their results carry the n-fold work, and a product with one vector
would take about 1/n of their time.
"""

from __future__ import annotations

from mldiag.analysis.evidence import FullJacobians
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import matched_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop products with vectors save
MAX_KERNELS_QUOTED = 3


def jacobians_built_in_full(hosts: list[HostEvidence],
                            works: list[KernelWork]) -> tuple[FullJacobians, Finding] | None:
    """Jacobians built in full, on the host where computing products with vectors instead would save the largest
    share of the loop: their kernels and the finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, int] | None:
        kernels = matched_kernels(host, works, lambda work: work.jacobian_basis)
        if not kernels:
            return None
        basis = max(work.jacobian_basis for _, work in kernels)
        share = sum(op.share_of_busy for op, _ in kernels)
        return kernels, share * (1 - 1 / basis) * host.loop_busy(), basis

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, n = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    evidence = FullJacobians(host=host.host, basis=n, ms_per_step=group.ms_per_step,
                             share_of_device=group.share_of_device, share_of_loop_saved=saved, kernels=group.names)
    return evidence, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"A Jacobian built in full: derivatives seeded by a {n} by {n} identity; products with vectors "
              f"instead (jax.vjp, jax.jvp) would save about {saved:.0%} of the loop",
        what=(f"The program multiplies by a {n} x {n} identity matrix made from positions, the seed of a Jacobian "
              f"computed whole (jax.jacrev pulls back each of its {n} rows, jax.jacfwd pushes each column forward, "
              "jax.hessian does both): every kernel after it computes n derivatives where a product of the Jacobian "
              "with one vector needs one."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, on the {n} seeded derivatives"
                  for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels seed the Jacobian by the identity or compute on it: {group.ms_per_step:.2f} ms "
           f"per {per}, {group.share_of_device:.1%} of device op time"],
        impact=(f"About {saved:.0%} of the loop, if the Jacobian is only multiplied by vectors: one product costs "
                f"about 1/{n} of building it."),
        fix=("Where the Jacobian is only multiplied by vectors, compute the products directly: v @ J with "
             "jax.vjp(f, x)[1](v), J @ u with jax.jvp(f, (x,), (u,)), several vectors with jax.linearize once "
             "then vmap over them, a Hessian-vector product with jax.jvp(jax.grad(f), (x,), (u,)), a trace or "
             "divergence with a few random probes (Hutchinson). Where it is needed whole (a log-determinant), "
             "use jax.jacfwd for a tall-thin function and jax.jacrev for a short-wide one, so the identity is "
             "the narrower side."),
    )
