"""Results computed in full and mostly dropped: a matmul or convolution whose result only small slices read.

Code that multiplies every position and keeps one (a prefill's vocabulary logits
for all positions, ``(h @ w_vocab)[:, -1]``), or downsamples by computing at full
resolution and keeping every second row and column (``conv(x, w)[:, ::2, ::2]``, a
stride applied after the fact), computes N elements for each it reads; a gradient
then puts zeros around or between the read elements' gradients and multiplies them
at full size too. Slicing the input first, or a strided convolution, computes only
what is read: measured on a TPU v5e, four 3 x 3 convolutions of which three
downsampled by slicing took 0.47 more of the loop than the same convolutions with
stride 2.

A compiled program shows the waste as kernels whose matmul or convolution result is
read only through slices that keep one element in N or fewer (distinct slices'
shares added up, so a split into q, k and v reads everything), the kernels that
copy, lay out or pick from such a result, and, for the gradient, pads or zeros as
large as such a result and the matmuls that read them
(:attr:`mldiag.analysis.xprof.hlo.KernelWork.computed_per_kept`). Computing only what
is read leaves each of them a 1/N share of its work, which takes at least its
roofline: its FLOPs at the chip's peak or the bytes it reads and writes at its
memory bandwidth, whichever is longer (a scatter into a zeroed full-size gradient
that runs far below the bandwidth leaves a share far below 1/N of its time). Where
no peak is known (a CPU) that share runs at the rate the kernel itself achieved:
1/N of its time. The kernels' time less what is left is the saving stated and
ranked as a share of the loop.
"""

from __future__ import annotations

from mldiag.analysis.evidence import SubsampledResults
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.hardware import Chip
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import matched_kernels, peak_rates
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop the stride would save
MAX_KERNELS_QUOTED = 3


def _kept_ms(op: OpTime, work: KernelWork, chip: Chip | None) -> float:
    """The least time per step the kernel's work on the read elements alone takes: its 1/N share of its FLOPs and
    bytes at the chip's roofline, or of its own time where no peak is known; never more than its time."""
    rates = peak_rates(chip, [work])
    if rates is None:
        return op.self_ms_per_step / work.computed_per_kept
    runs = op.count_per_step / work.computed_per_kept
    return min(op.self_ms_per_step, rates.least_ms(work.flops * runs, work.bytes_accessed * runs))


def _thrown_away(kernels: list[tuple[OpTime, KernelWork]], chip: Chip | None) -> float:
    """The share of device op time the kernels would no longer take computing only the elements the program reads."""
    return sum(op.share_of_busy * (1 - _kept_ms(op, work, chip) / op.self_ms_per_step)
               for op, work in kernels if op.self_ms_per_step > 0)


def computed_then_subsampled(hosts: list[HostEvidence], works: list[KernelWork],
                             chip: Chip | None) -> tuple[SubsampledResults, Finding] | None:
    """Matmul and convolution results computed in full and read one element in N, on the host where the work on
    the discarded elements takes the largest share of the loop: that work and its finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, int]:
        kernels = matched_kernels(host, works, lambda work: work.computed_per_kept > 1)
        return kernels, _thrown_away(kernels, chip) * host.loop_busy(), max((w.computed_per_kept for _, w in kernels),
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
        title=f"Matmul or convolution results computed in full and mostly dropped (one element in {kept_one_in} "
              f"read): {saved:.0%} of the loop computes what is thrown away",
        what=(f"The program computes matmul or convolution results of which it reads one element in {kept_one_in} "
              "or fewer: slices of the result (logits[:, -1] after multiplying every position, y[:, ::2, ::2] after "
              "a stride-1 convolution); a gradient then puts zeros around or between the read elements' gradients "
              "and multiplies those at full size too."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, which computes {work.computed_per_kept} elements "
                  "per one read" for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels compute results mostly dropped afterwards, or their gradients: "
           f"{group.ms_per_step:.2f} ms per {per}, {group.share_of_device:.1%} of device op time"],
        impact=(f"About {saved:.0%} of the loop computes elements that are thrown away; computing only the read ones "
                "saves it."),
        fix=("Compute only what is read. Slice the inputs before the matmul rather than its result: "
             "h[:, -1] @ w_vocab, not (h @ w_vocab)[:, -1] (a prefill needs the last position's logits only). "
             "Downsample inside a convolution rather than after it: pass the stride "
             "(jax.lax.conv_general_dilated(x, w, window_strides=(2, 2), ...), flax.linen.Conv(strides=2), "
             "tf.nn.conv2d(strides=2), torch.nn.Conv2d(stride=2)) instead of slicing its output with [::2], with "
             "explicit padding where it must match the sliced version."),
    )
