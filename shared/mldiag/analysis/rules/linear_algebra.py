"""Matrix decompositions on the device every step: an inverse, a Cholesky or an eigendecomposition in the loop.

Second-order optimisers (Shampoo, K-FAC), whitening and Gaussian-process steps
invert or decompose a matrix; the compilers run these as library custom calls
(a TPU's ``LuDecompositionBlock`` and ``InvertDiagBlocks*``, cuSOLVER's and LAPACK's
``getrf``, ``potrf``, ``syevd``), blocked loops of panels that use the chip far
less well than its matmuls do. Where the matrix changes slowly (a running
statistic), computing its inverse every N steps and reusing it between costs
1/N of it: measured on a TPU v5e, a Shampoo-like step on a 2,048 x 2,048
preconditioner took 0.60 less of the loop with the inverse computed every 10th
step. The kernels are told by their custom calls' targets; their time is the
share of the loop they take.
"""

from __future__ import annotations

import re

from mldiag.analysis.evidence import MatrixDecompositions
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import timed_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork
from mldiag.domain.resources import Finding, FindingCategory, Priority

_DECOMPOSITION = re.compile(
    r"LuDecomposition|InvertDiagBlocks|Cholesky|Qr|Eigh|Svd|TriangularSolve|"  # a TPU's and XLA's own
    r"getrf|getri|potrf|potri|geqrf|orgqr|syevd|heevd|gesvd|gesdd|trsm|trtri|"  # LAPACK's and cuSOLVER's routines
    r"cusolver|lapack", re.IGNORECASE)
PRIORITIES = ((0.5, Priority.P0), (0.2, Priority.P1), (0.05, Priority.P2))
MAX_KERNELS_QUOTED = 3


def solver_programs(works: list[KernelWork]) -> set[str]:
    """The programs that run a matrix decomposition's library calls: a TPU expands the rest of the solver (an LU's
    trailing updates, a triangular solve's blocks) into f32 matmuls at HIGHEST precision of its own."""
    return {work.module for work in works if work.custom_call and _DECOMPOSITION.search(work.custom_call)}


def _decompositions(host: HostEvidence, works: list[KernelWork]) -> list[tuple[OpTime, str]]:
    """The host's timed kernels that are a matrix decomposition's library calls, with their targets."""
    return [(op, ran[0].custom_call) for op, ran in timed_kernels(host, works)
            if ran and _DECOMPOSITION.search(ran[0].custom_call)]


def decompositions_every_step(hosts: list[HostEvidence],
                              works: list[KernelWork]) -> tuple[MatrixDecompositions, Finding] | None:
    """A matrix decomposition's kernels, on the host where they take the largest share of the loop: what they take
    and their finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, str]], float, None]:
        kernels = _decompositions(host, works)
        return kernels, sum(op.share_of_busy for op, _ in kernels) * host.loop_busy(), None

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, share, kernels = group.host, group.share_of_loop, group.kernels
    targets = list(dict.fromkeys(target for _, target in kernels))
    per = host.per()
    ms, device_share = group.ms_per_step, group.share_of_device
    found = MatrixDecompositions(host=host.host, targets=targets, ms_per_step=ms, share_of_device=device_share,
                                 share_of_loop=share, kernels=group.names)
    return found, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"A matrix decomposition every step: its library kernels take {share:.0%} of the loop",
        what=("The step inverts or decomposes a matrix on the device (LU, Cholesky, QR or an eigendecomposition: a "
              "preconditioner, a whitening matrix, a solve), which runs as a blocked loop of library kernels that "
              "use the chip far less well than its matmuls."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in custom call "
                  f"{quoted(target)}, kernel {quoted(op.name)}" for op, target in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels of {', '.join(quoted(t) for t in targets[:4])}: {ms:.2f} ms per {per}, "
           f"{device_share:.1%} of device op time"],
        impact=f"{share:.0%} of the loop, every step; computed every N steps, about 1/N of it.",
        fix=("Compute the decomposition less often where its matrix changes slowly (a running statistic, a "
             "preconditioner): every N steps, reusing it in between (Shampoo and K-FAC update their inverses "
             "every 10-100 steps). Where only its product with a vector or matrix is used, solve instead of "
             "inverting (jax.scipy.linalg.cho_factor once, then cho_solve; jnp.linalg.solve), and for a symmetric "
             "positive definite matrix use a Cholesky, about half an LU's work."),
    )
