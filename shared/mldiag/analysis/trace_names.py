"""The trace event names that mean something to the analysis.

XProf's trace viewer shows these as plain event names; the raw-event reader
and the analyst both need to know which ones are jit dispatches, compilation,
allocator bookkeeping, waiting on the device, collectives, or data-moving ops.
"""

from __future__ import annotations

import re

DISPATCH_PREFIX = "PjitFunction("  # JAX's C++ jit dispatch, one per program launch from Python
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
# The stepping thread waiting on another host thread (a queue's get, a lock, an event), as the Python tracer
# names the frames.
THREAD_WAITING = re.compile(r"\bqueue\.py:\d+ get$|\bthreading\.py:\d+ (wait|join)$|\$_thread \w*lock|"
                            r"\$<unknown> acquire$|\bconcurrent/futures/_base\.py:\d+ result$")
# Copies between host and device memory as the host records them: JAX's device_put (DevicePut), jnp.asarray of a
# numpy array (the jitted ``stage``), reads back (np.asarray of a jax.Array, copy_to_host_async), the runtimes'
# copies (PJRT, TensorFlow's and the CUDA/HIP memcpys).
TRANSFER = re.compile(r"^(DevicePut|PjitFunction\(stage\)|np\.asarray\(jax\.Array\)|\S*copy_to_host_async|"
                      r"batched_copy_array_to_devices|\S*Transfer\w*(To|From)(Device|Host)|\S*BufferFromHost|"
                      r"\S*CopyToDevice|\S*CopyRawToHost|\S*ToLiteral|Memcpy[HD]2[HD]|"
                      r"(cu|hip)Memcpy(HtoD|DtoH))")
# Reading a device value back on the host, which waits for the computation that makes it.
DEVICE_READ = re.compile(r"np\.asarray\(jax\.Array\)|block_until_ready|\bdevice_get$|copy_to_host_async|"
                         r"array\.py:\d+ (__float__|__int__|__bool__|item|tolist|__array__|__format__)$|"
                         r"\bMemcpyD2H|(cu|hip)MemcpyDtoH|TransferFromDevice|TransferToHost|_numpy$|\bitem$")
# The host runtime's work on a copy between host and device memory, on its own threads: PJRT's relayout of a
# buffer to or from the device's tiled layout (a TPU's Transpose plans), and the TPU runtime's transfers.
TRANSFER_WORK = re.compile(r"^(Transpose::Execute|ParallelTranspose$|tpu::System::Transfer(To|From)Device)")
