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
from dataclasses import dataclass
from enum import StrEnum

from mldiag.analysis.host_evidence import HostEvidence
from mldiag.analysis.rules.host_causes import HostCause, function_name


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
        found += [a.name for a in (*host.host_activities, *host.between_steps, *host.dispatched, *host.while_waiting,
                                   *host.transfers)]
        found += [owner.name for a in (*host.host_activities, *host.between_steps) for owner in a.owners]
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

_ONE_FUNCTION = {
    Framework.JAX: "jit the function the dispatches come from (named in the evidence) with jax.jit, so that its "
                   "operations run as one program",
    Framework.UNKNOWN: "compile the function the dispatches come from (named in the evidence) as one program",
}


def one_program_fix(framework: Framework, on_gpu: bool, named_function: bool = False) -> str:
    """How to turn a step executed op by op into one compiled program; first the function the operations come
    from when the evidence names it."""
    fix = _ONE_PROGRAM[framework]
    if named_function:
        fix = f"{_ONE_FUNCTION.get(framework, _ONE_FUNCTION[Framework.UNKNOWN])}, or {fix}"
    fix = fix[0].upper() + fix[1:] + "."
    if on_gpu:
        fix += (" On GPU, what stays a sequence of small kernels launches cheaper as a CUDA/HIP graph (XLA's "
                "command buffers, --xla_gpu_enable_command_buffer, on by default in recent JAX).")
    return fix


@dataclass(frozen=True)
class FrameworkFix:
    """One fix in the words of each framework: TensorFlow (graph or eager), PyTorch/XLA, and JAX, which is also
    the advice where the framework is not told apart."""

    tensorflow: str
    pytorch_xla: str
    jax: str

    @classmethod
    def same(cls, words: str) -> FrameworkFix:
        """A fix whose words no framework changes."""
        return cls(tensorflow=words, pytorch_xla=words, jax=words)

    def worded_for(self, framework: Framework) -> str:
        if framework in (Framework.TENSORFLOW, Framework.TENSORFLOW_EAGER):
            return self.tensorflow
        return self.pytorch_xla if framework is Framework.PYTORCH_XLA else self.jax


def batched_calls_fix(framework: Framework) -> str:
    """How to turn many calls of one small compiled function per step (one per example) into one call."""
    return _BATCHED_CALLS.worded_for(framework)


_BATCHED_CALLS = FrameworkFix(
    jax="Call the function once per step on all the items: stack them into one batch and map it over them inside "
        "one jitted call (jax.vmap for independent examples; lax.map or lax.scan where each depends on the last), "
        "so that one launch does the work of all of them and the device sees a batch large enough to keep it busy.",
    tensorflow="Call the tf.function once per step on all the items: batch them (tf.stack, or dataset.batch) and "
               "let the function take the batch, or map over them inside it with tf.vectorized_map, so that one "
               "call does the work of all of them.",
    pytorch_xla="Run the model once per step on all the items: batch them (torch.stack) or map over them with "
                "torch.vmap inside one graph, so that one launch does the work of all of them.",
)


def more_work_per_launch_fix(framework: Framework, many_arrays: bool = False) -> str:
    """How to give each launch of a small program more work, so that its cost is paid less often; with
    ``many_arrays`` (a program taking many arrays), first how to hand it fewer."""
    more_work = _MORE_WORK_PER_LAUNCH.worded_for(framework)
    return f"{_FEWER_ARRAYS.worded_for(framework)} Then: {more_work}" if many_arrays else more_work


_FEWER_ARRAYS = FrameworkFix(
    jax="Hand each launch fewer, larger arrays: keep parameters of the same shape stacked in one array (one per "
        "kind of layer, with lax.scan over the layers; per-feature scales and biases as rows of one matrix), or "
        "pass one flat vector (jax.flatten_util.ravel_pytree) and unravel it inside the jitted function; donate "
        "them (donate_argnums) so the update writes in place.",
    tensorflow="Hand each tf.function call fewer, larger tensors: concatenate same-shaped variables into one and "
               "slice inside the function, or keep the state as tf.Variables the function reads rather than "
               "arguments.",
    pytorch_xla="Hand each graph fewer, larger tensors: keep same-shaped parameters in one tensor (torch.stack, "
                "a fused parameter buffer) and index it inside the model.",
)


_MORE_WORK_PER_LAUNCH = FrameworkFix(
    jax="Give each launch more work: run several steps in one jitted call (lax.scan or lax.fori_loop over a stack "
        "of batches, carrying the parameters and optimizer state), or train on larger batches; keep the parameters "
        "in fewer, larger arrays (stack the layers' weights and scan over the layers, or "
        "jax.flatten_util.ravel_pytree), since every array is flattened and handed over at each launch; and read "
        "results back (float(loss), block_until_ready) every N steps, not every step, so that launches queue ahead "
        "of the device instead of each waiting for the last.",
    tensorflow="Give each launch more work: run several steps per tf.function call (Keras steps_per_execution, or a "
               "loop over several batches inside the tf.function), train on larger batches, and read metrics back "
               "(.numpy()) every N steps, not every step.",
    pytorch_xla="Give each graph more work: train on larger batches or run several steps per graph "
                "(torch_xla.sync() / xm.mark_step() every N steps), and read values back (.item(), printing) every "
                "N steps, not every step.",
)


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
    pipeline = ("an input pipeline that keeps ahead of the step (grain or tf.data with prefetch, and enough "
                "workers)" if input_pipeline else "a background thread that prepares the next batch")
    return (f"Take the host work off the training thread and run it ahead of the device: {pipeline}, "
            "jax.device_put the next batch while the current step runs, and move logging, checkpointing, sleeps "
            "and device-to-host reads (.item(), np.asarray, block_until_ready) out of the loop.")


_CAUSE_FIXES = {
    HostCause.BATCH_MAKING: FrameworkFix(  # take the making of batches off the thread that runs the steps
        tensorflow="Build the batches in a tf.data pipeline instead of in the step: map the decoding and "
                   "augmentation with num_parallel_calls=tf.data.AUTOTUNE and end it with "
                   ".prefetch(tf.data.AUTOTUNE), so the next batch is ready when the step starts.",
        pytorch_xla="Make the batches in a torch.utils.data.DataLoader with num_workers > 0 (worker processes) and "
                    "wrap it in torch_xla's MpDeviceLoader, so batches are made and copied to the device ahead of "
                    "the step instead of inside it.",
        jax="Move the batch-making off the training thread into an input pipeline that runs ahead of the step: "
            "grain (a DataLoader with worker_count > 0) or tf.data with .prefetch, and copy the next batch to the "
            "device while the current step runs (jax.device_put ahead of time, or flax's prefetch_to_device)."),
    HostCause.CHECKPOINT: FrameworkFix(  # save checkpoints without stopping the steps
        tensorflow="Save asynchronously: tf.train.Checkpoint.write with "
                   "tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True), and save less often.",
        pytorch_xla="Save asynchronously with torch_xla's distributed checkpointing (CheckpointManager.save_async) "
                    "rather than xm.save in the loop, and save less often.",
        jax="Checkpoint asynchronously: orbax's CheckpointManager with enable_async_checkpointing (or "
            "AsyncCheckpointer) copies the state off the device and writes it in the background while the steps "
            "go on; save less often."),
    HostCause.DEVICE_SYNC: FrameworkFix(  # stop reading device values back (and logging them) on every step
        tensorflow="Read metrics back every N steps, not every step: keep them in tf.keras.metrics or "
                   "tf.Variables on the device, call .numpy() / write summaries every N steps, and log from a "
                   "background writer.",
        pytorch_xla="Stop reading tensors back every step: no .item() or printing in the step; log every N steps, "
                    "or through xm.add_step_closure so the read happens after the step's graph is launched.",
        jax="Sync with the device every N steps, not every step: keep the metrics as device arrays, read them "
            "back (float(), .item(), jax.device_get) every N steps or for the previous step only, and format and "
            "write the log line on a background thread (or with jax.debug.callback / an async logger), so the "
            "host never stops the next step's dispatch to wait for and print this one."),
    HostCause.LOGGING: FrameworkFix(  # log less often, and off the thread that runs the steps
        tensorflow="Log less often and off the training thread: write summaries every N steps "
                   "(tf.summary.record_if, or a Keras callback's update_freq), hand records to a background writer "
                   "(Python's logging.handlers.QueueHandler with a QueueListener), and log aggregates, not every "
                   "value.",
        pytorch_xla="Log less often and off the training thread: write the record every N steps, hand it to a "
                    "background writer (logging.handlers.QueueHandler with a QueueListener, or a writer thread), "
                    "and log aggregates, not every value.",
        jax="Log less often and off the training thread: write the record every N steps, hand it to a background "
            "writer (logging.handlers.QueueHandler with a QueueListener, or a thread reading a queue) so the loop "
            "only enqueues it, and log aggregates (a mean, a histogram) rather than every value, in a cheap "
            "encoding."),
    HostCause.CONSUMER_THREAD: FrameworkFix.same(  # never block the steps on their output's hand-over
        "Never let the training thread block on handing over its output: put without waiting (put_nowait, "
        "dropping or aggregating records while the queue is full) or into an unbounded queue, send records in "
        "batches (one call every N steps), and make the slow side faster (an asynchronous client, several sender "
        "threads, or write locally and ship the file in the background)."),
    HostCause.INTERPRETER_LOCK: FrameworkFix(  # give the other Python work an interpreter of its own
        tensorflow="Give that Python work an interpreter of its own: run it in another process (multiprocessing, "
                   "a ProcessPoolExecutor) or inside the tf.data pipeline as TensorFlow ops (tf.py_function keeps "
                   "it on the interpreter), or make it let go of the interpreter (numpy, a C++ or Rust library such "
                   "as the tokenizers package); otherwise run it before or after training rather than beside it.",
        pytorch_xla="Give that Python work an interpreter of its own: a DataLoader with num_workers > 0 (worker "
                    "processes), multiprocessing or a ProcessPoolExecutor, or make it let go of the interpreter "
                    "(numpy, a C++ or Rust library such as the tokenizers package); otherwise run it before or "
                    "after training rather than beside it.",
        jax="Give that Python work an interpreter of its own: run it in another process (multiprocessing, a "
            "ProcessPoolExecutor, grain with worker_count > 0), or make it let go of the interpreter (numpy on whole "
            "arrays, a C++ or Rust library such as the tokenizers package); otherwise run it before or after "
            "training rather than beside it. Threads do not help here: only one runs Python at a time, and a "
            "shorter sys.setswitchinterval only moves the wait."),
    HostCause.ROUND_TRIP: FrameworkFix(  # compute where the values are: on the device
        tensorflow="Compute it on the device, inside the tf.function (tf.random.categorical for sampling, tf ops "
                   "for the statistics), so the values never leave the device; where the host must see them, read "
                   "them back every N steps.",
        pytorch_xla="Compute it on the XLA device with torch ops inside the step (torch.multinomial for "
                    "sampling), so the tensors never go to the CPU; where the host must see them, read them back "
                    "every N steps.",
        jax="Compute it on the device, inside the jitted step (jnp, jax.random.categorical for sampling, optax "
            "for an optimizer's update), so the values never leave the device and the host only launches steps; "
            "where the host must see them, read them back every N steps."),
    HostCause.HOST_RANDOM: FrameworkFix(  # draw the step's random numbers on the device
        jax="Draw the random numbers inside the jitted step with jax.random: pass a key (jax.random.fold_in(key, "
            "step), or split one each step) and call jax.random.bernoulli for dropout masks, jax.random.normal or "
            "uniform for noise, so nothing is drawn on the host or copied to the device; flax's nn.Dropout does this "
            "with its 'dropout' rng.",
        tensorflow="Draw the random numbers inside the tf.function with tf.random.stateless_* ops (or a "
                   "tf.random.Generator) instead of numpy, so they are made on the device; Keras's Dropout layer "
                   "does this for masks.",
        pytorch_xla="Draw the random numbers on the XLA device (torch.rand(..., device=xla_device), "
                    "torch.nn.functional.dropout) instead of numpy, so they are part of the graph and nothing is "
                    "copied in.",
    ),
    HostCause.UNTRACED: FrameworkFix(  # name the untraced time before moving it
        tensorflow="Name the time first: capture again with the Python tracer on "
                   "(tf.profiler.experimental.ProfilerOptions(python_tracer_level=1)) or wrap the loop's parts in "
                   "tf.profiler.experimental.Trace scopes. Untraced time on the training thread is usually input "
                   "work (loading, decoding, tokenising in Python): once named, move it into a tf.data pipeline "
                   "with num_parallel_calls and .prefetch(tf.data.AUTOTUNE).",
        pytorch_xla="Name the time first: capture again with the Python tracer on (python_tracer_level=1) or wrap "
                    "the loop's parts in torch_xla.debug.profiler.Trace scopes. Untraced time on the training "
                    "thread is usually input work (loading, decoding, tokenising in Python): once named, move it "
                    "into a DataLoader with num_workers > 0 wrapped in MpDeviceLoader.",
        jax="Name the time first: capture again with the Python tracer on (jax.profiler.ProfileOptions "
            "python_tracer_level=1) or wrap the loop's parts in jax.profiler.TraceAnnotation scopes. Untraced time "
            "on the training thread is usually input work (loading, decoding, tokenising or padding batches in "
            "Python) or a wait on a loader or a copy the trace does not show: once named, move the work into an "
            "input pipeline that runs ahead of the step (grain or tf.data with prefetch) or out of the loop."),
    HostCause.TRANSFERS: FrameworkFix(  # stop copying data between host and device memory inside the step
        tensorflow="Keep the data on the device between steps: no .numpy() round trips in the loop; keep state in "
                   "tf.Variables updated inside the tf.function. Copy new input ahead of the step: end the tf.data "
                   "pipeline with .prefetch(tf.data.AUTOTUNE) and distribute it with "
                   "experimental_distribute_dataset, so the next batch is copied while the step runs, and send "
                   "smaller dtypes (bf16, uint8) to cast on the device.",
        pytorch_xla="Keep the tensors on the XLA device between steps: no .cpu() / .numpy() round trips in the "
                    "loop; move the data once and update it in place on the device. Copy new input ahead of the "
                    "step with torch_xla's MpDeviceLoader, which prefetches the batches to the device, instead of "
                    ".to(device) in the step, and send smaller dtypes (bf16, uint8) to cast on the device.",
        jax="Keep the data on the device: do not turn device arrays into numpy arrays (np.asarray, "
            "jax.device_get) and back (jnp.asarray, jax.device_put) between steps; update them inside the jitted "
            "step, and donate the buffers it replaces (donate_argnums) so no copy is made. Copy new input ahead "
            "of the step instead of copying and waiting in it: jax.device_put the next batch while the current "
            "step runs (on the thread that makes the batches, or a step ahead with flax's prefetch_to_device), "
            "put data that does not change on the device once, and send smaller dtypes (bf16, uint8) to cast on "
            "the device."),
}


def cause_fix(cause: HostCause, framework: Framework) -> str | None:
    """The fix of a host-side cause that names what to change, in the framework's words; None for the causes
    whose fix depends on more than the framework (a producer thread's work, unnamed host work)."""
    fix = _CAUSE_FIXES.get(cause)
    return fix.worded_for(framework) if fix else None


_READS = re.compile(r"read|open|load|fetch|download|recv|sleep|\bio\b|file|gcs|storage|get_object|request",
                    re.IGNORECASE)


# The threads of a pool of worker processes as the Python tracer sees them (multiprocessing's pipes and queues):
# the batches are made in processes the trace does not cover and reach this one pickled.
_WORKER_PROCESSES = re.compile(r"multiprocessing|\$connection\.py:|\$popen_\w+\.py:|\$pool\.py:|\$reduction\.py:")


def producer_fix(framework: Framework, doing: Iterable[str]) -> str:
    """How to speed up the thread that produces the batches, from what it spends its time on (the names the trace
    gives it, a Python-tracer frame with its file)."""
    doing = list(doing)
    if any(_WORKER_PROCESSES.search(name) for name in doing):
        return ("The batches come from worker processes the trace does not cover, pickled through pipes: the "
                "training thread waits for them. Make each batch cheaper to hand over (send smaller dtypes such as "
                "uint8 or bf16 and cast on the device; put the arrays in shared memory, as grain's and PyTorch's "
                "loaders do, instead of pickling them), add worker processes until they keep ahead of the step, "
                "and profile a worker on its own to see what it spends its time on.")
    reads = any(_READS.search(function_name(name)) for name in doing)
    workers = {
        Framework.TENSORFLOW: "num_parallel_calls=tf.data.AUTOTUNE in map and interleave",
        Framework.TENSORFLOW_EAGER: "num_parallel_calls=tf.data.AUTOTUNE in map and interleave",
        Framework.PYTORCH_XLA: "more DataLoader worker processes (num_workers)",
    }.get(framework, "more worker processes (grain's worker_count, or tf.data's num_parallel_calls)")
    if reads:
        return (f"The loader producing the batches is slower than the step. Most of its time goes to reading: "
                f"read in parallel ({workers}, several files at once), read from faster or local storage, cache "
                "what is read every epoch, and prefetch more batches ahead.")
    return (f"The loader producing the batches is slower than the step. Most of its time goes to computing "
            f"(decoding, augmenting): spread it over {workers}, since one Python thread runs on one core; "
            "vectorise or cache the decoding, and prefetch more batches ahead.")
