"""Which framework a profile came from, told from the names in its trace, and the fixes that fit it.

A fix is only useful in the words of the code that was profiled: ``jax.jit`` means
nothing to a TensorFlow graph, and a tf.data pipeline nothing to a JAX
micro-benchmark. The evidence carries the names the trace gave the host's work,
the programs it launched and the device's kernels; each framework leaves its own:

* JAX: ``PjitFunction(...)`` dispatches and ``jit_...`` programs;
* PyTorch/XLA: ``torch_xla`` scopes and ``SyncTensorsGraph`` programs;
* TensorFlow: ``__inference_...`` functions, ``tf_data`` / ``Iterator::`` input
  pipelines, ``TF_...`` runtime events, eager ``EagerExecute`` and
  ``tensorflow::`` kernels; eager when it has eager events and no graph functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum

from mldiag.analysis.host_evidence import HostEvidence


class Framework(StrEnum):
    JAX = "jax"
    TENSORFLOW = "tensorflow"
    TENSORFLOW_EAGER = "tensorflow_eager"
    PYTORCH_XLA = "pytorch_xla"
    UNKNOWN = "unknown"


_PYTORCH_XLA = re.compile(r"torch_xla|SyncTensorsGraph|xla::torch", re.IGNORECASE)
_JAX = re.compile(r"^PjitFunction\(|^jit_|^\[\d+\] \S*Execute \(jit_")
_TF_GRAPH = re.compile(r"__inference_|^TF_|tf_data|^Iterator::|tensorflow::|^ExecutorState::|^SessionRun")
_TF_EAGER = re.compile(r"^EagerExecute|^EagerKernelExecute|^EagerLocalExecute")
_INPUT_PIPELINE = re.compile(r"tf_data|^Iterator::|grain|DataLoader|data_load|prefetch", re.IGNORECASE)


def names(hosts: Iterable[HostEvidence]) -> list[str]:
    """Every name the evidence carries from the trace: host work, launches, programs and device ops."""
    found = []
    for host in hosts:
        found.append(host.step_marker)
        found += [a.name for a in (*host.host_activities, *host.between_steps, *host.dispatched)]
        found += [p.name for p in host.programs] + [op.name for op in host.top_ops]
    return [name for name in found if name]


def detect(hosts: Iterable[HostEvidence]) -> Framework:
    """The framework whose names the trace carries; UNKNOWN when none does."""
    seen = names(hosts)
    if any(_PYTORCH_XLA.search(name) for name in seen):
        return Framework.PYTORCH_XLA
    if any(_JAX.search(name) for name in seen):
        return Framework.JAX
    graph = any(_TF_GRAPH.search(name) for name in seen)
    if any(_TF_EAGER.search(name) for name in seen) and not any("__inference_" in name for name in seen):
        return Framework.TENSORFLOW_EAGER
    return Framework.TENSORFLOW if graph else Framework.UNKNOWN


def has_input_pipeline(hosts: Iterable[HostEvidence]) -> bool:
    """Whether the trace shows an input pipeline (tf.data iterators, grain, a data loader) at all."""
    return any(_INPUT_PIPELINE.search(name) for name in names(hosts))


_ONE_PROGRAM = {
    Framework.JAX: "wrap the whole step in jax.jit (or jit the loop body and iterate with lax.scan / "
                   "lax.fori_loop) so XLA fuses the small ops into a few kernels, and keep Python loops and dtype "
                   "changes inside the jitted function",
    Framework.TENSORFLOW_EAGER: "run the step as a graph: decorate it with tf.function (jit_compile=True to fuse "
                                "it with XLA) instead of executing op by op in eager mode",
    Framework.TENSORFLOW: "compile the step with tf.function(jit_compile=True) so XLA fuses the small ops",
    Framework.PYTORCH_XLA: "cut the graph once per step (torch_xla.sync() / xm.mark_step() at the end of the step "
                           "only) and avoid tensor-to-Python calls (.item(), printing) that force a graph per op",
    Framework.UNKNOWN: "compile the whole step as one program (jax.jit, tf.function(jit_compile=True) or "
                       "torch.compile) so the compiler fuses the small ops into a few kernels",
}


def one_program_fix(framework: Framework, on_gpu: bool) -> str:
    """How to turn a step executed op by op into one compiled program."""
    fix = _ONE_PROGRAM[framework][0].upper() + _ONE_PROGRAM[framework][1:] + "."
    if on_gpu:
        fix += (" On GPU, what stays a sequence of small kernels launches cheaper as a CUDA/HIP graph (XLA's "
                "command buffers, --xla_gpu_enable_command_buffer, on by default in recent JAX).")
    return fix


def host_work_fix(framework: Framework, input_pipeline: bool) -> str:
    """How to take the host work that keeps the devices waiting off their critical path."""
    tensorflow = framework in (Framework.TENSORFLOW, Framework.TENSORFLOW_EAGER)
    if tensorflow and input_pipeline:
        return ("Make the tf.data pipeline keep ahead of the step: .prefetch(tf.data.AUTOTUNE) at its end, "
                "num_parallel_calls=tf.data.AUTOTUNE in map, .cache() after expensive decoding, and "
                "experimental_distribute_dataset to prefetch to the devices.")
    if tensorflow:
        return ("The step waits on the host's own op scheduling, not on input: compile it with "
                "tf.function(jit_compile=True) so the host launches a few fused programs instead of many ops, and "
                "look at the host threads between device runs for synchronisations (.numpy(), summaries, "
                "host-side ops).")
    if framework is Framework.PYTORCH_XLA:
        return ("Load batches ahead of the step with torch_xla's MpDeviceLoader (parallel_loader), and keep "
                "tensor-to-Python reads (.item(), printing) and checkpointing out of the step.")
    pipeline = ("a prefetching input pipeline (grain or tf.data with prefetch) or a background thread"
                if input_pipeline else "a background thread that prepares the next batch")
    return (f"Take the host work off the training thread and run it ahead of the device: {pipeline}, "
            "jax.device_put the next batch while the current step runs, and move logging, checkpointing, sleeps "
            "and device-to-host reads (.item(), np.asarray, block_until_ready) out of the loop.")
