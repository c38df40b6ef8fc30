"""Results computed in full and then subsampled: a convolution or matmul whose output only strided slices read.

Code that downsamples by computing at full resolution and keeping every second
row and column (``conv(x, w)[:, ::2, ::2]``, a stride applied after the fact)
computes N outputs for each it keeps, N the product of the strides; the gradient
then puts zeros between the kept outputs' gradients and convolves them at full
resolution too. A strided convolution (``window_strides``) or a strided matmul's
input computes only what is kept: measured on a TPU v5e, four 3 x 3 convolutions
of which three downsampled by slicing took 0.47 more of the loop than the same
convolutions with stride 2.

A compiled program shows the waste as kernels whose matmul or convolution result is
read only through strided slices, and, for the gradient, pads with interior
padding as large as such a result and the matmuls that read them
(:attr:`mldiag.analysis.xprof.hlo.KernelWork.computed_per_kept`). Of their time,
``1 - 1/N`` computes what is thrown away: that share of the loop is the saving
stated and ranked.
"""

from __future__ import annotations

from mldiag.analysis.evidence import SubsampledResults
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import timed_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop the stride would save
MAX_KERNELS_QUOTED = 3


def _thrown_away(kernels: list[tuple[OpTime, KernelWork]]) -> float:
    """The share of device op time the kernels spend on elements the program throws away."""
    return sum(op.share_of_busy * (1 - 1 / work.computed_per_kept) for op, work in kernels)


def computed_then_subsampled(hosts: list[HostEvidence],
                             works: list[KernelWork]) -> tuple[SubsampledResults, Finding] | None:
    """Matmul and convolution results computed in full and kept one element in N, on the host where the work on
    the discarded elements takes the largest share of the loop: that work and its finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, int]:
        kernels = [(op, ran[0]) for op, ran in timed_kernels(host, works) if ran and ran[0].computed_per_kept > 1]
        return kernels, _thrown_away(kernels) * host.loop_busy(), max((w.computed_per_kept for _, w in kernels),
                                                                      default=1)

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, kept_one_in = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    subsampled = SubsampledResults(host=host.host, kept_one_in=kept_one_in, ms_per_step=group.ms_per_step,
                                   share_of_device=group.share_of_device, share_of_loop_discarded=saved,
                                   kernels=group.names)
    return subsampled, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"Convolutions or matmuls computed in full and then subsampled (one output in {kept_one_in} kept): "
              f"{saved:.0%} of the loop computes what is thrown away",
        what=(f"The program computes matmul or convolution results of which it keeps one element in {kept_one_in} "
              "(strided slices such as y[:, ::2, ::2] after a stride-1 convolution), and its gradient puts zeros "
              "between the kept elements' gradients and convolves those at full size too."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, which computes {work.computed_per_kept} elements "
                  "per one kept" for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels compute results subsampled afterwards or their gradients: "
           f"{group.ms_per_step:.2f} ms per {per}, {group.share_of_device:.1%} of device op time"],
        impact=(f"About {saved:.0%} of the loop computes elements that are thrown away; a strided convolution "
                "computes only the kept ones."),
        fix=("Downsample inside the convolution instead of after it: pass the stride to the convolution "
             "(jax.lax.conv_general_dilated(x, w, window_strides=(2, 2), ...), flax.linen.Conv(strides=2), "
             "tf.nn.conv2d(strides=2), torch.nn.Conv2d(stride=2)) rather than slicing its output with [::2]; for "
             "a matmul, slice its input rows before multiplying. Where the padding must match the sliced version, "
             "give the strided convolution explicit padding."),
    )
