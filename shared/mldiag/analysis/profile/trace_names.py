"""The trace event names that mean something to the analysis.

XProf's trace viewer shows these as plain event names; the raw-event reader
and the analyst both need to know which ones are jit dispatches, compilation,
allocator bookkeeping, waiting on the device, collectives, or data-moving ops.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mldiag.analysis.host_evidence import OpTime

DISPATCH_PREFIX = "PjitFunction("  # JAX's C++ jit dispatch, one per program launch from Python
# Launching a compiled program from the host: JAX's jit dispatch and the PjRt clients' executes.
DISPATCH = re.compile(r"^PjitFunction\(|LoadedExecutable::Execute|EnqueueExecution")
# The runtime's notice, on a host thread, that a launched program has completed on the device (the TPU runtime's
# completion callback): where the host's clock says a program ended, whatever the device's clock says.
PROGRAM_DONE = re.compile(r"::Execute=>Done$")
COMPILE = re.compile(r"^(backend_compile|lower_sharding_computation|jax_compile|pjit_compile)")
ALLOCATOR_EVENTS = frozenset({"MemoryAllocation", "MemoryDeallocation"})
WAITING = re.compile(r"block_until_ready|Await|Wait for|BufferSequencingEvent|ThenExecuteCallback|Synchronize",
                     re.IGNORECASE)
# Collectives in XLA's spelling (all-gather), JAX's (all_gather, psum_invariant), NCCL/RCCL kernels, and the
# waits for the other devices to arrive.
COMMUNICATION = re.compile(
    r"all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|collective[-_]?permute|\bsend\b|"
    r"\brecv\b|nccl|rccl|psum|pmax|pmin|ppermute|rendezvous",
    re.IGNORECASE,
)
# The XLA CPU client's run of a program on one of its devices ("[3] CommonPjRtLoadedExecutable::Execute (jit_f)").
CPU_DEVICE_EXECUTION = re.compile(r"^\[(\d+)\] \S*LoadedExecutable::Execute\b")
# A host callback (jax.pure_callback, io_callback, debug.callback): on TPU its send and recv to the host carry
# is_host_transfer=true in their HLO text; on CPU and GPU it is a custom call into Python. Not a collective.
HOST_CALLBACK = re.compile(r"is_host_transfer=true|xla_(ffi_)?python_\w*callback|\b(pure|io)_callback\b",
                           re.IGNORECASE)
HOST_CALLBACK_PART = "host callback"  # the attribution's name for a device's time in them
HOST_MEMORY_SPACE = "S(5)"  # XLA's memory space of host memory, in a shape's layout
ASYNC_COPY = re.compile(r"^copy-(start|done)\b")  # XLA's asynchronous copy, to or from host memory where S(5)
# A Python tracer event of a builtin or C function ("$time sleep", "$<unknown> astype"), not of a Python function
# ("$train.py:12 load_batch"): its time is its caller's.
PYTHON_BUILTIN = re.compile(r"^\$(?!\S+\.py:\d+ )")
PYTHON_FUNCTION = re.compile(r"^\$\S+\.py:\d+ ")
# Ops that move or re-type data rather than compute. A fusion named after a gather or scatter too (XLA CPU's
# "copy_gather_fusion") spends its time on that look-up, not on the copy fused into it.
FAMILIES = {
    "converts": re.compile(r"convert", re.IGNORECASE),
    "copies": re.compile(r"^(?!.*(?:gather|scatter)).*(?<![a-z])copy", re.IGNORECASE),
    "reshapes": re.compile(r"reshape|transpose|bitcast", re.IGNORECASE),
}
# Events on XLA CPU threads that are runtime bookkeeping rather than work, or not an op.
NOT_BUSY = ("ThreadpoolListener", "end: ")
NOT_AN_OP = (*NOT_BUSY, "ThunkExecutor", "Wait for ", "Wait: ")
# The XLA CPU client's copy of a host array into a device buffer of its own (jax.device_put, a numpy argument), on
# the thread that runs the device's programs: an op of that device that moves data in.
CPU_HOST_TO_DEVICE = "H2D Dispatch"
# Runtime scopes on XLA CPU threads (a device's kernels are named by the compiler and never look like these).
CPU_RUNTIME_SCOPE = re.compile(r"^(\[\d+\] )?[A-Za-z]\w*::\w")
# The stepping thread waiting on another host thread (a queue's get, a lock, an event), as the Python tracer
# names the frames.
THREAD_WAITING = re.compile(r"\bqueue\.py:\d+ get$|\bthreading\.py:\d+ (wait|join)$|\$_thread \w*lock|"
                            r"\$<unknown> acquire$|\bconcurrent/futures/_base\.py:\d+ result$")
# A thread handing work to another through a queue (Python's queue and multiprocessing's, as the tracer names them).
QUEUE_PUT = re.compile(r"\bqueues?\.py:\d+ put(_nowait)?$")
# A thread taking work from another through a queue.
QUEUE_GET = re.compile(r"\bqueues?\.py:\d+ get(_nowait)?$")
# Saving state (a checkpoint), as a function, its module or a library's scope names it (not a lock's
# Condition._release_save, which every waiting thread runs).
SAVING = re.compile(r"checkpoint|ckpt|\bsave|(?<!_release)_save|save_|snapshot|orbax|serializ|pickle|torch\.save",
                    re.IGNORECASE)
# Copies between host and device memory as the host or a device records them: JAX's device_put (DevicePut, and
# shard_args, its placement of host arrays on devices), jnp.asarray of a numpy array (the jitted ``stage``), reads
# back (np.asarray of a jax.Array, copy_to_host_async), the runtimes' copies (PJRT, TensorFlow's, CUDA's
# MemcpyHtoD, ROCm's CopyHostToDevice and hipMemcpyHtoDAsync, the XLA CPU client's CPU_HOST_TO_DEVICE).
TRANSFER = re.compile(r"^(DevicePut|shard_args$|PjitFunction\(stage\)|np\.asarray\(jax\.Array\)|\S*copy_to_host_async|"
                      rf"{CPU_HOST_TO_DEVICE}|batched_copy_array_to_devices|\S*Transfer\w*(To|From)(Device|Host)|"
                      r"\S*BufferFromHost|"
                      r"\S*CopyToDevice|\S*CopyRawToHost|\S*ToLiteral|Memcpy[HD]2[HD]|"
                      r"(cu|hip)Memcpy(HtoD|DtoH))|"
                      r"(?i:memcpy\s*(h\s*to\s*d|d\s*to\s*h|h2d|d2h)|copy\s*(host\s*to\s*device|device\s*to\s*host)|"
                      r"device_put|TransferLiteral|BufferFromPyval)")
# Reading a device value back on the host, which waits for the computation that makes it.
DEVICE_READ = re.compile(r"np\.asarray\(jax\.Array\)|block_until_ready|\bdevice_get$|copy_to_host_async|"
                         r"array\.py:\d+ (__float__|__int__|__bool__|item|tolist|__array__|__format__)$|"
                         r"\bMemcpyD2H|(cu|hip)MemcpyDtoH|TransferFromDevice|TransferToHost|_numpy$|\bitem$")
_TO_HOST = re.compile(r"d\s*to\s*h|d2h|device\s*to\s*host|from[\s_]*device|to[\s_]*literal|to[\s_]*host|"
                      r"np\.asarray\(jax\.Array\)|device_get", re.IGNORECASE)
_TO_DEVICE = re.compile(r"h\s*to\s*d|h2d|host\s*to\s*device|to[\s_]*device|from[\s_]*host|device[\s_]*put|deviceput|"
                        r"PjitFunction\(stage\)|^shard_args$", re.IGNORECASE)


def collective(name: str) -> re.Match[str] | None:
    """What collective an event's name says it is (its :data:`COMMUNICATION` match); None for a host callback,
    whose send and recv to the host only look like one."""
    return None if HOST_CALLBACK.search(name) else COMMUNICATION.search(name)


def transfer_direction(name: str) -> str:
    """"device to host", "host to device", or "" where a copy's name does not say."""
    if _TO_HOST.search(name):
        return "device to host"
    return "host to device" if _TO_DEVICE.search(name) else ""


# An array's shape as XLA writes it ("f32[65536,1024]", "bf16[]"), as a copy's TraceMe names its buffer
# ("BufferFromHostBuffer(f32[65536,1024])"): the element type and the dimensions.
_SHAPE = re.compile(r"\b(pred|bf16|f8e\w+|[suf]\d+|c64|c128)\[([\d,]*)\]")
_ELEMENT_BITS = {"pred": 8, "c64": 64, "c128": 128, "bf16": 16}


def shape_bytes(name: str) -> int:
    """The bytes of the arrays whose shapes an event's name writes out, summed (0 where it writes none)."""
    total = 0
    for element, dimensions in _SHAPE.findall(name):
        bits = _ELEMENT_BITS.get(element) or (8 if element.startswith("f8") else int(element[1:]))
        count = 1
        for dimension in filter(None, dimensions.split(",")):
            count *= int(dimension)
        total += count * bits // 8
    return total


# The host runtime's work on a copy between host and device memory, on its own threads: PJRT's relayout of a
# buffer to or from the device's tiled layout (a TPU's Transpose plans), and the TPU runtime's transfers.
TRANSFER_WORK = re.compile(r"^(Transpose::Execute|ParallelTranspose$|tpu::System::Transfer(To|From)Device)")

_MODULE_ID = re.compile(r"(\.\d+)?\(\d+\)$")  # "jit_step(26)", "jit_f.1(1219...)": the id XLA appends
_NOT_IN_MODULE_NAMES = re.compile(r"[^\w.-]")
_HLO_TEXT_NAME = re.compile(r"^%?([^\s=]+)\s*=")  # "%fusion.3 = f32[...] fusion(...)": a TPU op's HLO text


def program_base(name: str) -> str:
    """A program's name without XLA's id; a jit dispatch ``PjitFunction(step)`` names program ``jit_step``, as JAX
    spells it (``PjitFunction(<lambda>)``: ``jit__lambda``: characters a module name cannot hold become ``_``,
    and XLA drops the trailing ones)."""
    if name.startswith(DISPATCH_PREFIX):
        return _NOT_IN_MODULE_NAMES.sub("_", f"jit_{name[len(DISPATCH_PREFIX):-1]}").rstrip("_")
    return _MODULE_ID.sub("", name).rstrip("_")


def hlo_instruction(op: OpTime) -> str:
    """The HLO instruction an op runs: the GPU trace's hlo_op, the name in a TPU op's HLO text, else its name."""
    if match := _HLO_TEXT_NAME.match(op.expression):
        return match.group(1)
    return op.expression or op.name.removesuffix(".kd")
