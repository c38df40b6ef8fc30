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
COMPILE = re.compile(r"^(backend_compile|lower_sharding_computation|jax_compile|pjit_compile)")
ALLOCATOR_EVENTS = frozenset({"MemoryAllocation", "MemoryDeallocation"})
WAITING = re.compile(r"block_until_ready|Await|Wait for|BufferSequencingEvent|ThenExecuteCallback|Synchronize",
                     re.IGNORECASE)
# Python waiting for another thread (the Python tracer's frames): a queue's get, a condition's or a thread's wait.
THREAD_WAIT = re.compile(r"\bqueue\.py:\d+ get\b|\bthreading\.py:\d+ (wait|join)\b")
# Collectives in XLA's spelling (all-gather), JAX's (all_gather, psum_invariant), NCCL/RCCL kernels, and the
# waits for the other devices to arrive.
COMMUNICATION = re.compile(
    r"all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|collective[-_]?permute|\bsend\b|"
    r"\brecv\b|nccl|rccl|psum|pmax|pmin|ppermute|rendezvous",
    re.IGNORECASE,
)
# The XLA CPU client's run of a program on one of its devices ("[3] CommonPjRtLoadedExecutable::Execute (jit_f)").
CPU_DEVICE_EXECUTION = re.compile(r"^\[(\d+)\] \S*LoadedExecutable::Execute\b")
# Copies between host and device memory, as the host calls them or a device records them: CUDA's MemcpyHtoD,
# ROCm's CopyHostToDevice and hipMemcpyHtoDAsync, JAX's device_put. (The XLA CPU client's "H2D Dispatch" is not
# one: a CPU device's memory is the host's.)
HOST_TRANSFER = re.compile(
    r"memcpy\s*(h\s*to\s*d|d\s*to\s*h|h2d|d2h)|copy\s*(host\s*to\s*device|device\s*to\s*host)|"
    r"DevicePut|device_put|TransferToDevice|TransferFromDevice|TransferLiteral|ToLiteral|BufferFromPyval",
    re.IGNORECASE,
)
HOST_MEMORY_SPACE = "S(5)"  # XLA's memory space of host memory, in a shape's layout
ASYNC_COPY = re.compile(r"^copy-(start|done)\b")  # XLA's asynchronous copy, to or from host memory where S(5)
# A Python tracer event of a builtin or C function ("$time sleep", "$<unknown> astype"), not of a Python function
# ("$train.py:12 load_batch"): its time is its caller's.
PYTHON_BUILTIN = re.compile(r"^\$(?!\S+\.py:\d+ )")
# Ops that move or re-type data rather than compute.
FAMILIES = {
    "converts": re.compile(r"convert", re.IGNORECASE),
    "copies": re.compile(r"(?<![a-z])copy", re.IGNORECASE),
    "reshapes": re.compile(r"reshape|transpose|bitcast", re.IGNORECASE),
}
# Events on XLA CPU threads that are runtime bookkeeping rather than work, or not an op.
NOT_BUSY = ("ThreadpoolListener", "end: ")
NOT_AN_OP = (*NOT_BUSY, "ThunkExecutor", "H2D Dispatch", "Wait for ", "Wait: ")
# Runtime scopes on XLA CPU threads (a device's kernels are named by the compiler and never look like these).
CPU_RUNTIME_SCOPE = re.compile(r"^(\[\d+\] )?[A-Za-z]\w*::\w")

_MODULE_ID = re.compile(r"(\.\d+)?\(\d+\)$")  # "jit_step(26)", "jit_f.1(1219...)": the id XLA appends
_HLO_TEXT_NAME = re.compile(r"^%?([^\s=]+)\s*=")  # "%fusion.3 = f32[...] fusion(...)": a TPU op's HLO text


def program_base(name: str) -> str:
    """A program's name without XLA's id; a jit dispatch ``PjitFunction(step)`` names program ``jit_step``."""
    if name.startswith(DISPATCH_PREFIX):
        return f"jit_{name[len(DISPATCH_PREFIX):-1]}"
    return _MODULE_ID.sub("", name)


def hlo_instruction(op: OpTime) -> str:
    """The HLO instruction an op runs: the GPU trace's hlo_op, the name in a TPU op's HLO text, else its name."""
    if match := _HLO_TEXT_NAME.match(op.expression):
        return match.group(1)
    return op.expression or op.name.removesuffix(".kd")
