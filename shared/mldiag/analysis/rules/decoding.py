"""Decoding without a key/value cache: each call recomputes every position to add one token.

A greedy or sampled decoding loop that keeps its tokens in a fixed-length buffer and
runs the whole model over that buffer at every step, reading the activations of the
current position only (``tokens.at[:, t + 1].set(argmax(model(tokens)[:, t]))``),
computes at every step the keys, values and hidden states of all positions, although
those of the earlier positions did not change since the step before. A key/value
cache keeps them: a step then runs one token through the model and attends over the
cache. Measured on a TPU v5e, a 4-layer model of width 1024 decoding into a 1024-token
buffer spent 0.87 of its loop on what a cache saves.

A compiled program shows it as a dynamic slice of one position, at an index it
computes, out of activations a matmul made for every position, and a dynamic update
of one position of a buffer of the same length
(:attr:`mldiag.analysis.xprof.hlo.KernelWork.recomputed_positions`). Of its kernels
whose results span every position, ``1 - 1/N`` of their time recomputes what the
steps before already computed: that share of the loop is the saving stated and
ranked.
"""

from __future__ import annotations

from mldiag.analysis.evidence import UncachedDecoding
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import matched_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

PRIORITIES = ((0.3, Priority.P0), (0.1, Priority.P1), (0.03, Priority.P2))  # of the loop a cache would save
MAX_KERNELS_QUOTED = 3


def decoding_without_a_cache(hosts: list[HostEvidence],
                             works: list[KernelWork]) -> tuple[UncachedDecoding, Finding] | None:
    """The kernels of a decoding program that recompute every position at each call, on the host where that
    recomputation takes the largest share of the loop: that work and its finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, int]:
        kernels = matched_kernels(host, works, lambda work: work.recomputed_positions)
        recomputed = sum(op.share_of_busy * (1 - 1 / work.recomputed_positions) for op, work in kernels)
        return kernels, recomputed * host.loop_busy(), max((w.recomputed_positions for _, w in kernels), default=0)

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, positions = group.host, group.share_of_loop, group.kernels, group.detail
    per = host.per()
    uncached = UncachedDecoding(host=host.host, positions=positions, ms_per_step=group.ms_per_step,
                                share_of_device=group.share_of_device, share_of_loop_recomputed=saved,
                                kernels=group.names)
    return uncached, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"Decoding without a key/value cache: each call recomputes all {positions:,} positions to add one "
              f"token, {saved:.0%} of the loop",
        what=(f"The program runs the model over every position of a {positions:,}-position buffer, reads the "
              "activations of one position (a dynamic slice at the current index) and writes one position of the "
              "buffer: a decoding step that recomputes the keys, values and hidden states of every earlier token, "
              "which did not change since the step before."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}, over all {work.recomputed_positions:,} positions"
                  for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels work on every position of the buffer: {group.ms_per_step:.2f} ms per {per}, "
           f"{group.share_of_device:.1%} of device op time"],
        impact=(f"About {saved:.0%} of the loop recomputes positions the steps before already computed; a "
                "key/value cache saves most of it."),
        fix=("Keep a key/value cache: preallocate each layer's keys and values as [batch, positions, heads, "
             "head_dim] arrays, pass them to the step (donated: donate_argnums) and write the new token's with "
             "jax.lax.dynamic_update_slice, so that a step runs one token through the model and attends over the "
             "cache (flax.linen.MultiHeadDotProductAttention(decode=True) with its 'cache' collection; a Hugging "
             "Face Flax model's past_key_values with use_cache=True). Run the prompt once as a prefill that fills "
             "the cache."),
    )
