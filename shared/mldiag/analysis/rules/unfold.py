"""A convolution written by hand: an input copied as shifted windows side by side (an im2col), then a matmul.

Sliding-window code that concatenates shifted slices of an input (``jnp.concatenate``
or ``jnp.stack`` of ``x[:, k:k + n]``, an unfold, an im2col) and multiplies the
result by a matrix computes a convolution, with every element of the input copied
once per window position: the copies are written, then read by the matmul and by
its gradients, each as large as the input times the window. The framework's
convolution computes the same from the input in place: measured on a TPU v5e, three
1-D convolutions of 9 taps written as an im2col took 0.45 more of the loop than
``lax.conv_general_dilated``.

A compiled program shows the copies as fusions that write a slice of one array into
a buffer that many such slices fill side by side, or as a convolution by an identity
kernel (``lax.conv_general_dilated_patches``: one output channel per window position
and input channel); the kernels counted are those that write or read an array of
that buffer's size. What a convolution saves is not known
from them (it depends on the convolution's own kernels), so their share is stated,
not a saving.
"""

from __future__ import annotations

from mldiag.analysis.evidence import UnfoldedInputs
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import matched_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

MIN_WINDOWS = 3  # windows side by side from which the copies are a sliding window's, not a concatenation of a few
PRIORITIES = ((0.2, Priority.P1), (0.05, Priority.P2))  # a change of how the model is written: never a P0 alone
MAX_KERNELS_QUOTED = 3


def _copied_windows(host: HostEvidence, works: list[KernelWork]) -> tuple[int, list[tuple[OpTime, KernelWork]]]:
    """The windows side by side of the largest buffer of copied windows the host's programs build, and the timed
    kernels that write or read arrays of that buffer's size; (0, []) where none is built."""
    timed = matched_kernels(host, works)
    launched = {work.module for _, work in timed}
    builders = [work for work in works if work.module in launched and work.windows_side_by_side >= MIN_WINDOWS]
    if not builders:
        return 0, []
    largest = max(builders, key=lambda work: work.largest_elements)
    programs = {work.module for work in builders if work.largest_elements == largest.largest_elements}
    return largest.windows_side_by_side, [(op, work) for op, work in timed if work.module in programs
                               and work.largest_elements == largest.largest_elements]


def hand_written_convolutions(hosts: list[HostEvidence],
                              works: list[KernelWork]) -> tuple[UnfoldedInputs, Finding] | None:
    """Inputs copied as shifted windows side by side and multiplied, on the host where the kernels that write or
    read the copies take the largest share of the loop: that share and its finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, int]:
        windows, kernels = _copied_windows(host, works)
        return kernels, sum(op.share_of_busy for op, _ in kernels) * host.loop_busy(), windows

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, share, kernels, windows = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    ms, device_share = group.ms_per_step, group.share_of_device
    unfolded = UnfoldedInputs(host=host.host, windows=windows, ms_per_step=ms, share_of_device=device_share,
                              share_of_loop=share, kernels=group.names)
    return unfolded, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"A convolution written by hand: an input copied as {windows} shifted windows side by side, in "
              f"kernels that take {share:.0%} of the loop",
        what=(f"The program builds an array of {windows} slices of another side by side (shifted windows of an "
              "input concatenated: an im2col, an unfold, a sliding window) and multiplies it: a convolution, with "
              f"every element copied {windows} times, the copies written and then read by the matmul and its "
              "gradients."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}" for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels write or read arrays of the {windows} windows' size: {ms:.2f} ms per {per}, "
           f"{device_share:.1%} of device op time"],
        impact=(f"The kernels on the copied windows take {share:.0%} of the loop; a convolution reads the input in "
                "place instead."),
        fix=("Use the framework's convolution instead of concatenating shifted slices and multiplying: "
             "jax.lax.conv_general_dilated (flax.linen.Conv, tf.nn.conv1d/conv2d, torch.nn.functional.conv1d), "
             "with the window as its kernel size and the matmul's matrix reshaped to (window, in, out); "
             "jax.lax.conv_general_dilated_patches only where the patches themselves are needed."),
    )
