#!/usr/bin/env python3
"""Make TPU fixtures: training and inference shapes traced with ``jax.profiler.trace``, each timing itself.

Every shape is a small loop of tens of iterations with a known cause of lost
time (or none). It runs in its own process (a trace's metadata carries the HLO of
every executable alive in the process), is traced with the host tracer at level 2
(the Python tracer only where the cause is a Python function or thread), and
times itself by the wall clock: each iteration, and each named part of it
(``time.perf_counter`` around it, ``block_until_ready`` inside). Ablations run
after the trace, untraced: the same loop without its cause (data resident, no
save, a jitted twin, another dtype or precision, a sync every 10 steps).
Compilations inside the trace are counted and timed by a ``jax.monitoring``
listener; FLOPs, bytes and memory come from the compiled programs'
``cost_analysis()`` and ``memory_analysis()``.

The profile goes where JAX, XProf and the bucket put it, under a fixed host name::

    <out>/<shape>/plugins/profile/<shape>/fixture-host.xplane.pb

and the truth of every shape into one JSON file (``--truth``), shape -> ``meta``
(device kind, JAX version, profile size) and ``truth`` (each number with its
tolerance and how it was measured). ``--expectations DIR`` writes those truths
into the quality harness's expectation files ``<prefix><shape>.yaml``, keeping
what people wrote above the truth block.

On a TPU the sizes are the chip's (one TPU v5e, 15.7 GiB of HBM); anywhere else
(``--platform cpu``) the same loops run small, for the CPU twins::

    python scripts/make_tpu_fixtures.py --out /tmp/tpu/profiles --truth /tmp/tpu/truth.json --pack $OUT
    python scripts/make_tpu_fixtures.py --platform cpu --only decode_memory_bound --out DIR --truth DIR/truth.json
    python scripts/make_tpu_fixtures.py --write-expectations truth.json --profiles tests/fixtures/profiles/tpu_v5e \\
        --prefix tpu_v5e_

The chip's machine has no TCP sockets: the profiler runs in process (``jax.profiler.trace``), never as a server.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from make_profile_fixtures import HOST, STEP_NAME, CompileCounter, _number, text_above_truth  # noqa: E402
from measure_device_trace import measure  # noqa: E402

MAX_XPLANE_BYTES = 2_000_000  # the LM's is over it: its program's HLO alone, in the metadata, is about 1.6 MB
PACK_BYTES = 12_000_000  # each archive under --pack stays below what one file back from the chip's machine may be
CLOCK = "time.perf_counter in make_tpu_fixtures.py, block_until_ready inside"
# Public datasheet peaks (cloud.google.com/tpu/docs/v5e): 197 TFLOP/s bf16, 819 GB/s HBM per chip.
PEAKS = {"TPU v5 lite": {"bf16_flops_per_s": 197e12, "hbm_bytes_per_s": 819e9}}
TRUTH_MARKER = "# The truth below is written by scripts/make_tpu_fixtures.py: regenerate it, do not edit it.\n"


# --- timing -----------------------------------------------------------------------------------


class CompileClock(CompileCounter):
    """Counts and times XLA backend compilations while ``counting`` is set."""

    def __init__(self) -> None:
        self.ms = 0.0
        super().__init__()

    def _record(self, event: str, duration: float, **kwargs) -> None:
        if self.counting and event == self.EVENT:
            self.count += 1
            self.ms += duration * 1e3


class Clock:
    """Wall-clock milliseconds of each iteration, of named parts of it, and of calls on other threads; after the
    trace, the device's op time per iteration measured from it (None without a device plane)."""

    def __init__(self) -> None:
        self.device_op_ms: float | None = None
        self.iterations: list[float] = []
        self.parts: dict[str, list[float]] = defaultdict(list)  # per iteration, 0 where the part did not run
        self.calls: dict[str, list[float]] = defaultdict(list)  # per call, from any thread
        self._current: dict[str, float] = {}

    @contextlib.contextmanager
    def part(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self._current[name] = self._current.get(name, 0.0) + (time.perf_counter() - started) * 1e3

    def call(self, name: str, ms: float) -> None:
        self.calls[name].append(ms)

    def run(self, index: int, iteration: Callable[[int, Clock], None], annotate: bool) -> None:
        import jax.profiler

        self._current = {}
        marker = jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=index) if annotate else contextlib.nullcontext()
        started = time.perf_counter()
        with marker:
            iteration(index, self)
        self.iterations.append((time.perf_counter() - started) * 1e3)
        for name in set(self.parts) | set(self._current):
            self.parts[name] += [0.0] * (len(self.iterations) - 1 - len(self.parts[name]))
            self.parts[name].append(self._current.get(name, 0.0))


# --- the shapes -------------------------------------------------------------------------------


@dataclass
class Workload:
    """One shape's loop: ``iteration(i, clock)`` blocks until its result is ready.

    ``ablations`` are other versions of the iteration, timed untraced after the trace;
    ``extra(clock, ablations)`` adds the shape's own truth (FLOPs, bytes, memory).
    """

    iteration: Callable[[int, Clock], None]
    ablations: dict[str, Callable[[int, Clock], None]] = field(default_factory=dict)
    extra: Callable[[Clock, dict[str, Clock]], dict] | None = None
    stop: Callable[[], None] | None = None


@dataclass
class Shape:
    build: Callable[[bool], Workload]  # big: the chip's sizes, else the CPU twin's
    steps: int
    description: str
    annotate: bool = True  # StepTraceAnnotation around each iteration; without, as under xprof()
    python_tracer: bool = False
    warm: bool = True  # one iteration before the trace, so the traced ones start compiled
    cause: str = ""  # what the loop loses its time to, in words, for the expectation file
    # With --platform cpu, XLA computes on one thread, as a chip runs one stream: the host's work beside it then
    # has a core of its own to overlap it on a small machine.
    one_cpu_compute_thread: bool = False


class OneThreadAtATime:
    """A background thread per version of a loop (the traced one, an ablation), one running at a time: a version's
    first iteration stops the others' threads and starts its own. ``start(version)`` starts one and returns the
    queue it shares with the loop and the event that stops it."""

    def __init__(self, start: Callable[..., tuple[queue.Queue, threading.Event]]) -> None:
        self._start = start
        self._running: dict[object, tuple[queue.Queue, threading.Event]] = {}

    def queue(self, version: object) -> queue.Queue:
        if version not in self._running:
            self.stop()
            self._running[version] = self._start(version)
        return self._running[version][0]

    def stop(self) -> None:
        for _, stopping in self._running.values():
            stopping.set()


def _put(batches: queue.Queue, batch, stopping: threading.Event) -> None:
    """Put ``batch`` when the queue has room, unless the thread is told to stop first."""
    while not stopping.is_set():
        with contextlib.suppress(queue.Full):
            batches.put(batch, timeout=0.1)
            return


def _read_ahead(produce: Callable[[int], object], every: int, ahead: int, name: str) -> OneThreadAtATime:
    """A thread per version of a loop, named ``name``, that puts ``produce(0)``, ``produce(every)``, ... into a
    queue of ``ahead`` items, for the loop to take them read ahead."""
    def start(version: object) -> tuple[queue.Queue, threading.Event]:
        items: queue.Queue = queue.Queue(maxsize=ahead)
        stopping = threading.Event()

        def produce_all() -> None:
            step = 0
            while not stopping.is_set():
                _put(items, produce(step), stopping)
                step += every

        threading.Thread(target=produce_all, daemon=True, name=name).start()
        return items, stopping

    return OneThreadAtATime(start)


def _fed_by_a_loader(loaders: OneThreadAtATime, clocks: dict, state: dict, train_step, y, folder: Path,
                     ablation: str) -> Workload:
    """A loop whose training thread takes each batch from a loader thread's queue (``loaders``' version True
    traced, False the ablation ``ablation``) and trains on it; its stop ends the loaders and removes ``folder``."""
    import jax

    def loop(traced: bool):
        def iteration(i: int, clock: Clock) -> None:
            clocks["clock"] = clock
            batches = loaders.queue(traced)
            with clock.part("wait_for_batch"):
                batch = batches.get()
            state["params"], value = train_step(state["params"], jax.device_put(batch), y)
            value.block_until_ready()

        return iteration

    def stop() -> None:
        loaders.stop()
        shutil.rmtree(folder, ignore_errors=True)

    return Workload(loop(True), ablations={ablation: loop(False)}, stop=stop)


def _normal(key, shape, dtype):
    import jax
    import numpy as np

    return (jax.random.normal(key, shape, dtype="float32") / np.sqrt(shape[0])).astype(dtype)


def _mlp_params(widths: list[int], dtype: str, seed: int = 0) -> list:
    import jax

    keys = jax.random.split(jax.random.key(seed), len(widths) - 1)
    return [_normal(k, (a, b), dtype) for k, a, b in zip(keys, widths[:-1], widths[1:])]


def mlp_loss(params, x, y):
    import jax
    import jax.numpy as jnp

    x = x.astype(params[0].dtype)  # the host's f32 batches are cast on the device
    for w in params[:-1]:
        x = jax.nn.relu(x @ w)
    return jnp.mean(((x @ params[-1]).astype("float32") - y) ** 2)


def sgd(loss):
    """A jit SGD train step ``(params, *batch) -> (params, loss)`` that donates the old parameters."""
    import jax

    def step(params, *batch):
        value, grads = jax.value_and_grad(loss)(params, *batch)
        return jax.tree.map(lambda p, g: (p - 1e-3 * g).astype(p.dtype), params, grads), value

    return jax.jit(step, donate_argnums=0)


def _training(state: dict, step, *batch, key: str = "params") -> Callable[[int, Clock], None]:
    """An iteration that updates ``state[key]`` with the train step ``step`` on ``batch`` and waits for its loss."""

    def iteration(i: int, clock: Clock) -> None:
        state[key], value = step(state[key], *batch)
        value.block_until_ready()

    return iteration


def _program_stats(jitted, *args) -> dict:
    """The compiled program's FLOPs, bytes accessed and memory, from XLA's own analyses."""
    compiled = jitted.lower(*args).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    memory = compiled.memory_analysis()
    peak = getattr(memory, "peak_memory_in_bytes", 0) or (
        memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes)
    return {"flops": cost.get("flops", 0.0), "bytes": cost.get("bytes accessed", 0.0), "peak_bytes": peak,
            "temp_bytes": memory.temp_size_in_bytes, "argument_bytes": memory.argument_size_in_bytes,
            "output_bytes": memory.output_size_in_bytes}


def _peaks() -> dict | None:
    import jax

    return PEAKS.get(jax.devices()[0].device_kind)


def _steady_ms(clock: Clock) -> float:
    return statistics.median(clock.iterations)


def _compute_truth(flops: float, ms: float, what: str) -> dict:
    """Achieved FLOP/s at ``ms`` per run, and its share of the chip's bf16 peak where the chip is known."""
    truth = {"flops_per_step": _number(flops, f"compiled {what}'s cost_analysis()['flops']", rel=0.01),
             "achieved_flops_per_s": _number(flops / (ms / 1e3), "flops_per_step / median iteration time", rel=0.1)}
    if peaks := _peaks():
        truth["mfu"] = _number(flops / (ms / 1e3) / peaks["bf16_flops_per_s"],
                               "flops_per_step / median iteration time / 197e12 (TPU v5e bf16 peak)", abs=0.03)
    return truth


def lm_train_bf16(big: bool) -> Workload:
    """A decoder-only transformer LM's training step in bf16, tokens resident on the device."""
    import jax
    import jax.numpy as jnp

    d, layers, heads, seq, batch, vocab = (1024, 4, 8, 512, 8, 16384) if big else (128, 2, 4, 64, 4, 512)
    keys = iter(jax.random.split(jax.random.key(0), 4 * layers + 2))
    params = {"embed": _normal(next(keys), (vocab, d), "bfloat16") * 16,
              "layers": [{"qkv": _normal(next(keys), (d, 3 * d), "bfloat16"),
                          "out": _normal(next(keys), (d, d), "bfloat16"),
                          "up": _normal(next(keys), (d, 4 * d), "bfloat16"),
                          "down": _normal(next(keys), (4 * d, d), "bfloat16")} for _ in range(layers)]}
    tokens = jax.random.randint(next(keys), (batch, seq + 1), 0, vocab)

    def norm(x):
        x32 = x.astype("float32")
        return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype("bfloat16")

    def loss(params, tokens):
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        x = params["embed"][inputs]
        mask = jnp.tril(jnp.ones((seq, seq), bool))
        for layer in params["layers"]:
            q, k, v = jnp.split((norm(x) @ layer["qkv"]).reshape(batch, seq, 3 * heads, d // heads), 3, axis=2)
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype("float32") / (d // heads) ** 0.5
            weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), -1).astype("bfloat16")
            x = x + jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, seq, d) @ layer["out"]
            x = x + jax.nn.gelu(norm(x) @ layer["up"]) @ layer["down"]
        logits = (norm(x) @ params["embed"].T).astype("float32")
        picked = jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits, -1) - picked)

    train_step = sgd(loss)
    stats = _program_stats(train_step, params, tokens)
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], tokens)
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {**_compute_truth(stats["flops"], _steady_ms(clock), "train step"),
                "tokens_per_step": _number(batch * seq, "batch x sequence length", abs=0)}

    return Workload(iteration, extra=extra)


def f32_highest_matmul(big: bool) -> Workload:
    """A chain of f32 matmuls at precision HIGHEST; ablations: the same chain in bf16, and at default precision."""
    import jax
    import jax.numpy as jnp

    n, links = (4096, 4) if big else (256, 4)

    def chain(precision):
        def run(x, ws):
            for w in ws:
                x = jnp.tanh(jnp.matmul(x, w, precision=precision))
            return x

        return jax.jit(run)

    def inputs(dtype):
        keys = jax.random.split(jax.random.key(1), links + 1)
        return _normal(keys[0], (n, n), dtype), [_normal(k, (n, n), dtype) for k in keys[1:]]

    highest, default = chain(jax.lax.Precision.HIGHEST), chain(None)
    x32, ws32 = inputs("float32")
    x16, ws16 = inputs("bfloat16")
    stats = _program_stats(highest, x32, ws32)

    def run(program, x, ws):
        return lambda i, clock: program(x, ws).block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        ms = _steady_ms(clock)
        return {**_compute_truth(stats["flops"], ms, "f32 HIGHEST chain"),
                "slowdown_vs_bf16": _number(ms / _steady_ms(ablations["bf16"]),
                                            "median iteration / the bf16 chain's median iteration", rel=0.15),
                "slowdown_vs_default_precision": _number(
                    ms / _steady_ms(ablations["default_precision"]),
                    "median iteration / the f32 chain's at default precision", rel=0.15)}

    return Workload(run(highest, x32, ws32), ablations={"bf16": run(default, x16, ws16),
                                                         "default_precision": run(default, x32, ws32)}, extra=extra)


def decode_memory_bound(big: bool) -> Workload:
    """Token-by-token decode: a small batch through large bf16 weights each step, the next step waiting on it."""
    import jax
    import jax.numpy as jnp

    d, hidden, layers, batch = (4096, 8192, 16, 8) if big else (256, 512, 4, 8)
    keys = jax.random.split(jax.random.key(2), 2 * layers + 1)
    weights = [(_normal(keys[2 * l], (d, hidden), "bfloat16"), _normal(keys[2 * l + 1], (hidden, d), "bfloat16"))
               for l in range(layers)]
    weight_bytes = sum(a.nbytes + b.nbytes for a, b in weights)

    @jax.jit
    def decode_step(weights, x):
        for up, down in weights:
            x = x + jax.nn.gelu(x @ up) @ down
        return x / jnp.linalg.norm(x.astype("float32"), axis=-1, keepdims=True).astype(x.dtype)

    stats = _program_stats(decode_step, weights, jnp.ones((batch, d), "bfloat16"))
    state = {"x": jnp.ones((batch, d), "bfloat16"), "wide": jnp.ones((batch * 8, d), "bfloat16")}

    def iteration(i: int, clock: Clock) -> None:
        state["x"] = decode_step(weights, state["x"]).block_until_ready()

    def wide(i: int, clock: Clock) -> None:
        state["wide"] = decode_step(weights, state["wide"]).block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        ms = _steady_ms(clock)
        truth = {"weight_bytes": _number(weight_bytes, "the weights' nbytes, read once per decode step", rel=0.01),
                 "bytes_per_step": _number(stats["bytes"], "compiled decode step's cost_analysis()['bytes accessed'] "
                                                           "(each fusion's operands, so above what HBM serves)",
                                           rel=0.05),
                 "achieved_bytes_per_s": _number(weight_bytes / (ms / 1e3),
                                                 "weight_bytes / median iteration time", rel=0.1),
                 "batch_x8_slowdown": _number(_steady_ms(ablations["batch_x8"]) / ms,
                                              "median iteration with 8x the batch / median iteration: near 1 when "
                                              "the weights' reads, not the math, set the time", rel=0.15),
                 **_compute_truth(stats["flops"], ms, "decode step")}
        if peaks := _peaks():
            truth["hbm_bandwidth_share"] = _number(weight_bytes / (ms / 1e3) / peaks["hbm_bytes_per_s"],
                                                   "achieved_bytes_per_s / 819e9 (TPU v5e HBM)", abs=0.05)
            if clock.device_op_ms:
                truth["device_hbm_bandwidth_share"] = _number(
                    weight_bytes / (clock.device_op_ms / 1e3) / peaks["hbm_bytes_per_s"],
                    "weight_bytes / device_op_ms / 819e9: the bandwidth while the chip runs ops", abs=0.05)
        return truth

    return Workload(iteration, ablations={"batch_x8": wide}, extra=extra)


def _mlp_step(big: bool, dtype: str = "bfloat16", widths=None, batch=None):
    """Parameters, a donated jit SGD step and a resident batch of an MLP of the platform's size."""
    import jax
    import jax.numpy as jnp

    widths = widths or ([1024, 4096, 4096, 1024] if big else [256, 512, 512, 256])
    batch = batch or (4096 if big else 256)
    params = _mlp_params(widths, dtype)
    x = jax.random.normal(jax.random.key(3), (batch, widths[0])).astype(dtype)
    y = jnp.zeros((batch, widths[-1]), "float32")
    return params, sgd(mlp_loss), x, y


def numpy_batch_in_step(big: bool) -> Workload:
    """Inside each step a Python function makes the batch with numpy before the jit step; ablation: data resident."""
    import jax
    import numpy as np

    # On a CPU the step shares the host's cores: a narrow model over a wide batch keeps the numpy the larger part.
    params, train_step, x_resident, y = _mlp_step(big) if big else _mlp_step(big, "float32", [1024, 32, 32, 32], 4096)
    rows, width = x_resident.shape
    rng = np.random.default_rng(0)
    state = {"params": params}

    def make_batch() -> np.ndarray:
        noise = rng.standard_normal((rows, width), dtype=np.float32)
        return np.clip(np.tanh(noise) * 0.5, -0.45, 0.45)

    def iteration(i: int, clock: Clock) -> None:
        with clock.part("make_batch"):
            batch = make_batch()
        state["params"], value = train_step(state["params"], jax.device_put(batch), y)
        value.block_until_ready()

    def resident(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x_resident, y)
        value.block_until_ready()

    return Workload(iteration, ablations={"data_resident": resident})


def sync_checkpoint(big: bool) -> Workload:
    """Every 10th step saves the parameters synchronously (device_get + np.savez); ablation: no save."""
    import jax
    import numpy as np

    params, train_step, x, y = _mlp_step(big, "float32", [4096] * 5 if big else [2048] * 5, 2048 if big else 8)
    folder = Path(tempfile.mkdtemp(prefix="checkpoint-"))
    state = {"params": params}

    def save_checkpoint(params, step: int) -> None:
        arrays = jax.device_get(params)
        np.savez(folder / f"step-{step}.npz", *arrays)

    def train(i: int) -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    def iteration(i: int, clock: Clock) -> None:
        train(i)
        if i % 10 == 9:
            with clock.part("save_checkpoint"):
                save_checkpoint(state["params"], i)

    return Workload(iteration, ablations={"no_save": lambda i, clock: train(i)},
                    stop=lambda: shutil.rmtree(folder, ignore_errors=True))


def sync_every_step(big: bool) -> Workload:
    """Host batch-making overlapped with the device, except that ``float(loss)`` syncs every step for logging;
    ablation: the same loop syncing every 10th step."""
    import jax
    import numpy as np

    # On a CPU a narrow f32 model over a wide batch: a few rounds of the host's numpy last as long as its step.
    params, train_step, x, y = (_mlp_step(big, widths=[256, 8192, 8192, 256], batch=4096) if big
                                else _mlp_step(big, "float32", [256, 128, 128, 256], 2048))
    source = np.random.default_rng(0).standard_normal(x.shape, dtype=np.float32)
    state = {"params": params, "log": [], "rounds": 1}

    def make_batch(i: int) -> np.ndarray:
        batch = source * (1 + 1e-3 * i)
        for _ in range(state["rounds"]):
            batch *= 0.999
            batch += 1e-3 * source
        return batch

    def median_ms(run: Callable[[], object], times: int = 5) -> float:
        run()
        samples = []
        for _ in range(times):
            started = time.perf_counter()
            run()
            samples.append((time.perf_counter() - started) * 1e3)
        return statistics.median(samples)

    # As many rounds of host work as make it last about as long as the device's step, so that the two could overlap.
    def device_step() -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    device_ms = median_ms(device_step)
    host_ms = median_ms(lambda: make_batch(0))
    state["rounds"] = max(1, min(50, round(device_ms / max(host_ms, 1e-3))))

    def log_loss(value, i: int) -> None:
        state["log"].append((i, float(value)))

    def loop(every: int):
        def iteration(i: int, clock: Clock) -> None:
            with clock.part("make_batch"):
                batch = make_batch(i)
            state["params"], value = train_step(state["params"], jax.device_put(batch), y)
            if i % every == every - 1:
                with clock.part("log_loss"):
                    log_loss(value, i)

        return iteration

    return Workload(loop(1), ablations={"sync_every_10": loop(10)})


def loader_thread(big: bool) -> Workload:
    """A loader thread reads each batch from a file (plus a storage latency) into a queue the step takes it from;
    ablation: an instant loader (the same thread, the batch already read)."""
    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    folder = Path(tempfile.mkdtemp(prefix="shards-"))
    shard = folder / "shard.bin"
    np.random.default_rng(0).standard_normal(x.shape, dtype=np.float32).tofile(shard)
    state = {"params": params}
    clocks: dict[str, Clock] = {}

    def read_batch() -> np.ndarray:
        time.sleep(0.030)  # the storage's latency per read
        return np.fromfile(shard, dtype=np.float32).reshape(x.shape)

    def start(slow: bool) -> tuple[queue.Queue, threading.Event]:
        batches: queue.Queue = queue.Queue(maxsize=2)
        stopping = threading.Event()
        ready = np.fromfile(shard, dtype=np.float32).reshape(x.shape)

        def load() -> None:
            while not stopping.is_set():
                started = time.perf_counter()
                batch = read_batch() if slow else ready
                if slow and "clock" in clocks:
                    clocks["clock"].call("read_batch", (time.perf_counter() - started) * 1e3)
                _put(batches, batch, stopping)

        threading.Thread(target=load, name="loader", daemon=True).start()
        return batches, stopping

    return _fed_by_a_loader(OneThreadAtATime(start), clocks, state, train_step, y, folder, "instant_loader")


def host_roundtrip(big: bool) -> Workload:
    """Each step copies a 256 MiB array device -> host -> device before a small step; ablation: it stays resident."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    elements = (256 if big else 32) * 2**20 // 4
    state = {"x": jnp.ones((elements // 1024, 1024), "float32")}

    @jax.jit
    def step(x):
        return x * 0.999 + 0.001

    def iteration(i: int, clock: Clock) -> None:
        with clock.part("to_host"):
            on_host = np.asarray(jax.device_get(state["x"]))
        with clock.part("to_device"):
            state["x"] = jax.device_put(on_host).block_until_ready()
        state["x"] = step(state["x"]).block_until_ready()

    def resident(i: int, clock: Clock) -> None:
        state["x"] = step(state["x"]).block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        loop_ms = sum(clock.iterations)
        copies_ms = sum(clock.parts["to_host"]) + sum(clock.parts["to_device"])
        return {"bytes_each_way": _number(elements * 4, "the array's nbytes, copied each way every step", abs=0),
                "transfers_share": _number(copies_ms / loop_ms, "(to_host + to_device totals) / loop_ms", abs=0.05)}

    return Workload(iteration, ablations={"resident": resident}, extra=extra)


def _first_and_steady(clock: Clock, ablations: dict[str, Clock]) -> dict:
    first, rest = clock.iterations[0], clock.iterations[1:]
    return {"first_iteration_ms": _number(first, f"the first iteration, compilation included, {CLOCK}", rel=0.15),
            "steady_iteration_ms": _number(statistics.median(rest), f"median of the iterations after the first, "
                                                                    f"{CLOCK}", rel=0.15),
            "warmup_cost_ms": _number(first - statistics.median(rest), "first_iteration_ms - steady_iteration_ms",
                                      rel=0.15)}


def warmup_compile(big: bool) -> Workload:
    """A jit MLP train step whose first call compiles inside the trace; steady steps after it."""
    params, train_step, x, y = _mlp_step(big)
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    return Workload(iteration, extra=_first_and_steady)


def recompile_every_step(big: bool) -> Workload:
    """The batch grows by 8 rows every step, so the jit step compiles every step; ablation: one padded shape."""
    import jax
    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    width, out = x.shape[1], y.shape[1]
    base = 1024 if big else 64
    batches = {rows: (jax.device_put(np.ones((rows, width), np.float32)),
                      jax.device_put(np.zeros((rows, out), np.float32))) for rows in [base + 8 * i for i in range(40)]}
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], *batches[base + 8 * (i + 1)])
        value.block_until_ready()

    def padded(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], *batches[base + 8 * 39])
        value.block_until_ready()

    return Workload(iteration, ablations={"one_padded_shape": padded})


def train_eval_alternating(big: bool) -> Workload:
    """Each iteration runs a train step then an eval step on a held-out batch: two programs, no step markers."""
    import jax
    import jax.numpy as jnp

    params, train_step, x, y = _mlp_step(big)
    evaluate = jax.jit(lambda params, x, y: mlp_loss(params, x, y))
    x_eval = jnp.tile(x, (2, 1)) * 0.5
    y_eval = jnp.zeros((x_eval.shape[0], y.shape[1]), "float32")
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        with clock.part("train_step"):
            state["params"], value = train_step(state["params"], x, y)
            value.block_until_ready()
        with clock.part("eval_step"):
            evaluate(state["params"], x_eval, y_eval).block_until_ready()

    return Workload(iteration)


def grad_accumulation(big: bool) -> Workload:
    """Four micro-batch gradient programs accumulate into a buffer, then an Adam apply program: no step markers."""
    import jax
    import jax.numpy as jnp

    widths = [4096] * 5 if big else [256] * 5
    params = _mlp_params(widths, "float32")
    micro_batch = 256 if big else 32
    keys = jax.random.split(jax.random.key(4), 4)
    micro_batches = [(jax.random.normal(k, (micro_batch, widths[0])), jnp.zeros((micro_batch, widths[-1])))
                     for k in keys]

    @jax.jit
    def accumulate(params, grads, x, y):
        return jax.tree.map(jnp.add, grads, jax.grad(mlp_loss)(params, x, y))

    @jax.jit
    def apply(params, grads, m, v):
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g / 4, m, grads)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * (g / 4) ** 2, v, grads)
        params = jax.tree.map(lambda p, m, v: p - 1e-4 * m / (jnp.sqrt(v) + 1e-8), params, m, v)
        return params, m, v

    zeros = jax.tree.map(jnp.zeros_like, params)
    state = {"params": params, "m": zeros, "v": jax.tree.map(jnp.zeros_like, params)}
    micro_stats = _program_stats(accumulate, params, zeros, *micro_batches[0])
    apply_stats = _program_stats(apply, params, zeros, zeros, zeros)

    def iteration(i: int, clock: Clock) -> None:
        grads = zeros
        with clock.part("micro_batches"):
            for x, y in micro_batches:
                grads = accumulate(state["params"], grads, x, y)
            jax.block_until_ready(grads)
        with clock.part("apply"):
            state["params"], state["m"], state["v"] = jax.block_until_ready(
                apply(state["params"], grads, state["m"], state["v"]))

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        how = "compiled {}'s memory_analysis(): peak_memory_in_bytes, or arguments + outputs + temporaries - aliased"
        return {"micro_batches_per_step": _number(len(micro_batches), "micro-batch programs per iteration", abs=0),
                "micro_batch_peak_bytes": _number(micro_stats["peak_bytes"], how.format("accumulate"), rel=0.01),
                "apply_peak_bytes": _number(apply_stats["peak_bytes"], how.format("apply"), rel=0.01),
                "largest_program_peak_bytes": _number(max(micro_stats["peak_bytes"], apply_stats["peak_bytes"]),
                                                      "the larger of the two programs' peaks", rel=0.05)}

    return Workload(iteration, extra=extra)


def op_by_op_eager(big: bool) -> Workload:
    """Forty small eager ops a step, each its own dispatched program; ablation: the jitted twin of the same ops."""
    import jax
    import jax.numpy as jnp

    n = 512 if big else 64
    state = {"x": jnp.ones((n, n), "float32") * 0.1}
    rounds, calls_per_round = 5, 9

    def ops(x):
        for _ in range(rounds):
            y = x.astype("bfloat16") * 2
            y = jnp.tanh(y.astype("float32"))
            x = (x + y).T * 0.5
            x = x - jnp.mean(x)
        return x

    jitted = jax.jit(ops)

    def eager(i: int, clock: Clock) -> None:
        state["x"] = ops(state["x"]).block_until_ready()

    def twin(i: int, clock: Clock) -> None:
        state["x"] = jitted(state["x"]).block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"jnp_calls_per_step": _number(rounds * calls_per_round, "eager jnp calls per iteration, each at "
                                              "least one dispatched program", abs=0),
                "jit_twin_speedup": _number(_steady_ms(clock) / _steady_ms(ablations["jit_twin"]),
                                            "median iteration / the jitted twin's median iteration", rel=0.25)}

    return Workload(eager, ablations={"jit_twin": twin}, extra=extra)


# --- shapes whose structure the ones above do not have -----------------------------------------


def conv_net_bf16(big: bool) -> Workload:
    """A small NHWC convolutional net's training step in bf16 (six 3x3 convolutions), images resident."""
    import jax
    import jax.numpy as jnp

    batch, side, channels, convs = (32, 64, 128, 6) if big else (8, 32, 32, 3)
    keys = jax.random.split(jax.random.key(5), convs + 2)
    params = {"stem": _normal(keys[0], (3, 3, 3, channels), "bfloat16"),
              "convs": [_normal(k, (3, 3, channels, channels), "bfloat16") * 0.3 for k in keys[1:-1]],
              "head": _normal(keys[-1], (channels, 10), "bfloat16")}
    images = jax.random.normal(keys[-1], (batch, side, side, 3)).astype("bfloat16")
    labels = jax.nn.one_hot(jnp.arange(batch) % 10, 10)

    def conv(x, kernel):
        return jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def loss(params, images, labels):
        x = jax.nn.relu(conv(images, params["stem"]))
        for kernel in params["convs"]:
            x = x + jax.nn.relu(conv(x, kernel))
        logits = (jnp.mean(x, axis=(1, 2)) @ params["head"]).astype("float32")
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * labels, -1))

    train_step = sgd(loss)
    stats = _program_stats(train_step, params, images, labels)
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], images, labels)
        value.block_until_ready()

    return Workload(iteration, extra=lambda clock, ablations: _compute_truth(stats["flops"], _steady_ms(clock),
                                                                              "conv train step"))


def _causal_attention(q, k, v, fused: bool):
    """Causal attention of ``[batch, seq, heads, head_dim]`` queries, keys and values: the scores materialised (an
    einsum, a masked softmax in f32, an einsum), or fused in Pallas's TPU flash attention, which keeps them on chip."""
    import jax
    import jax.numpy as jnp

    scale = q.shape[-1] ** -0.5
    if fused:
        from jax.experimental.pallas.ops.tpu.flash_attention import flash_attention

        heads_first = [a.transpose(0, 2, 1, 3) for a in (q, k, v)]
        return flash_attention(*heads_first, causal=True, sm_scale=scale).transpose(0, 2, 1, 3)
    seq = q.shape[1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype("float32") * scale
    weights = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), scores, -1e9), -1).astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


def long_attention(big: bool) -> Workload:
    """Two transformer blocks over a long sequence (4096 on the chip), trained in bf16: the attention's
    sequence-squared scores take most of the time; ablations: the same blocks without attention, and on the chip the
    attention fused (Pallas's flash attention), its scores never written to memory; half as many heads, twice as
    wide (128 on the chip)."""
    import jax
    import jax.numpy as jnp

    d, heads, seq, batch, layers = (512, 8, 4096, 2, 2) if big else (64, 4, 256, 1, 1)
    dtype = "bfloat16" if big else "float32"  # bf16 matmuls are slow on a CPU
    keys = iter(jax.random.split(jax.random.key(6), 4 * layers + 1))
    params = [{"qkv": _normal(next(keys), (d, 3 * d), dtype), "out": _normal(next(keys), (d, d), dtype),
               "up": _normal(next(keys), (d, 4 * d), dtype), "down": _normal(next(keys), (4 * d, d), dtype)}
              for _ in range(layers)]
    x = jax.random.normal(next(keys), (batch, seq, d)).astype(dtype)

    def block(attend: bool, fused: bool = False, heads: int = heads):
        def loss(params, x):
            for layer in params:
                q, k, v = jnp.split((x @ layer["qkv"]).reshape(batch, seq, 3 * heads, d // heads), 3, axis=2)
                mixed = _causal_attention(q, k, v, fused) if attend else q + k + v
                x = x + mixed.reshape(batch, seq, d) @ layer["out"]
                x = x + jax.nn.gelu(x @ layer["up"]) @ layer["down"]
            return jnp.mean(x.astype("float32") ** 2)

        return sgd(loss)

    with_attention, without = block(True), block(False)
    stats = _program_stats(with_attention, params, x)
    ablations = {"no_attention": without, "wide_heads": block(True, heads=heads // 2)} | (
        {"fused_attention": block(True, fused=True)} if big else {})
    state = {"params": params}

    def run(step):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], x)
            value.block_until_ready()

        return iteration

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        ms = _steady_ms(clock)
        return {**_compute_truth(stats["flops"], ms, "attention train step"),
                "attention_share": _number(1 - _steady_ms(ablations["no_attention"]) / ms,
                                           "1 - the same blocks without attention's median iteration / median "
                                           "iteration", abs=0.1)}

    return Workload(run(with_attention), ablations={name: run(step) for name, step in ablations.items()}, extra=extra)


def embedding_gather(big: bool) -> Workload:
    """A sparse embedding step: gather 16-row bags from a large bf16 table, a small head, and a scatter-add of the
    rows' gradients back into the donated table: gathers and scatters, almost no matmul."""
    import jax
    import jax.numpy as jnp

    vocab, width, bags, bag = (2**20, 256, 16384, 16) if big else (2**15, 64, 2048, 16)
    keys = jax.random.split(jax.random.key(7), 3)
    # On a CPU bf16 rows are converted to f32 and back around every gather and scatter: the twin's table is f32.
    table = _normal(keys[0], (vocab, width), "bfloat16" if big else "float32") * 8
    head = _normal(keys[1], (width, 1), "float32")
    ids = jax.random.randint(keys[2], (bags, bag), 0, vocab)
    targets = jnp.zeros((bags, 1), "float32")

    def loss(rows, head):
        pooled = jnp.mean(rows.astype("float32"), axis=1)
        return jnp.mean((pooled @ head - targets) ** 2)

    def update(table, head, ids):
        rows = table[ids]
        value, (row_grads, head_grad) = jax.value_and_grad(loss, argnums=(0, 1))(rows, head)
        table = table.at[ids].add((-1e-2 * row_grads).astype(table.dtype))
        return table, head - 1e-2 * head_grad, value

    step = jax.jit(update, donate_argnums=0)
    stats = _program_stats(step, table, head, ids)
    state = {"table": table, "head": head}

    def iteration(i: int, clock: Clock) -> None:
        state["table"], state["head"], value = step(state["table"], state["head"], ids)
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        ms = _steady_ms(clock)
        row_bytes = bags * bag * width * 2
        return {**_compute_truth(stats["flops"], ms, "embedding step"),
                "gathered_bytes": _number(row_bytes, "bags x bag x width x 2 bytes: the rows gathered, and "
                                                     "scattered back, each step", abs=0),
                "table_bytes": _number(table.nbytes, "the table's nbytes", abs=0)}

    return Workload(iteration, extra=extra)


def host_callback(big: bool) -> Workload:
    """Each train step calls back to the host (``jax.pure_callback``) for a numpy statistic of its activations that
    the rest of the step needs, so the device waits on the host every step; ablation: the same step with the
    statistic computed on the device."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    # On a CPU the twin's step is float32 (bf16 matmuls are slow there) and its probe all of the activations of a
    # wide first layer, so that the host's sort, not the matmuls that share its cores, is the larger part.
    params, _, x, y = _mlp_step(big) if big else _mlp_step(big, "float32", [64, 2048, 64, 64])
    probe_rows = 64 if big else x.shape[0]
    clocks: dict[str, Clock] = {}

    def host_statistics(h: np.ndarray) -> np.ndarray:
        started = time.perf_counter()
        flat = np.sort(np.asarray(h, np.float32).ravel())
        scale = np.float32(np.abs(flat[len(flat) // 2]) + np.mean(np.abs(flat)) + 1.0)
        if "clock" in clocks:
            clocks["clock"].call("host_statistics", (time.perf_counter() - started) * 1e3)
        return scale

    def loss(params, x, y, on_host: bool):
        h = jax.nn.relu(x @ params[0])
        probe = jax.lax.stop_gradient(h[:probe_rows].astype("float32"))
        if on_host:
            scale = jax.pure_callback(host_statistics, jax.ShapeDtypeStruct((), jnp.float32), probe)
        else:
            scale = jnp.abs(jnp.median(probe)) + jnp.mean(jnp.abs(probe)) + 1.0
        h = h / scale.astype(h.dtype)
        for w in params[1:-1]:
            h = jax.nn.relu(h @ w)
        return jnp.mean(((h @ params[-1]).astype("float32") - y) ** 2)

    steps = {on_host: sgd(lambda p, x, y, on_host=on_host: loss(p, x, y, on_host)) for on_host in (True, False)}
    state = {"params": params}

    def run(on_host: bool):
        def iteration(i: int, clock: Clock) -> None:
            clocks["clock"] = clock
            state["params"], value = steps[on_host](state["params"], x, y)
            value.block_until_ready()

        return iteration

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"host_statistics_share": _number(sum(clock.calls["host_statistics"]) / sum(clock.iterations),
                                                 "host_statistics's total (timed inside the callback) / loop_ms",
                                                 abs=0.05)}

    return Workload(run(True), ablations={"on_device": run(False)}, extra=extra)


def python_tokenizer(big: bool) -> Workload:
    """A Python generator tokenises text (split, dict look-ups, padding) for each batch on the training thread,
    between steps without markers, with no Python tracer: host time the trace does not name; ablation: the
    tokens made before the loop."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    # On a CPU the embedding's gradient alone outlasts the tokenising unless the model is very narrow.
    batch, seq, vocab, d = (256, 512, 32768, 512) if big else (64, 256, 4096, 4)
    dtype = "bfloat16" if big else "float32"  # bf16 matmuls are slow on a CPU
    words = [f"w{n:05d}" for n in range(5000)]
    rng = np.random.default_rng(8)
    documents = [" ".join(rng.choice(words, seq)) for _ in range(batch)]
    ids: dict[str, int] = {}

    def tokenize(text: str, shift: int) -> list[int]:
        tokens = []
        for word in text.lower().split():
            token = ids.setdefault(word + str(shift % 3), len(ids) % vocab)
            tokens.append((token * 31 + len(word)) % vocab)
        return (tokens + [0] * seq)[:seq]

    def batches():
        step = 0
        while True:
            yield np.asarray([tokenize(text, step) for text in documents], np.int32)
            step += 1

    keys = jax.random.split(jax.random.key(9), 3)
    params = {"embed": _normal(keys[0], (vocab, d), dtype) * 16,
              "up": _normal(keys[1], (d, 4 * d), dtype), "down": _normal(keys[2], (4 * d, d), dtype)}

    def loss(params, tokens):
        x = params["embed"][tokens]
        x = x + jax.nn.gelu(x @ params["up"]) @ params["down"]
        return jnp.mean(x.astype("float32") ** 2)

    train_step = sgd(loss)
    source = batches()
    resident = jax.device_put(next(source))
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        with clock.part("tokenize"):
            tokens = next(source)
        state["params"], value = train_step(state["params"], jax.device_put(tokens))
        value.block_until_ready()

    def pre_tokenized(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], resident)
        value.block_until_ready()

    return Workload(iteration, ablations={"pre_tokenized": pre_tokenized})


def recompile_every_nth(big: bool) -> Workload:
    """The learning rate is a static argument of the jit step and decays every 5th step, so the step compiles
    again on those steps only; ablation: the rate passed as an array."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big)

    def update(params, x, y, rate):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        return jax.tree.map(lambda p, g: (p - rate * g).astype(p.dtype), params, grads), value

    static_step = jax.jit(update, static_argnums=3, donate_argnums=0)
    traced_step = jax.jit(update, donate_argnums=0)
    state = {"params": params}

    def schedule(i: int) -> float:
        return 1e-3 * 0.5 ** (max(i, 0) // 5)

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = static_step(state["params"], x, y, schedule(i))
        value.block_until_ready()

    def as_array(i: int, clock: Clock) -> None:
        state["params"], value = traced_step(state["params"], x, y, jnp.float32(schedule(i)))
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        slow = [ms for i, ms in enumerate(clock.iterations) if i % 5 == 0 and i > 0]
        normal = [ms for i, ms in enumerate(clock.iterations) if not (i % 5 == 0 and i > 0)]
        return {"slow_steps": _number(len(slow), "steps whose rate is new (every 5th after the first), each "
                                                 "compiling", abs=0),
                "slow_steps_share": _number(sum(slow) / sum(clock.iterations), "the slow steps' total / loop_ms",
                                            abs=0.05),
                "steady_iteration_ms": _number(statistics.median(normal), f"median of the other iterations, {CLOCK}",
                                               rel=0.15)}

    return Workload(iteration, ablations={"rate_as_array": as_array}, extra=extra)


def scan_layers(big: bool) -> Workload:
    """A deep residual MLP whose 16 layers run as one ``lax.scan`` over stacked bf16 weights, trained; FLOPs
    counted by hand (a while loop's body runs once per layer)."""
    import jax
    import jax.numpy as jnp

    d, layers, batch = (2048, 16, 4096) if big else (128, 4, 128)
    dtype = "bfloat16" if big else "float32"  # bf16 matmuls are slow on a CPU
    keys = jax.random.split(jax.random.key(10), 3)
    params = {"up": _normal(keys[0], (layers, d, 4 * d), dtype),
              "down": _normal(keys[1], (layers, 4 * d, d), dtype) * 0.5}
    x = jax.random.normal(keys[2], (batch, d)).astype(dtype)

    def loss(params, x):
        def layer(h, weights):
            up, down = weights
            return h + jax.nn.gelu(h @ up) @ down, None

        h, _ = jax.lax.scan(layer, x, (params["up"], params["down"]))
        return jnp.mean(h.astype("float32") ** 2)

    train_step = sgd(loss)
    state = {"params": params}
    matmul_flops = 3 * layers * 2 * (2 * batch * d * 4 * d)  # forward, and the backward's two matmuls per forward one

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x)
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        ms = _steady_ms(clock)
        truth = {"flops_per_step": _number(matmul_flops, "by hand: 3 x layers x 2 matmuls x 2 x batch x d x 4d "
                                                         "(forward and backward matmuls)", rel=0.05),
                 "achieved_flops_per_s": _number(matmul_flops / (ms / 1e3), "flops_per_step / median iteration",
                                                 rel=0.1),
                 "layers": _number(layers, "scanned layers", abs=0)}
        if peaks := _peaks():
            truth["mfu"] = _number(matmul_flops / (ms / 1e3) / peaks["bf16_flops_per_s"],
                                   "flops_per_step / median iteration / 197e12 (TPU v5e bf16 peak)", abs=0.03)
        return truth

    return Workload(iteration, extra=extra)


def device_put_each_step(big: bool) -> Workload:
    """A producer thread that keeps up hands over a fresh 256 MiB host batch each step; the training thread copies
    it to the device (``jax.device_put``) before a short step; ablation: the batch resident on the device."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rows, width = (65536, 1024) if big else (16384, 256)
    pool = [np.full((rows, width), n, np.float32) for n in range(4)]
    batches: queue.Queue = queue.Queue(maxsize=2)
    stopping = threading.Event()

    def produce() -> None:
        n = 0
        while not stopping.is_set():
            buffer = pool[n % len(pool)]
            buffer[0, :8] = n  # a fresh batch: the pool's buffers are reused once the step has copied them
            with contextlib.suppress(queue.Full):
                batches.put(buffer, timeout=0.1)
                n += 1

    threading.Thread(target=produce, name="producer", daemon=True).start()
    w = _normal(jax.random.key(11), (width, width), "bfloat16")

    @jax.jit
    def step(batch, w):
        h = jnp.tanh(batch[: rows // 8].astype("bfloat16") @ w)
        return jnp.mean(h.astype("float32")) + jnp.mean(batch)

    resident = jax.device_put(pool[0])

    def iteration(i: int, clock: Clock) -> None:
        with clock.part("wait_for_batch"):
            batch = batches.get()
        with clock.part("to_device"):
            on_device = jax.device_put(batch).block_until_ready()
        step(on_device, w).block_until_ready()

    def stays(i: int, clock: Clock) -> None:
        step(resident, w).block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"bytes_per_step": _number(pool[0].nbytes, "the batch's nbytes, copied to the device each step",
                                          abs=0)}

    return Workload(iteration, ablations={"resident": stays}, extra=extra, stop=stopping.set)


# --- shapes of dispatch, overlap, elementwise work and host sampling ---------------------------


def tiny_step_dispatch(big: bool) -> Workload:
    """A jit train step over a small model whose parameters are 96 separate arrays, synced every step: the device's
    work per step is shorter than the host's launch of it and the sync; ablation: 16 steps in one program
    (``lax.scan``), per step."""
    import jax
    import jax.numpy as jnp

    layers, d, batch = (48, 128, 8) if big else (48, 32, 4)
    keys = jax.random.split(jax.random.key(20), layers)
    params = [{"w": _normal(k, (d, d), "float32"), "b": jnp.zeros((d,), "float32")} for k in keys]
    x = jax.random.normal(jax.random.key(21), (batch, d))

    def loss(params, x):
        for layer in params:
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return jnp.mean(x ** 2)

    def update(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), value

    train_step = jax.jit(update, donate_argnums=0)
    steps_per_call = 16
    sixteen = jax.jit(lambda params, x: jax.lax.scan(lambda p, _: update(p, x), params, None, length=steps_per_call),
                      donate_argnums=0)
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x)
        value.block_until_ready()

    def scanned(i: int, clock: Clock) -> None:
        state["params"], values = sixteen(state["params"], x)
        values.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        per_step = _steady_ms(ablations["scan_16_steps"]) / steps_per_call
        return {"parameter_arrays": _number(2 * layers, "leaves of the parameters' pytree", abs=0),
                "scanned_step_ms": _number(per_step, "ablation: median call of 16 steps in one lax.scan program / 16",
                                           rel=0.25),
                "per_step_overhead_share": _number(1 - per_step / _steady_ms(clock),
                                                   "1 - scanned_step_ms / median iteration: the launch and sync "
                                                   "each step pays", abs=0.1)}

    return Workload(iteration, ablations={"scan_16_steps": scanned}, extra=extra)


def prefetch_overlapped(big: bool) -> Workload:
    """A 'prefetch' thread makes each batch with numpy and copies it to the device, up to two steps ahead of a
    bf16 MLP train step; on the chip making and copying a batch takes longer than the step, so the step waits on
    the thread; ablation: the batch resident."""
    import jax
    import numpy as np

    params, train_step, x_resident, y = (_mlp_step(big, widths=[1024, 8192, 8192, 1024], batch=8192) if big
                                         else _mlp_step(big, "float32", [256, 1024, 1024, 256], 512))
    pool = [np.random.default_rng(n).standard_normal(x_resident.shape, dtype=np.float32) for n in range(2)]
    batches: queue.Queue = queue.Queue(maxsize=2)
    stopping = threading.Event()
    clocks: dict[str, Clock] = {}

    def make_batch(n: int) -> np.ndarray:
        return pool[n % 2] * np.float32(1 + 1e-3 * (n % 7))

    def prefetch() -> None:
        n = 0
        while not stopping.is_set():
            started = time.perf_counter()
            on_device = jax.device_put(make_batch(n)).block_until_ready()
            if "clock" in clocks:
                clocks["clock"].call("prefetch_batch", (time.perf_counter() - started) * 1e3)
            while not stopping.is_set():
                with contextlib.suppress(queue.Full):
                    batches.put(on_device, timeout=0.1)
                    n += 1
                    break

    threading.Thread(target=prefetch, name="prefetch", daemon=True).start()
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        clocks["clock"] = clock
        with clock.part("wait_for_batch"):
            batch = batches.get()
        state["params"], value = train_step(state["params"], batch, y)
        value.block_until_ready()

    def resident(i: int, clock: Clock) -> None:
        clocks.pop("clock", None)
        state["params"], value = train_step(state["params"], x_resident, y)
        value.block_until_ready()

    return Workload(iteration, ablations={"data_resident": resident}, stop=stopping.set)


def elementwise_memory_bound(big: bool) -> Workload:
    """A training step dominated by elementwise work over large bf16 activations: eight rounds of layer norm, gelu
    and a residual with learnable scales, one small matmul at the end; FLOPs and bytes from XLA's cost analysis;
    ablation: the same step with f32 activations (twice the bytes, the same arithmetic)."""
    import jax
    import jax.numpy as jnp

    rows, d, rounds = (16384, 2048, 8) if big else (1024, 256, 8)
    params = {"scale": jnp.ones((rounds, d), "float32"), "shift": jnp.zeros((rounds, d), "float32"),
              "head": _normal(jax.random.key(22), (d, 128), "bfloat16")}
    x = jax.random.normal(jax.random.key(23), (rows, d)).astype("bfloat16")

    def loss(params, x):
        for r in range(rounds):
            h = x.astype("float32")
            h = (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + 1e-5)
            x = x + jax.nn.gelu(h * params["scale"][r] + params["shift"][r]).astype(x.dtype)
        return jnp.mean((x.astype("bfloat16") @ params["head"]).astype("float32") ** 2)

    train_step = sgd(loss)
    stats = _program_stats(train_step, params, x)
    state = {"params": params, "wide": jax.tree.map(jnp.copy, params)}
    x32 = x.astype("float32")

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x)
        value.block_until_ready()

    def f32_activations(i: int, clock: Clock) -> None:
        state["wide"], value = train_step(state["wide"], x32)
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        ms = _steady_ms(clock)
        return {"bytes_per_step": _number(stats["bytes"], "compiled step's cost_analysis()['bytes accessed'] (each "
                                                          "fusion's operands and results)", rel=0.05),
                "arithmetic_intensity": _number(stats["flops"] / stats["bytes"], "cost_analysis flops / bytes "
                                                "accessed (the v5e's ridge point: 197e12 / 819e9 = 241)", rel=0.05),
                "f32_activations_slowdown": _number(_steady_ms(ablations["f32_activations"]) / ms,
                                                    "median iteration with f32 activations (twice the bytes, the "
                                                    "same arithmetic) / median iteration: 2 when HBM traffic sets "
                                                    "the time", rel=0.15),
                **_compute_truth(stats["flops"], ms, "train step")}

    return Workload(iteration, ablations={"f32_activations": f32_activations}, extra=extra)


def f32_default_precision(big: bool) -> Workload:
    """An f32 MLP train step at the default matmul precision (on a TPU, bf16 passes): healthy, no precision cost;
    ablation: the same MLP in bf16."""
    widths, batch = ([2048, 8192, 8192, 2048], 4096) if big else ([256, 512, 512, 256], 256)
    params, train_step, x, y = _mlp_step(big, "float32", widths, batch)
    params16, train_step16, x16, y16 = _mlp_step(big, "bfloat16", widths, batch)
    stats = _program_stats(train_step, params, x, y)
    state = {"params": params, "params16": params16}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    def bf16(i: int, clock: Clock) -> None:
        state["params16"], value = train_step16(state["params16"], x16, y16)
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        ms = _steady_ms(clock)
        return {"f32_over_bf16": _number(ms / _steady_ms(ablations["bf16"]), "median iteration / the bf16 twin's",
                                         rel=0.15),
                **_compute_truth(stats["flops"], ms, "train step")}

    return Workload(iteration, ablations={"bf16": bf16}, extra=extra)


def host_sampling_decode(big: bool) -> Workload:
    """Token-by-token decode whose next tokens are sampled on the host: each step copies the f32 logits off the
    device and samples them with numpy (softmax, cumulative sum, search) in ``sample_on_host``, then copies the tokens
    back; ablation: the same sampling inside the jit step."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    d, vocab, batch, layers = (2048, 32768, 32, 4) if big else (128, 8192, 16, 2)
    keys = jax.random.split(jax.random.key(24), 2 * layers + 2)
    embed = _normal(keys[0], (vocab, d), "bfloat16")
    head = _normal(keys[1], (d, vocab), "bfloat16")
    blocks = [(_normal(keys[2 + 2 * l], (d, 4 * d), "bfloat16"), _normal(keys[3 + 2 * l], (4 * d, d), "bfloat16"))
              for l in range(layers)]

    def logits_of(tokens):
        h = embed[tokens]
        for up, down in blocks:
            h = h + jax.nn.gelu(h @ up) @ down
        return (h @ head).astype("float32")

    logits_step = jax.jit(logits_of)
    on_device = jax.jit(lambda tokens, key: jax.random.categorical(key, logits_of(tokens)).astype("int32"))
    rng = np.random.default_rng(0)

    def sample_on_host(logits: np.ndarray) -> np.ndarray:
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        cumulative = np.cumsum(z / z.sum(axis=1, keepdims=True), axis=1)
        return np.minimum((cumulative < rng.random((batch, 1))).sum(axis=1), vocab - 1).astype(np.int32)

    state = {"tokens": jnp.zeros((batch,), "int32"), "key": jax.random.key(25)}

    def iteration(i: int, clock: Clock) -> None:
        logits = logits_step(state["tokens"])
        with clock.part("copy_logits"):
            host_logits = np.asarray(logits)
        with clock.part("sample_on_host"):
            tokens = sample_on_host(host_logits)
        state["tokens"] = jax.device_put(tokens)

    def sampled_on_device(i: int, clock: Clock) -> None:
        state["key"], key = jax.random.split(state["key"])
        state["tokens"] = on_device(state["tokens"], key).block_until_ready()

    return Workload(iteration, ablations={"sample_on_device": sampled_on_device})


def periodic_eval(big: bool) -> Workload:
    """A bf16 MLP train step; every 5th step also evaluates on 8 held-out batches (a jit eval program each, their
    losses summed on the host with ``float``); ablation: no evaluation."""
    import jax

    params, train_step, x, y = _mlp_step(big)
    evaluate_batch = jax.jit(mlp_loss)
    held_out = [(x * (0.5 + 0.05 * n), y) for n in range(8)]
    state = {"params": params, "eval": []}

    def evaluate(params) -> float:
        return sum(float(evaluate_batch(params, xb, yb)) for xb, yb in held_out) / len(held_out)

    def train(i: int) -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    def iteration(i: int, clock: Clock) -> None:
        train(i)
        if i % 5 == 4:
            with clock.part("evaluate"):
                state["eval"].append(evaluate(state["params"]))

    return Workload(iteration, ablations={"no_eval": lambda i, clock: train(i)})


def eager_optimizer(big: bool) -> Workload:
    """The gradients come from one jit program, but the Adam update runs eagerly: a Python loop over the 16
    parameter arrays, eight jnp calls each, every call its own dispatched program; ablation: the jitted update."""
    import jax
    import jax.numpy as jnp

    widths, batch = ([1024, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 1024], 2048) if big else ([64] * 9, 64)
    keys = jax.random.split(jax.random.key(26), len(widths) - 1)
    params = [{"w": _normal(k, (a, b), "float32"), "b": jnp.zeros((b,), "float32")}
              for k, a, b in zip(keys, widths[:-1], widths[1:])]
    x = jax.random.normal(jax.random.key(27), (batch, widths[0]))

    def loss(params, x):
        for layer in params[:-1]:
            x = jax.nn.relu(x @ layer["w"] + layer["b"])
        return jnp.mean((x @ params[-1]["w"] + params[-1]["b"]) ** 2)

    gradients = jax.jit(jax.value_and_grad(loss))

    def adam_update(params, grads, m, v):
        new_params, new_m, new_v = [], [], []
        for p, g, m1, v1 in zip(jax.tree.leaves(params), jax.tree.leaves(grads), m, v):
            m1 = 0.9 * m1 + 0.1 * g
            v1 = 0.999 * v1 + 0.001 * (g * g)
            new_params.append(p - 1e-4 * m1 / (jnp.sqrt(v1) + 1e-8))
            new_m.append(m1)
            new_v.append(v1)
        return jax.tree.unflatten(jax.tree.structure(params), new_params), new_m, new_v

    jitted_update = jax.jit(adam_update)
    zeros = [jnp.zeros_like(p) for p in jax.tree.leaves(params)]
    state = {"params": params, "m": zeros, "v": list(zeros)}

    def loop(update):
        def iteration(i: int, clock: Clock) -> None:
            value, grads = gradients(state["params"], x)
            value.block_until_ready()
            with clock.part("adam_update"):
                state["params"], state["m"], state["v"] = update(state["params"], grads, state["m"], state["v"])
                jax.block_until_ready(state["params"])

        return iteration

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"eager_calls_per_step": _number(8 * 2 * (len(widths) - 1), "jnp calls in adam_update per "
                                                "iteration, each at least one dispatched program", abs=0)}

    return Workload(loop(adam_update), ablations={"jitted_update": loop(jitted_update)}, extra=extra)


def async_checkpoint(big: bool) -> Workload:
    """Every 10th step hands a copy of the parameters to a 'checkpointer' thread, which copies them off the device
    and writes them with np.savez while the steps go on; ablation: no save."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params, train_step, x, y = _mlp_step(big, "float32", [4096] * 5 if big else [1024] * 5, 2048 if big else 64)
    folder = Path(tempfile.mkdtemp(prefix="checkpoint-"))
    saves: queue.Queue = queue.Queue()
    clocks: dict[str, Clock] = {}

    def save_checkpoint(params, step: int) -> None:
        started = time.perf_counter()
        np.savez(folder / f"step-{step}.npz", *jax.device_get(params))
        if "clock" in clocks:
            clocks["clock"].call("save_checkpoint", (time.perf_counter() - started) * 1e3)

    def checkpointer() -> None:
        while (item := saves.get()) is not None:
            save_checkpoint(*item)

    saver = threading.Thread(target=checkpointer, name="checkpointer", daemon=True)
    saver.start()
    state = {"params": params}

    def train(i: int) -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    def iteration(i: int, clock: Clock) -> None:
        clocks["clock"] = clock
        train(i)
        if i % 10 == 9:
            saves.put((jax.tree.map(jnp.copy, state["params"]), i))  # the step donates the parameters it is given

    def no_save(i: int, clock: Clock) -> None:
        clocks.pop("clock", None)
        train(i)

    def stop() -> None:
        saves.put(None)
        saver.join()
        shutil.rmtree(folder, ignore_errors=True)

    return Workload(iteration, ablations={"no_save": no_save}, stop=stop)


def device_put_ahead(big: bool) -> Workload:
    """The training thread copies the next batch to the device (``jax.device_put``, not waited on) before it
    launches the current step, so the copy overlaps the step; ablation: the batch resident."""
    import jax
    import numpy as np

    params, train_step, x_resident, y = (_mlp_step(big, widths=[1024, 8192, 8192, 1024], batch=8192) if big
                                         else _mlp_step(big, "float32", [256, 1024, 1024, 256], 512))
    pool = [np.random.default_rng(n).standard_normal(x_resident.shape, dtype=np.float32) for n in range(2)]
    state = {"params": params, "next": jax.device_put(pool[0])}

    def iteration(i: int, clock: Clock) -> None:
        batch, state["next"] = state["next"], jax.device_put(pool[(i + 1) % 2])
        state["params"], value = train_step(state["params"], batch, y)
        value.block_until_ready()

    def resident(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x_resident, y)
        value.block_until_ready()

    return Workload(iteration, ablations={"data_resident": resident})


def jitted_stages(big: bool) -> Workload:
    """A forward pass split into twelve separately jitted stages (each a dense layer and its activation), launched
    one after the other without waiting and synced once per step; ablation: the twelve stages in one jit."""
    import jax
    import jax.numpy as jnp

    d, batch, stages = (4096, 2048, 12) if big else (256, 128, 12)
    weights = _mlp_params([d] * (stages + 1), "bfloat16", seed=30)
    stage = jax.jit(lambda x, w: jax.nn.gelu(x @ w))
    fused = jax.jit(lambda x, ws: jnp.mean(jax.tree.reduce(lambda h, w: jax.nn.gelu(h @ w), ws, x)
                                           .astype("float32")))
    x = jax.random.normal(jax.random.key(31), (batch, d)).astype("bfloat16")

    def iteration(i: int, clock: Clock) -> None:
        h = x
        for w in weights:
            h = stage(h, w)
        jnp.mean(h.astype("float32")).block_until_ready()

    def one_jit(i: int, clock: Clock) -> None:
        fused(x, weights).block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"stages": _number(stages, "separately jitted stages per step", abs=0),
                "one_jit_speedup": _number(_steady_ms(clock) / _steady_ms(ablations["one_jit"]),
                                           "median iteration / the single-jit twin's", rel=0.15)}

    return Workload(iteration, ablations={"one_jit": one_jit}, extra=extra)


def unaligned_matmuls(big: bool) -> Workload:
    """A chain of bf16 matmuls whose sizes (1000) are not multiples of the TPU's 128-wide tiles, synced every step;
    ablation: the same chain padded to 1024, with its FLOPs. On the chip the program is short enough that its launch
    and sync each step cost as much as it does."""
    import jax
    import jax.numpy as jnp

    def chain(n: int, batch: int):
        ws = _mlp_params([n] * 5, "bfloat16", seed=32)
        x = jax.random.normal(jax.random.key(33), (batch, n)).astype("bfloat16")
        run = jax.jit(lambda x, ws: jnp.mean(jax.tree.reduce(lambda h, w: jnp.tanh(h @ w), ws, x)
                                             .astype("float32")))
        return run, x, ws, 2 * batch * n * n * 4

    n, padded_n, batch = (1000, 1024, 16000) if big else (100, 128, 1000)
    run, x, ws, flops = chain(n, batch)
    padded, px, pws, padded_flops = chain(padded_n, batch)

    def iteration(i: int, clock: Clock) -> None:
        run(x, ws).block_until_ready()

    def aligned(i: int, clock: Clock) -> None:
        padded(px, pws).block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        ms, padded_ms = _steady_ms(clock), _steady_ms(ablations["padded_to_1024"])
        return {**_compute_truth(flops, ms, "chain"),
                "padded_flops_per_s_gain": _number((padded_flops / padded_ms) / (flops / ms),
                                                   "achieved FLOP/s of the chain padded to 1024 / the chain's",
                                                   rel=0.15)}

    return Workload(iteration, ablations={"padded_to_1024": aligned}, extra=extra)


def fori_loop_steps(big: bool) -> Workload:
    """Ten SGD steps of a bf16 MLP run inside one jitted ``lax.fori_loop`` per call, data resident; each call is an
    annotated step: the device's loop is the training loop."""
    import jax

    params, _, x, y = _mlp_step(big)
    inner = 10

    def ten_steps(params, x, y):
        def body(_, carry):
            params, _ = carry
            value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
            return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value

        return jax.lax.fori_loop(0, inner, body, (params, 0.0))

    run = jax.jit(ten_steps, donate_argnums=0)
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = run(state["params"], x, y)
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"inner_steps": _number(inner, "SGD steps inside each call's fori_loop", abs=0)}

    return Workload(iteration, extra=extra)


def bucketed_shapes(big: bool) -> Workload:
    """Batches padded to one of two bucket sizes, alternating, both compiled before the trace: two programs of the
    same train step take turns, and nothing compiles in the loop."""
    import jax
    import jax.numpy as jnp

    params, train_step, _, _ = _mlp_step(big)
    width = params[0].shape[0]
    buckets = (2048, 4096) if big else (128, 256)
    batches = {n: (jax.random.normal(jax.random.key(n), (n, width)).astype(params[0].dtype),
                   jnp.zeros((n, params[-1].shape[1]), "float32")) for n in buckets}
    state = {"params": params}
    for n in buckets:  # both buckets' programs exist before the trace
        state["params"], value = train_step(state["params"], *batches[n])
        value.block_until_ready()

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], *batches[buckets[i % 2]])
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"programs": _number(len(buckets), "bucket sizes, one compiled program each", abs=0)}

    return Workload(iteration, extra=extra)


def loader_pool(big: bool) -> Workload:
    """Four 'reader' threads (a thread pool) read batches (120 ms storage latency each + np.fromfile) into a queue
    the annotated step waits on; together they deliver a batch every ~30 ms, slower than the step; ablation: the
    batches already read."""
    import concurrent.futures

    import jax
    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    folder = Path(tempfile.mkdtemp(prefix="shards-"))
    shard = folder / "shard.bin"
    np.random.default_rng(0).standard_normal(x.shape, dtype=np.float32).tofile(shard)
    ready = np.fromfile(shard, dtype=np.float32).reshape(x.shape)
    state = {"params": params}
    clocks: dict[str, Clock] = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="reader")
    pending: list[concurrent.futures.Future] = []

    def read_batch() -> np.ndarray:
        started = time.perf_counter()
        time.sleep(0.120)  # the storage's latency per read
        batch = np.fromfile(shard, dtype=np.float32).reshape(x.shape)
        if "clock" in clocks:
            clocks["clock"].call("read_batch", (time.perf_counter() - started) * 1e3)
        return batch

    def iteration(i: int, clock: Clock) -> None:
        clocks["clock"] = clock
        while len(pending) < 4:
            pending.append(pool.submit(read_batch))
        with clock.part("wait_for_batch"):
            batch = pending.pop(0).result()
        state["params"], value = train_step(state["params"], jax.device_put(batch), y)
        value.block_until_ready()

    def instant(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], jax.device_put(ready), y)
        value.block_until_ready()

    def stop() -> None:
        pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(folder, ignore_errors=True)

    return Workload(iteration, ablations={"instant_loader": instant}, stop=stop)


def gc_collect_each_step(big: bool) -> Workload:
    """After each train step the training thread calls ``gc.collect()`` (a habit against host memory growth) with
    a few million Python objects alive; ablation: no collect."""
    import gc

    params, train_step, x, y = _mlp_step(big)
    alive = [{"id": n, "tags": [n, str(n)]} for n in range(400_000 if big else 300_000)]
    state = {"params": params, "alive": alive}

    def train() -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    def iteration(i: int, clock: Clock) -> None:
        train()
        with clock.part("collect"):
            gc.collect()

    return Workload(iteration, ablations={"no_collect": lambda i, clock: train()},
                    stop=lambda: state.pop("alive", None))


def transpose_heavy(big: bool) -> Workload:
    """A step that swaps the two axes of a large bf16 activation four times around cheap elementwise work (an
    attention-style layout shuffle written by hand) before a small matmul; ablation: the same work without the
    transposes."""
    import jax
    import jax.numpy as jnp

    rows, cols, d = (8192, 8192, 512) if big else (512, 512, 64)
    x = jax.random.normal(jax.random.key(40), (rows, cols)).astype("bfloat16")
    w = _normal(jax.random.key(41), (cols, d), "bfloat16")

    def body(x, w, swap: bool):
        h = x
        for k in range(4):
            h = jnp.swapaxes(h, 0, 1) if swap else h
            h = h * 1.001 + 0.5 * k
            h = jax.lax.optimization_barrier(h)  # keeps each layout change a materialised copy, as in a real model
        return jnp.mean((h @ w).astype("float32"))

    shuffled = jax.jit(lambda x, w: body(x, w, True))
    plain = jax.jit(lambda x, w: body(x, w, False))

    def iteration(i: int, clock: Clock) -> None:
        shuffled(x, w).block_until_ready()

    def without(i: int, clock: Clock) -> None:
        plain(x, w).block_until_ready()

    return Workload(iteration, ablations={"no_transposes": without})


def per_example_calls(big: bool) -> Workload:
    """Inference one example at a time: each annotated step calls a jitted bf16 MLP on 64 single rows in a Python
    loop, then waits for the last; ablation: the same 64 rows as one batch in one call."""
    import jax

    widths = [512, 2048, 2048, 512] if big else [128, 256, 256, 128]
    params = _mlp_params(widths, "bfloat16", seed=42)
    rows = jax.random.normal(jax.random.key(43), (64, widths[0])).astype("bfloat16")
    examples = [rows[n:n + 1] for n in range(64)]

    def forward(params, x):
        for w in params[:-1]:
            x = jax.nn.relu(x @ w)
        return x @ params[-1]

    predict = jax.jit(forward)

    def iteration(i: int, clock: Clock) -> None:
        outputs = [predict(params, example) for example in examples]
        outputs[-1].block_until_ready()

    def batched(i: int, clock: Clock) -> None:
        predict(params, rows).block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"calls_per_step": _number(len(examples), "jitted calls per step, one example each", abs=0)}

    return Workload(iteration, ablations={"one_batch": batched}, extra=extra)


def debug_print_every_step(big: bool) -> Workload:
    """A bf16 MLP train step with a ``jax.debug.print`` of its loss left in (a host callback from inside the
    program every step); ablation: the same step without the print."""
    import io

    import jax

    params, _, x, y = _mlp_step(big)
    sink = io.StringIO()

    def step(params, x, y, verbose: bool):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        if verbose:
            jax.debug.callback(lambda v: print(f"loss {float(v):.6f}", file=sink), value)
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value

    printing = jax.jit(lambda p, x, y: step(p, x, y, True), donate_argnums=0)
    quiet = jax.jit(lambda p, x, y: step(p, x, y, False), donate_argnums=0)
    state = {"params": params}

    def loop(run):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = run(state["params"], x, y)
            value.block_until_ready()

        return iteration

    return Workload(loop(printing), ablations={"no_print": loop(quiet)})


def implicit_host_input(big: bool) -> Workload:
    """Each annotated step passes a fresh numpy batch straight to the jit step (no ``jax.device_put``): the call
    copies it to the device itself; ablation: the batch resident on the device."""
    import jax
    import numpy as np

    params, train_step, x, y = _mlp_step(big, "bfloat16", [4096, 2048, 2048, 1024] if big else None,
                                         8192 if big else None)
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal(x.shape, dtype=np.float32) for _ in range(2)]
    resident = jax.device_put(batches[0])
    state = {"params": params}

    def run(batch) -> None:
        state["params"], value = train_step(state["params"], batch, y)
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"batch_bytes": _number(batches[0].nbytes, "bytes of each numpy batch handed to the step", abs=0)}

    return Workload(lambda i, clock: run(batches[i % 2]), ablations={"resident": lambda i, clock: run(resident)},
                    extra=extra)


def eval_last_batch_recompile(big: bool) -> Workload:
    """An evaluation loop over a dataset whose last batch is smaller: the eval program compiles again for it, in
    the last annotated step; ablation: the last batch padded to the full size."""
    import jax
    import jax.numpy as jnp

    params = _mlp_params([1024, 4096, 4096, 1024] if big else [256, 512, 512, 256], "bfloat16", seed=50)
    full, last = (4096, 1000) if big else (256, 60)
    evaluate = jax.jit(lambda params, x: jnp.mean(mlp_loss(params, x, jnp.zeros((x.shape[0], 1)))))
    batch = jax.random.normal(jax.random.key(51), (full, params[0].shape[0])).astype("bfloat16")
    steps = 20

    def loop(pad: bool):
        def iteration(i: int, clock: Clock) -> None:
            rows = last if i == steps - 1 and not pad else full
            evaluate(params, batch[:rows]).block_until_ready()

        return iteration

    return Workload(loop(False), ablations={"padded_last_batch": loop(True)})


def harmless_sync_every_step(big: bool) -> Workload:
    """``float(loss)`` after every annotated step of a long bf16 train step, with nothing else for the host to do:
    the sync costs only the launch of the next step (the device's busy fraction is the truth; an ablation syncing
    every 10th step would leave the last steps of its loop unfinished and unmeasured)."""
    params, train_step, x, y = _mlp_step(big, "bfloat16", [2048, 8192, 8192, 2048] if big else None,
                                         16384 if big else None)
    state = {"params": params, "log": []}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x, y)
        state["log"].append(float(value))

    return Workload(iteration)


def jit_in_loop(big: bool) -> Workload:
    """The step is wrapped in a new ``jax.jit`` inside the loop every iteration (a fresh lambda), so JAX traces
    and compiles it again every step; ablation: the same jit made once, outside the loop."""
    import jax

    params, _, x, y = _mlp_step(big)

    def step(params, x, y):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value

    hoisted = jax.jit(step)
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = jax.jit(lambda p, x, y: step(p, x, y))(state["params"], x, y)
        value.block_until_ready()

    def once(i: int, clock: Clock) -> None:
        state["params"], value = hoisted(state["params"], x, y)
        value.block_until_ready()

    return Workload(iteration, ablations={"jit_once": once})


def metrics_device_get(big: bool) -> Workload:
    """Each annotated step computes 48 scalar metrics on the device and reads them all back with
    ``jax.device_get`` of a dict to log them (log_metrics); ablation: the metrics read back every 10th step."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big)

    def step(params, x, y):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        metrics = {f"{kind}_{n}": fn(g) for n, g in enumerate(grads)
                   for kind, fn in (("norm", jnp.linalg.norm), ("max", jnp.max), ("min", jnp.min),
                                    ("mean", jnp.mean), ("std", jnp.std), ("l1", lambda g: jnp.sum(jnp.abs(g))),
                                    ("rms", lambda g: jnp.sqrt(jnp.mean(g.astype("float32") ** 2))),
                                    ("nonzero", lambda g: jnp.mean((g != 0).astype("float32"))),
                                    ("p2", lambda g: jnp.sum(g.astype("float32") ** 2)),
                                    ("abs_max", lambda g: jnp.max(jnp.abs(g))),
                                    ("sum", jnp.sum), ("var", jnp.var))}
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value, metrics

    train_step = jax.jit(step, donate_argnums=0)
    state = {"params": params, "log": []}

    def log_metrics(metrics) -> None:
        state["log"].append({name: float(v) for name, v in jax.device_get(metrics).items()})

    def loop(every: int):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value, metrics = train_step(state["params"], x, y)
            if i % every == every - 1:
                with clock.part("log_metrics"):
                    log_metrics(metrics)
            else:
                value.block_until_ready()

        return iteration

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"metrics": _number(12 * len(params), "scalar metrics read back per step", abs=0)}

    return Workload(loop(1), ablations={"every_10": loop(10)}, extra=extra)


def remat_layers(big: bool) -> Workload:
    """A deep bf16 MLP trained with every layer under ``jax.checkpoint`` (its activations recomputed in the backward
    pass), far from the chip's memory limit; ablation: the same step without remat."""
    import jax

    widths = [2048] * 9 if big else [256] * 9
    params = _mlp_params(widths, "bfloat16", seed=60)
    x = jax.random.normal(jax.random.key(61), (8192 if big else 256, widths[0])).astype("bfloat16")

    def loss(params, x, remat: bool):
        layer = (lambda h, w: jax.nn.relu(h @ w))
        layer = jax.checkpoint(layer) if remat else layer
        h = x
        for w in params:
            h = layer(h, w)
        return (h.astype("float32") ** 2).mean()

    def make(remat: bool):
        def step(params, x):
            value, grads = jax.value_and_grad(lambda p: loss(p, x, remat))(params)
            return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value

        return jax.jit(step, donate_argnums=0)

    rematted, plain = make(True), make(False)
    state = {"params": params}

    def loop(run):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = run(state["params"], x)
            value.block_until_ready()

        return iteration

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        stats = _program_stats(rematted, state["params"], x)
        return {"remat_flops_per_step": _number(stats["flops"], "compiled step's cost_analysis()['flops']", rel=0.01),
                "remat_peak_bytes": _number(stats["peak_bytes"], "compiled step's memory_analysis() peak", rel=0.01)}

    return Workload(loop(rematted), ablations={"no_remat": loop(plain)}, extra=extra)


def float64_matmuls(big: bool) -> Workload:
    """A chain of float64 matmuls (``jax_enable_x64``, as a port of numpy code leaves it), which a TPU emulates;
    ablation: the same chain in float32."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    n, links = (2048, 4) if big else (256, 4)

    def run(x, ws):
        for w in ws:
            x = jnp.tanh(x @ w)
        return x

    chain = jax.jit(run)
    keys = jax.random.split(jax.random.key(70), links + 1)
    x64, ws64 = _normal(keys[0], (n, n), "float64"), [_normal(k, (n, n), "float64") for k in keys[1:]]
    x32, ws32 = x64.astype("float32"), [w.astype("float32") for w in ws64]

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"slowdown_vs_f32": _number(_steady_ms(clock) / _steady_ms(ablations["float32"]),
                                           "median iteration / the float32 chain's median iteration", rel=0.15)}

    return Workload(lambda i, clock: chain(x64, ws64).block_until_ready(),
                    ablations={"float32": lambda i, clock: chain(x32, ws32).block_until_ready()}, extra=extra)


def python_scalar_lr(big: bool) -> Workload:
    """The learning rate is a Python float passed to the jit step as an ordinary argument and decayed every step:
    a weakly typed scalar, traced, so nothing compiles again; healthy."""
    import jax

    params, _, x, y = _mlp_step(big)

    def step(params, x, y, lr):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        return [(p - lr * g).astype(p.dtype) for p, g in zip(params, grads)], value

    train_step = jax.jit(step, donate_argnums=0)
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x, y, 1e-3 * 0.99 ** max(i, 0))
        value.block_until_ready()

    return Workload(iteration)


def while_loop_convergence(big: bool) -> Workload:
    """Each annotated step runs a fixed-point solve as a ``lax.while_loop`` on the device until it converges (a
    data-dependent number of matmul iterations), then a bf16 MLP train step on the result; healthy."""
    import jax
    import jax.numpy as jnp

    params, train_step, x, y = _mlp_step(big)
    d = x.shape[1]
    a = (_normal(jax.random.key(80), (d, d), "float32") * 0.5).astype("float32")

    def solve(b):
        def cond(carry):
            z, previous, k = carry
            return (jnp.max(jnp.abs(z - previous)) > 1e-4) & (k < 200)

        def body(carry):
            z, _, k = carry
            return jnp.tanh(z @ a) + b, z, k + 1

        z, _, k = jax.lax.while_loop(cond, body, (b, b + 1.0, 0))
        return z.astype(x.dtype), k

    solver = jax.jit(solve)
    state = {"params": params, "iterations": []}
    b = x.astype("float32") * 0.1

    def iteration(i: int, clock: Clock) -> None:
        z, k = solver(b * (1 + 0.01 * (i % 3)))
        state["params"], value = train_step(state["params"], z, y)
        value.block_until_ready()
        state["iterations"].append(int(k))

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        ran = state["iterations"][-len(clock.iterations):]
        return {"solver_iterations": _number(statistics.mean(ran), "mean while_loop iterations per step", rel=0.01)}

    return Workload(iteration, extra=extra)


def int8_matmuls(big: bool) -> Workload:
    """A chain of int8 matmuls accumulating in int32 (a quantised model's inference), requantised to int8 between
    links; ablation: the same chain in bf16."""
    import jax
    import jax.numpy as jnp

    n, links = (8192, 4) if big else (256, 4)

    def chain(x, ws):
        for w in ws:
            acc = jax.lax.dot(x, w, preferred_element_type=jnp.int32)
            x = jnp.clip(acc >> 10, -127, 127).astype(x.dtype) if x.dtype == jnp.int8 else jnp.tanh(acc)
        return x

    run = jax.jit(chain)
    keys = jax.random.split(jax.random.key(90), links + 1)
    x8 = jax.random.randint(keys[0], (n, n), -64, 64, dtype=jnp.int8)
    ws8 = [jax.random.randint(k, (n, n), -64, 64, dtype=jnp.int8) for k in keys[1:]]
    x16, ws16 = x8.astype("bfloat16"), [w.astype("bfloat16") for w in ws8]
    run16 = jax.jit(lambda x, ws: [x := jnp.tanh(jax.lax.dot(x, w, preferred_element_type=jnp.float32)).astype(
        "bfloat16") for w in ws][-1])

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"ops_per_step": _number(2.0 * n ** 3 * links, "integer multiply-adds x 2 of the chain", rel=0.01),
                "speedup_vs_bf16": _number(_steady_ms(ablations["bf16"]) / _steady_ms(clock),
                                           "the bf16 chain's median iteration / the int8 chain's", rel=0.15)}

    return Workload(lambda i, clock: run(x8, ws8).block_until_ready(),
                    ablations={"bf16": lambda i, clock: run16(x16, ws16).block_until_ready()}, extra=extra)


def many_small_device_puts(big: bool) -> Workload:
    """Each annotated step copies 200 small host arrays (a dict of per-feature columns, 16 KiB each) to the device
    one by one with ``jax.device_put`` before a bf16 MLP train step on them; ablation: the columns stacked into one
    array and copied once."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    rows = x.shape[0]
    columns = [np.random.default_rng(n).standard_normal((rows // 4 if big else 16,), dtype=np.float32)
               for n in range(200)]
    stacked = np.stack(columns, axis=1)
    state = {"params": params}
    width = x.shape[1]

    @jax.jit
    def features(cols):
        wide = jnp.stack(cols, axis=1) if isinstance(cols, list) else cols
        return jnp.tile(wide, (4 if big else rows // 16, width // 200 + 1))[:rows, :width].astype(x.dtype)

    def run(batch) -> None:
        state["params"], value = train_step(state["params"], features(batch), y)
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"puts_per_step": _number(len(columns), "jax.device_put calls per step", abs=0)}

    return Workload(lambda i, clock: run([jax.device_put(c) for c in columns]),
                    ablations={"one_put": lambda i, clock: run(jax.device_put(stacked))}, extra=extra)


def scan_microbatches(big: bool) -> Workload:
    """Gradient accumulation over 8 micro-batches inside one jitted step (``lax.scan``), then the update: one
    program per annotated step; healthy."""
    import jax

    params, _, x, y = _mlp_step(big)
    micro = 8

    def step(params, x, y):
        xs, ys = x.reshape(micro, -1, x.shape[1]), y.reshape(micro, -1, y.shape[1])

        def accumulate(total, batch):
            grads = jax.grad(mlp_loss)(params, *batch)
            return [t + g.astype("float32") for t, g in zip(total, grads)], None

        zeros = [p.astype("float32") * 0 for p in params]
        total, _ = jax.lax.scan(accumulate, zeros, (xs, ys))
        return [(p - 1e-3 * g / micro).astype(p.dtype) for p, g in zip(params, total)]

    train_step = jax.jit(step, donate_argnums=0)
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"] = train_step(state["params"], x, y)
        state["params"][0].block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"micro_batches": _number(micro, "micro-batches scanned per step", abs=0)}

    return Workload(iteration, extra=extra)


def sleep_in_loop(big: bool) -> Workload:
    """The training loop paces itself: ``time.sleep(0.02)`` after each annotated bf16 MLP train step (a rate limit
    left in from debugging); Python tracer on; ablation: no sleep."""
    params, train_step, x, y = _mlp_step(big)
    state = {"params": params}

    def train() -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    def iteration(i: int, clock: Clock) -> None:
        train()
        with clock.part("sleep"):
            time.sleep(0.02)

    return Workload(iteration, ablations={"no_sleep": lambda i, clock: train()})


def json_logging_each_step(big: bool) -> Workload:
    """After each train step the training thread writes a log record: ``write_log_record`` turns a dict of
    per-parameter host statistics (tens of thousands of Python floats) into JSON and appends it to a file; nothing
    is read from the device for it. Python tracer on; ablation: a record every 20th step."""
    import json

    params, train_step, x, y = _mlp_step(big)
    folder = Path(tempfile.mkdtemp(prefix="logs-"))
    stats = {f"layer_{n}": [float(v) / 7 for v in range(n * 1000, n * 1000 + 6000)] for n in range(8)}
    state = {"params": params}

    def write_log_record(step: int) -> None:
        with open(folder / "train.jsonl", "a") as log:
            log.write(json.dumps({"step": step, "stats": stats}, sort_keys=True) + "\n")

    def loop(every: int):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = train_step(state["params"], x, y)
            value.block_until_ready()
            if i % every == every - 1:
                with clock.part("write_log_record"):
                    write_log_record(i)

        return iteration

    return Workload(loop(1), ablations={"every_20": loop(20)}, stop=lambda: shutil.rmtree(folder, ignore_errors=True))


def shard_boundary_stall(big: bool) -> Workload:
    """A 'loader' thread feeds a queue of two batches; every 8th batch starts a new shard, and ``open_shard``
    waits 250 ms for the storage and reads the shard's index, while the batches in between come from memory:
    every 8th step stalls. Python tracer on; ablation: every shard already open."""
    import jax
    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    ready = np.asarray(jax.device_get(x), dtype=np.float32)
    folder = Path(tempfile.mkdtemp(prefix="shards-"))
    index_file = folder / "index.bin"
    np.arange(2_000_000, dtype=np.int64).tofile(index_file)
    state = {"params": params}
    clocks: dict[str, Clock] = {}

    def open_shard() -> np.ndarray:
        started = time.perf_counter()
        time.sleep(0.250)  # the storage's latency to open a shard
        index = np.fromfile(index_file, dtype=np.int64)
        if "clock" in clocks:
            clocks["clock"].call("open_shard", (time.perf_counter() - started) * 1e3)
        return index

    def start(stalls: bool) -> tuple[queue.Queue, threading.Event]:
        batches: queue.Queue = queue.Queue(maxsize=2)
        stopping = threading.Event()

        def load() -> None:
            n = 0
            while not stopping.is_set():
                if stalls and n % 8 == 0:
                    open_shard()
                n += 1
                _put(batches, ready, stopping)

        threading.Thread(target=load, name="loader", daemon=True).start()
        return batches, stopping

    return _fed_by_a_loader(OneThreadAtATime(start), clocks, state, train_step, y, folder, "shards_open")


def python_list_features(big: bool) -> Workload:
    """Each annotated step builds its input with ``jnp.asarray`` of a nested Python list (rows of Python floats,
    as a feature pipeline written without numpy hands them over) in ``make_features``, then trains on it, traced
    without the Python tracer; ablation: the same values as a numpy array made once."""
    import jax.numpy as jnp
    import numpy as np

    params, train_step, x, y = _mlp_step(big, widths=[256, 4096, 4096, 256] if big else [64, 256, 256, 64])
    rows, width = (2048, 256) if big else (256, 64)
    table = np.random.default_rng(1).standard_normal((rows, width)).astype(np.float32)
    nested = table.tolist()
    labels = y[:rows]
    state = {"params": params}

    def make_features(values) -> object:
        return jnp.asarray(values, dtype="float32")

    def loop(values):
        def iteration(i: int, clock: Clock) -> None:
            with clock.part("make_features"):
                features = make_features(values)
            state["params"], value = train_step(state["params"], features, labels)
            value.block_until_ready()

        return iteration

    return Workload(loop(nested), ablations={"numpy_input": loop(table)})


def sort_heavy(big: bool) -> Workload:
    """A ranking step that sorts a large score matrix along its rows on the device (``jnp.sort``, to take the top
    16 of each row) after a small bf16 matmul, data resident; ablation: ``lax.top_k`` in place of the sort."""
    import jax
    import jax.numpy as jnp

    rows, cols, d = (4096, 32768, 256) if big else (256, 4096, 64)
    q = _normal(jax.random.key(50), (rows, d), "bfloat16")
    k = _normal(jax.random.key(51), (d, cols), "bfloat16")

    @jax.jit
    def rank_by_sort(q, k):
        scores = (q @ k).astype("float32")
        return jnp.sort(scores, axis=-1)[:, -16:]

    @jax.jit
    def rank_by_top_k(q, k):
        return jax.lax.top_k((q @ k).astype("float32"), 16)[0]

    def loop(rank):
        def iteration(i: int, clock: Clock) -> None:
            rank(q, k).block_until_ready()

        return iteration

    return Workload(loop(rank_by_sort), ablations={"top_k": loop(rank_by_top_k)})


def cond_heavy_every_nth(big: bool) -> Workload:
    """A bf16 MLP train step whose program, every 10th step, also takes a ``lax.cond`` branch with extra device
    work (a regulariser over 32 extra matmuls); one program, no compile, the host idle: slow steps that are the
    model's own work. Ablation: the branch never taken."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big)

    def loss(params, x, y, heavy):
        base = mlp_loss(params, x, y)

        def regulariser(_):
            h = x
            for _ in range(32):
                h = jnp.tanh(h @ params[0] @ params[-1])
            return jnp.mean(h.astype("float32") ** 2)

        return base + 1e-3 * jax.lax.cond(heavy, regulariser, lambda _: jnp.float32(0), None)

    @jax.jit
    def step(params, x, y, heavy):
        value, grads = jax.value_and_grad(loss)(params, x, y, heavy)
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value

    state = {"params": params}

    def loop(every: int | None):
        def iteration(i: int, clock: Clock) -> None:
            heavy = every is not None and i % every == every - 1
            state["params"], value = step(state["params"], x, y, jnp.bool_(heavy))
            value.block_until_ready()

        return iteration

    return Workload(loop(10), ablations={"never_heavy": loop(None)})


def host_offloaded_optimizer(big: bool) -> Workload:
    """The gradients come from a jit program; ``numpy_adam`` copies them to the host, updates the parameters and
    Adam's moments there in numpy, and the new parameters go back to the device every step. Python tracer on;
    ablation: the same Adam update jitted on the device."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    widths = [1024, 2048, 2048, 1024] if big else [128, 256, 256, 128]
    params, _, x, y = _mlp_step(big, "float32", widths, 2048 if big else 128)
    grad_fn = jax.jit(jax.grad(mlp_loss))
    host = {"params": [np.asarray(p) for p in jax.device_get(params)]}
    host["m"] = [np.zeros_like(p) for p in host["params"]]
    host["v"] = [np.zeros_like(p) for p in host["params"]]
    device = {"params": params, "m": [jnp.zeros_like(p) for p in params], "v": [jnp.zeros_like(p) for p in params]}

    def numpy_adam(grads) -> None:
        for n, g in enumerate(jax.device_get(grads)):
            host["m"][n] = 0.9 * host["m"][n] + 0.1 * g
            host["v"][n] = 0.999 * host["v"][n] + 0.001 * g * g
            host["params"][n] = host["params"][n] - 1e-3 * host["m"][n] / (np.sqrt(host["v"][n]) + 1e-8)

    @jax.jit
    def device_adam(params, m, v, grads):
        m = [0.9 * a + 0.1 * g for a, g in zip(m, grads)]
        v = [0.999 * a + 0.001 * g * g for a, g in zip(v, grads)]
        return [p - 1e-3 * a / (jnp.sqrt(b) + 1e-8) for p, a, b in zip(params, m, v)], m, v

    def iteration(i: int, clock: Clock) -> None:
        grads = grad_fn(device["params"], x, y)
        with clock.part("numpy_adam"):
            numpy_adam(grads)
        device["params"] = [jax.device_put(p) for p in host["params"]]
        jax.block_until_ready(device["params"])

    def on_device(i: int, clock: Clock) -> None:
        grads = grad_fn(device["params"], x, y)
        device["params"], device["m"], device["v"] = device_adam(device["params"], device["m"], device["v"], grads)
        jax.block_until_ready(device["params"])

    return Workload(iteration, ablations={"device_adam": on_device})


def near_memory_limit(big: bool) -> Workload:
    """A bf16 MLP train step whose batch is the largest (of a few tried) that XLA's memory analysis keeps within
    92 % of the chip's memory: healthy compute, memory nearly full."""
    import jax

    widths = [2048, 8192, 8192, 8192, 2048] if big else [256, 512, 512, 256]
    stats = jax.devices()[0].memory_stats() or {}
    limit = stats.get("bytes_limit", 0)
    chosen = None
    for batch in ((180224, 172032, 163840, 147456, 131072, 98304, 65536) if big and limit else (512,)):
        params, train_step, x, y = _mlp_step(big, widths=widths, batch=batch)
        peak = _program_stats(train_step, params, x, y)["peak_bytes"]
        if not limit or peak <= 0.92 * limit:
            chosen = (params, train_step, x, y, peak)
            break
        del params, x, y
    assert chosen is not None, "no batch fits"
    params, train_step, x, y, peak = chosen
    state = {"params": params}

    def iteration(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        truth = {"batch": _number(x.shape[0], "the batch the memory analysis let in", abs=0),
                 "peak_bytes": _number(peak, "compiled train step's memory_analysis() peak", rel=0.1)}
        if limit:
            truth["peak_memory_share"] = _number(peak / limit, "peak_bytes / the device's memory_stats() "
                                                               "bytes_limit", abs=0.05)
        return truth

    return Workload(iteration, extra=extra)


def threefry_dropout(big: bool) -> Workload:
    """A bf16 MLP train step with dropout after every layer, its masks drawn with JAX's default threefry random
    bits; ablation: the same step with the 'rbg' random-bit generator (jax.random.key(..., impl='rbg'))."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big, widths=[1024, 8192, 8192, 8192, 1024] if big else None)

    def loss(params, x, y, key):
        for n, w in enumerate(params[:-1]):
            x = jax.nn.relu(x.astype(w.dtype) @ w)
            keep = jax.random.bernoulli(jax.random.fold_in(key, n), 0.9, x.shape)
            x = jnp.where(keep, x / 0.9, 0).astype(w.dtype)
        return jnp.mean(((x @ params[-1]).astype("float32") - y) ** 2)

    @jax.jit
    def step(params, x, y, key):
        value, grads = jax.value_and_grad(loss)(params, x, y, key)
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value

    state = {"params": params}

    def loop(impl: str):
        base = jax.random.key(7, impl=impl)

        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], x, y, jax.random.fold_in(base, i + 1))
            value.block_until_ready()

        return iteration

    return Workload(loop("threefry2x32"), ablations={"rbg": loop("rbg")})


def tiny_scan_rnn(big: bool) -> Workload:
    """An RNN over a sequence as a ``lax.scan`` of 256 tiny steps (batch 8, hidden 128: one small matmul and a tanh
    each), forward and backward, trained; ablation: the same scan unrolled 16 steps at a time. (Every step's ops
    are events in the trace: a longer sequence makes a profile too large to keep.)"""
    import jax
    import jax.numpy as jnp

    length, batch, hidden = (256, 8, 128) if big else (256, 8, 64)
    w = _normal(jax.random.key(60), (hidden, hidden), "float32")
    xs = jax.random.normal(jax.random.key(61), (length, batch, hidden))

    def make_step(unroll: int):
        def loss(w, xs):
            def cell(h, x):
                h = jnp.tanh(h @ w + x)
                return h, None

            h, _ = jax.lax.scan(cell, jnp.zeros((batch, hidden)), xs, unroll=unroll)
            return jnp.mean(h ** 2)

        @jax.jit
        def step(w, xs):
            value, grad = jax.value_and_grad(loss)(w, xs)
            return w - 1e-3 * grad, value

        return step

    state = {"w": w}

    def loop(unroll: int):
        step = make_step(unroll)

        def iteration(i: int, clock: Clock) -> None:
            state["w"], value = step(state["w"], xs)
            value.block_until_ready()

        return iteration

    return Workload(loop(1), ablations={"unroll_16": loop(16)})


def eval_preds_to_host(big: bool) -> Workload:
    """An evaluation loop: each annotated step runs a jitted bf16 classifier and ``accuracy`` copies its f32 logits
    (8192 x 4096 on the chip) to the host to take the argmax and compare with numpy; Python tracer on; ablation:
    the accuracy computed on the device and one scalar read back."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rows, width, classes = (8192, 1024, 4096) if big else (512, 128, 256)
    params = _mlp_params([width, 4096 if big else 256, classes], "bfloat16")
    x = jax.random.normal(jax.random.key(70), (rows, width)).astype("bfloat16")
    labels = np.random.default_rng(2).integers(0, classes, rows)
    labels_on_device = jnp.asarray(labels)

    @jax.jit
    def logits(params, x):
        h = jax.nn.relu(x @ params[0])
        return (h @ params[1]).astype("float32")

    @jax.jit
    def device_accuracy(params, x, labels):
        return jnp.mean(jnp.argmax(logits(params, x), -1) == labels)

    state = {"correct": []}

    def accuracy(out) -> float:
        predicted = np.asarray(out).argmax(-1)
        return float((predicted == labels).mean())

    def iteration(i: int, clock: Clock) -> None:
        out = logits(params, x)
        with clock.part("accuracy"):
            state["correct"].append(accuracy(out))

    def on_device(i: int, clock: Clock) -> None:
        state["correct"].append(float(device_accuracy(params, x, labels_on_device)))

    return Workload(iteration, ablations={"device_accuracy": on_device})


def slow_consumer_thread(big: bool) -> Workload:
    """After each annotated bf16 MLP train step the training thread hands its metrics to a 'writer' thread through a
    queue of two; the writer sends each record to a slow sink (40 ms of latency), so the training thread blocks on
    ``put`` once the queue is full. Python tracer on; ablation: a sink without latency."""
    import jax

    params, train_step, x, y = _mlp_step(big)
    state = {"params": params, "sent": 0}

    def send_record(record: dict, latency: float) -> None:
        time.sleep(latency)  # the sink's round trip (a metrics service, a remote logger)
        state["sent"] += 1

    def start(latency: float) -> tuple[queue.Queue, threading.Event]:
        records: queue.Queue = queue.Queue(maxsize=2)
        stopping = threading.Event()

        def write() -> None:
            while not stopping.is_set():
                with contextlib.suppress(queue.Empty):
                    send_record(records.get(timeout=0.1), latency)

        threading.Thread(target=write, name="writer", daemon=True).start()
        return records, stopping

    writers = OneThreadAtATime(start)

    def loop(latency: float):
        def iteration(i: int, clock: Clock) -> None:
            records = writers.queue(latency)
            state["params"], value = train_step(state["params"], x, y)
            record = {"step": i, "loss": float(jax.device_get(value))}
            with clock.part("hand_over_record"):
                records.put(record)

        return iteration

    return Workload(loop(0.040), ablations={"fast_sink": loop(0.0)}, stop=writers.stop)


def debug_nans_enabled(big: bool) -> Workload:
    """A bf16 MLP train step run with ``jax_debug_nans`` left on (a debugging flag): after every jitted call JAX
    copies its outputs to the host and checks them for NaNs. Ablation: the flag off."""
    import jax

    params, train_step, x, y = _mlp_step(big)
    state = {"params": params}

    def loop(checking: bool):
        def iteration(i: int, clock: Clock) -> None:
            with jax.debug_nans(checking):
                state["params"], value = train_step(state["params"], x, y)
                value.block_until_ready()

        return iteration

    return Workload(loop(True), ablations={"no_nan_checks": loop(False)})


def _make_batch_in_worker(shape: tuple[int, int]):
    import numpy as np

    return np.random.default_rng().standard_normal(shape, dtype=np.float32)


def worker_process_loader(big: bool) -> Workload:
    """Two worker processes (multiprocessing) make f32 batches (4096 x 4096 on the chip, 64 MiB) that reach the
    training thread pickled through a pipe: each annotated step takes the next from ``imap`` and copies it to the
    device. Python tracer on; ablation: the batch already in the training process."""
    import multiprocessing

    import jax
    import numpy as np

    rows, width = (4096, 4096) if big else (512, 1024)
    params, train_step, _, y = _mlp_step(big, widths=[width, 4096, 4096, 1024] if big else [width, 256, 256, 256],
                                         batch=rows)
    ready = np.random.default_rng(0).standard_normal((rows, width), dtype=np.float32)
    pool = multiprocessing.get_context("spawn").Pool(2)
    batches = pool.imap(functools.partial(_make_batch_in_worker), [(rows, width)] * 10_000)
    state = {"params": params}

    def loop(from_workers: bool):
        def iteration(i: int, clock: Clock) -> None:
            with clock.part("next_batch"):
                batch = next(batches) if from_workers else ready
            state["params"], value = train_step(state["params"], jax.device_put(batch), y)
            value.block_until_ready()

        return iteration

    def stop() -> None:
        pool.terminate()

    return Workload(loop(True), ablations={"in_process": loop(False)}, stop=stop)


def host_histograms(big: bool) -> Workload:
    """After each annotated bf16 MLP train step, ``param_histograms`` copies the parameters to the host and takes a
    64-bin numpy histogram of each (a dashboard's weight histograms); Python tracer on; ablation: the histograms
    every 20th step."""
    import jax
    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    state = {"params": params, "histograms": []}

    def param_histograms(params) -> None:
        state["histograms"].append([np.histogram(np.asarray(p, dtype=np.float32), bins=64)[0]
                                    for p in jax.device_get(params)])

    def loop(every: int):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = train_step(state["params"], x, y)
            value.block_until_ready()
            if i % every == every - 1:
                with clock.part("param_histograms"):
                    param_histograms(state["params"])

        return iteration

    return Workload(loop(1), ablations={"every_20": loop(20)})


def f32_params_bf16_compute(big: bool) -> Workload:
    """Mixed precision by hand: the MLP's parameters are kept in f32 and cast to bf16 inside every train step for
    the matmuls (the gradients cast back), data resident; ablation: the same step with bf16 parameters."""
    import jax
    import jax.numpy as jnp

    widths = [2048, 8192, 8192, 2048] if big else [256, 512, 512, 256]
    batch = 512 if big else 64
    master = _mlp_params(widths, "float32")
    x = jax.random.normal(jax.random.key(80), (batch, widths[0])).astype("bfloat16")
    y = jnp.zeros((batch, widths[-1]), "float32")

    def loss(params, x, y):
        return mlp_loss([p.astype("bfloat16") for p in params], x, y)

    f32_step, bf16_step = sgd(loss), sgd(mlp_loss)
    state = {"f32": master, "bf16": [p.astype("bfloat16") for p in master]}

    def loop(kind: str, step):
        def iteration(i: int, clock: Clock) -> None:
            state[kind], value = step(state[kind], x, y)
            value.block_until_ready()

        return iteration

    return Workload(loop("f32", f32_step), ablations={"bf16_params": loop("bf16", bf16_step)})


def deepcopy_state_each_step(big: bool) -> Workload:
    """Before each annotated bf16 MLP train step the training thread keeps a ``copy.deepcopy`` of its Python-side
    state (a dict of per-example bookkeeping: lists of floats and strings), as an undo buffer, traced without the
    Python tracer; ablation: no copy."""
    import copy

    params, train_step, x, y = _mlp_step(big)
    bookkeeping = {f"example_{n}": {"loss": [0.1 * k for k in range(8)], "tags": ["train", str(n)]}
                   for n in range(20_000 if big else 10_000)}
    state = {"params": params, "undo": None}

    def train() -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    def iteration(i: int, clock: Clock) -> None:
        with clock.part("deepcopy"):
            state["undo"] = copy.deepcopy(bookkeeping)
        train()

    return Workload(iteration, ablations={"no_copy": lambda i, clock: train()})


def async_save_waited(big: bool) -> Workload:
    """An 'asynchronous' checkpointer: every 5th annotated step hands the parameters to a saver thread
    (``save_in_background``: device_get + np.savez), but the loop then calls ``wait_until_finished`` right away, as
    a misread of an async checkpointing API does; Python tracer on; ablation: no save."""
    import jax
    import numpy as np

    params, train_step, x, y = _mlp_step(big, "float32", [4096] * 4 if big else [1024] * 4, 2048 if big else 8)
    folder = Path(tempfile.mkdtemp(prefix="checkpoint-"))
    state = {"params": params, "saver": None}

    def save_in_background(params, step: int) -> None:
        np.savez(folder / f"step-{step}.npz", *jax.device_get(params))

    def wait_until_finished() -> None:
        if state["saver"] is not None:
            state["saver"].join()

    def train() -> None:
        state["params"], value = train_step(state["params"], x, y)
        value.block_until_ready()

    def iteration(i: int, clock: Clock) -> None:
        train()
        if i % 5 == 4:
            with clock.part("save"):
                state["saver"] = threading.Thread(target=save_in_background, args=(state["params"], i),
                                                  name="saver")
                state["saver"].start()
                wait_until_finished()

    return Workload(iteration, ablations={"no_save": lambda i, clock: train()},
                    stop=lambda: shutil.rmtree(folder, ignore_errors=True))


def scatter_add_pooling(big: bool) -> Workload:
    """A pooling step: a bf16 projection of many rows, then their sums per segment by ``.at[ids].add`` over
    unsorted segment ids (a scatter-add on the device), data resident; ablation: the same sums as a one-hot
    matmul."""
    import jax
    import jax.numpy as jnp

    rows, d, segments = (262144, 256, 1024) if big else (16384, 64, 256)
    x = _normal(jax.random.key(60), (rows, d), "bfloat16")
    w = _normal(jax.random.key(61), (d, d), "bfloat16")
    ids = jax.random.randint(jax.random.key(62), (rows,), 0, segments)

    @jax.jit
    def pool_by_scatter(x, w, ids):
        h = jax.nn.gelu(x @ w).astype("float32")
        return jnp.zeros((segments, d), "float32").at[ids].add(h)

    @jax.jit
    def pool_by_matmul(x, w, ids):
        h = jax.nn.gelu(x @ w)
        return jnp.dot(jax.nn.one_hot(ids, segments, dtype=h.dtype).T, h, preferred_element_type="float32")

    def loop(pool):
        def iteration(i: int, clock: Clock) -> None:
            pool(x, w, ids).block_until_ready()

        return iteration

    return Workload(loop(pool_by_scatter), ablations={"one_hot_matmul": loop(pool_by_matmul)})


def many_param_leaves(big: bool) -> Workload:
    """A model of 500 small parameter arrays (per-feature scales, 256 f32 each) trained by a jitted SGD step that
    takes and returns them as a list: every call flattens, checks and hands over 500 buffers each way around a
    few microseconds of device work. Ablation: the same parameters stacked into one (500, 256) array."""
    import jax
    import jax.numpy as jnp

    leaves, width, batch = 500, 256, (1024 if big else 64)
    x = jax.random.normal(jax.random.key(63), (batch, width))

    def loss(stacked, x):
        return jnp.mean(jnp.tanh(x @ stacked.T) ** 2)

    @functools.partial(jax.jit, donate_argnums=0)
    def step_on_leaves(params, x):
        value, grads = jax.value_and_grad(lambda ps: loss(jnp.stack(ps), x))(params)
        return [p - 1e-3 * g for p, g in zip(params, grads)], value

    @functools.partial(jax.jit, donate_argnums=0)
    def step_on_stack(stacked, x):
        value, grads = jax.value_and_grad(loss)(stacked, x)
        return stacked - 1e-3 * grads, value

    state = {"leaves": [jnp.full((width,), 1.0 + n * 1e-4, "float32") for n in range(leaves)]}
    state["stack"] = jnp.stack(state["leaves"])

    def loop(key: str, step):
        def iteration(i: int, clock: Clock) -> None:
            state[key], value = step(state[key], x)
            value.block_until_ready()

        return iteration

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"parameter_arrays": _number(leaves, "arrays the step takes and returns", abs=0)}

    return Workload(loop("leaves", step_on_leaves), ablations={"one_array": loop("stack", step_on_stack)},
                    extra=extra)


def python_thread_beside_training(big: bool) -> Workload:
    """A 'tokenizer' thread pre-tokenises the next shard in pure Python, continuously, while the training thread runs
    bf16 MLP train steps on resident data: the training thread never waits for it, but each time it needs the GIL
    back (to launch, after a block_until_ready) it waits for the tokenizer to let go. Python tracer on; ablation: no
    tokenizer thread."""
    params, train_step, x, y = _mlp_step(big)
    state = {"params": params}
    clocks: dict = {}
    def tokenize_shard(shard: int) -> int:
        token = shard
        for position in range(100_000):  # no calls inside: the tracer records one event per shard
            token = (token * 31 + position) % 1_000_003
        return token

    def start(running: bool) -> tuple[queue.Queue, threading.Event]:
        stopping = threading.Event()

        def tokenize() -> None:
            shard = 0
            while running and not stopping.is_set():
                started = time.perf_counter()
                tokenize_shard(shard)
                shard += 1
                if clock := clocks.get("clock"):
                    clock.call("tokenize_shard", (time.perf_counter() - started) * 1e3)

        threading.Thread(target=tokenize, name="tokenizer", daemon=True).start()
        return queue.Queue(), stopping

    tokenizers = OneThreadAtATime(start)

    def loop(running: bool):
        def iteration(i: int, clock: Clock) -> None:
            clocks["clock"] = clock if running else None
            tokenizers.queue(running)
            state["params"], value = train_step(state["params"], x, y)
            value.block_until_ready()

        return iteration

    return Workload(loop(True), ablations={"no_tokenizer": loop(False)}, stop=tokenizers.stop)


def _kv_decode(layers: int, positions: int, d: int, *, batch_major: bool, seed: int):
    """A decode step ``(cache, x, position) -> (cache, x)`` through ``layers`` bf16 blocks that write each token's
    keys and values into the cache, laid out [layers, 2, batch, positions, d] (``batch_major``) or [layers, 2,
    positions, batch, d], and attend over it."""
    import jax
    import jax.numpy as jnp

    w = _normal(jax.random.key(seed), (layers, 3, d, d), "bfloat16")

    def decode(cache, x, position):
        for layer in range(layers):
            q, k, v = (x @ w[layer, n] for n in range(3))
            if batch_major:
                cache = cache.at[layer, 0, :, position].set(k).at[layer, 1, :, position].set(v)
                keys, values = cache[layer, 0], cache[layer, 1]
            else:
                cache = cache.at[layer, 0, position].set(k).at[layer, 1, position].set(v)
                keys, values = cache[layer, 0].swapaxes(0, 1), cache[layer, 1].swapaxes(0, 1)
            scores = jnp.einsum("bd,bpd->bp", q, keys).astype("float32") / jnp.sqrt(d)
            scores = jnp.where(jnp.arange(positions) <= position, scores, -jnp.inf)
            x = x + jnp.einsum("bp,bpd->bd", jax.nn.softmax(scores).astype(x.dtype), values)
        return cache, x / jnp.linalg.norm(x.astype("float32"), axis=-1, keepdims=True).astype(x.dtype)

    return decode


def undonated_kv_cache(big: bool) -> Workload:
    """Token-by-token decode that writes each token's keys and values into a preallocated bf16 cache (16 layers,
    batch 8, 4096 positions, d 1024 on the chip: 2 GiB) and attends over it, with a jit that does not donate the
    cache: every step copies the whole cache into a new buffer to change one position. Ablation:
    ``donate_argnums`` on the cache."""
    import jax
    import jax.numpy as jnp

    layers, batch, positions, d = (16, 8, 4096, 1024) if big else (4, 4, 512, 64)
    decode = _kv_decode(layers, positions, d, batch_major=True, seed=64)
    copying, in_place = jax.jit(decode), jax.jit(decode, donate_argnums=0)
    state = {"cache": jnp.zeros((layers, 2, batch, positions, d), "bfloat16"),
             "x": jnp.ones((batch, d), "bfloat16")}

    def loop(step):
        def iteration(i: int, clock: Clock) -> None:
            state["cache"], state["x"] = step(state["cache"], state["x"], jnp.int32(i % positions))
            state["x"].block_until_ready()

        return iteration

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        return {"cache_bytes": _number(state["cache"].nbytes, "the cache's nbytes, copied once per step", rel=0.01)}

    return Workload(loop(copying), ablations={"donated_cache": loop(in_place)}, extra=extra)


def iterate_device_array(big: bool) -> Workload:
    """After each annotated bf16 MLP train step, ``sum_losses`` adds up the step's 256 per-example losses one element
    at a time (``for value in losses: total += float(value)``): an eager slice on the device and a copy back per
    element. Python tracer on; ablation: one ``np.asarray(losses).sum()``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params, _, x, y = _mlp_step(big)

    def per_example(params, x, y):
        for w in params[:-1]:
            x = jax.nn.relu(x @ w)
        return jnp.mean(((x @ params[-1]).astype("float32") - y) ** 2, axis=-1)

    def mean_and_losses(params, x, y):
        losses = per_example(params, x, y)
        return jnp.mean(losses), losses[:256]

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(params, x, y):
        (_, losses), grads = jax.value_and_grad(mean_and_losses, has_aux=True)(params, x, y)
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], losses

    state = {"params": params, "total": 0.0}

    def sum_losses(losses) -> float:
        total = 0.0
        for value in losses:
            total += float(value)
        return total

    def loop(add_up: Callable):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], losses = train_step(state["params"], x, y)
            with clock.part("sum_losses"):
                state["total"] += add_up(losses)

        return iteration

    return Workload(loop(sum_losses), ablations={"one_copy": loop(lambda losses: float(np.asarray(losses).sum()))})


def boolean_mask_selection(big: bool) -> Workload:
    """Each annotated step keeps the batch's hard examples with a boolean mask (``x[losses > threshold]``, eager: its
    size is known only once the device has computed it) and trains a jitted bf16 MLP step on them; the threshold
    follows a schedule, so every step has a new count of hard examples: a copy back for the mask's size and a
    compile for each new shape. Ablation: the full batch with the easy examples weighted 0 (one shape, no sync)."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big)
    x = x * jnp.linspace(0.5, 1.5, x.shape[0], dtype="float32")[:, None].astype(x.dtype)

    def per_example(params, x, y):
        for w in params[:-1]:
            x = jax.nn.relu(x @ w)
        return jnp.mean(((x @ params[-1]).astype("float32") - y) ** 2, axis=-1)

    @jax.jit
    def losses_of(params, x, y):
        return per_example(params, x, y)

    @functools.partial(jax.jit, donate_argnums=0)
    def weighted_step(params, x, y, weights):
        value, grads = jax.value_and_grad(lambda p: jnp.sum(per_example(p, x, y) * weights)
                                          / jnp.maximum(jnp.sum(weights), 1.0))(params)
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value

    state = {"params": params}

    def threshold(losses, i: int):
        return jnp.quantile(losses, 0.2 + 0.03 * (i % 20))

    def select_hard(i: int, clock: Clock) -> None:
        losses = losses_of(state["params"], x, y)
        hard = losses > threshold(losses, i)
        state["params"], value = weighted_step(state["params"], x[hard], y[hard], jnp.ones(int(hard.sum())))
        value.block_until_ready()

    def weight_hard(i: int, clock: Clock) -> None:
        losses = losses_of(state["params"], x, y)
        weights = (losses > threshold(losses, i)).astype("float32")
        state["params"], value = weighted_step(state["params"], x, y, weights)
        value.block_until_ready()

    return Workload(select_hard, ablations={"fixed_shape": weight_hard})


def python_augment_loader(big: bool) -> Workload:
    """A 'loader' thread augments each batch in pure Python (a per-row jitter computed in a loop over the rows,
    then one numpy multiply) and hands it over a queue of two; it is slower than the bf16 MLP step, and its Python
    also holds the interpreter the training thread needs. Python tracer on; ablation: the batches made before the
    loop (the same thread, no augmentation)."""
    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    rows = x.shape[0]
    base = np.random.default_rng(0).standard_normal(x.shape, dtype=np.float32)
    state = {"params": params}
    clocks: dict[str, Clock] = {}

    def augment(seed: int) -> np.ndarray:
        jitter, value = [], seed
        for _ in range(rows):
            for _ in range(60 if big else 30):  # a per-row random walk, in Python: no calls inside
                value = (value * 1103515245 + 12345) % 2147483648
            jitter.append(0.9 + 0.2 * value / 2147483648)
        return base * np.asarray(jitter, dtype=np.float32)[:, None]

    def start(slow: bool) -> tuple[queue.Queue, threading.Event]:
        batches: queue.Queue = queue.Queue(maxsize=2)
        stopping = threading.Event()

        def load() -> None:
            seed = 0
            while not stopping.is_set():
                started = time.perf_counter()
                batch = augment(seed) if slow else base
                if slow and "clock" in clocks:
                    clocks["clock"].call("augment", (time.perf_counter() - started) * 1e3)
                seed += 1
                _put(batches, batch, stopping)

        threading.Thread(target=load, name="loader", daemon=True).start()
        return batches, stopping

    return _fed_by_a_loader(OneThreadAtATime(start), clocks, state, train_step, y,
                            Path(tempfile.mkdtemp(prefix="augment-")), "no_augmentation")


def eager_metrics_each_step(big: bool) -> Workload:
    """After each annotated bf16 MLP train step, five metrics are updated with eager jnp calls outside the jit (a
    moving average of the loss, an accuracy from the logits' argmax): a few small launches beside a step of
    milliseconds, not read back. Ablation: the same metrics computed inside the jitted step."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big)
    labels = jnp.argmax(y + jax.random.normal(jax.random.key(70), y.shape), axis=-1)

    def forward(params, x):
        for w in params[:-1]:
            x = jax.nn.relu(x @ w)
        return (x @ params[-1]).astype("float32")

    def loss_and_logits(params, x, y):
        logits = forward(params, x)
        return jnp.mean((logits - y) ** 2), logits

    @functools.partial(jax.jit, donate_argnums=0)
    def step(params, x, y):
        (value, logits), grads = jax.value_and_grad(loss_and_logits, has_aux=True)(params, x, y)
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value, logits

    @functools.partial(jax.jit, donate_argnums=(0, 3))
    def step_with_metrics(params, x, y, metrics):
        params, value, logits = step.__wrapped__(params, x, y)
        ema, correct, seen = metrics
        return params, (0.99 * ema + 0.01 * value, correct + jnp.sum(jnp.argmax(logits, -1) == labels),
                        seen + labels.shape[0])

    state = {"params": params, "metrics": (jnp.float32(0), jnp.int32(0), jnp.int32(0))}

    def eager(i: int, clock: Clock) -> None:
        state["params"], value, logits = step(state["params"], x, y)
        ema, correct, seen = state["metrics"]
        state["metrics"] = (0.99 * ema + 0.01 * value, correct + jnp.sum(jnp.argmax(logits, -1) == labels),
                            seen + labels.shape[0])
        state["metrics"][0].block_until_ready()

    def inside(i: int, clock: Clock) -> None:
        state["params"], state["metrics"] = step_with_metrics(state["params"], x, y, state["metrics"])
        state["metrics"][0].block_until_ready()

    return Workload(eager, ablations={"metrics_in_the_step": inside})


def uint8_prefetch_healthy(big: bool) -> Workload:
    """A 'prefetch' thread copies uint8 image batches (numpy, from a pool) to the device two steps ahead of a bf16
    MLP train step that casts and scales them on the device: the copies overlap the steps and the chip stays
    busy. Ablation: the batch resident."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params, _, x_resident, y = (_mlp_step(big, widths=[1024, 8192, 8192, 1024], batch=8192) if big
                                else _mlp_step(big, "float32", [256, 1024, 1024, 256], 512))
    pool = [np.random.default_rng(n).integers(0, 256, x_resident.shape, dtype=np.uint8) for n in range(4)]
    resident = jax.device_put(pool[0])

    def loss(params, images, y):
        return mlp_loss(params, (images.astype(params[0].dtype) / 255).astype(params[0].dtype), y)

    train_step = sgd(loss)
    state = {"params": params}

    def start(version: bool) -> tuple[queue.Queue, threading.Event]:
        batches: queue.Queue = queue.Queue(maxsize=2)
        stopping = threading.Event()

        def prefetch() -> None:
            n = 0
            while not stopping.is_set():
                on_device = jax.device_put(pool[n % len(pool)])
                n += 1
                _put(batches, on_device, stopping)

        threading.Thread(target=prefetch, name="prefetch", daemon=True).start()
        return batches, stopping

    prefetchers = OneThreadAtATime(start)

    def iteration(i: int, clock: Clock) -> None:
        batches = prefetchers.queue(True)
        with clock.part("wait_for_batch"):
            batch = batches.get()
        state["params"], value = train_step(state["params"], batch, y)
        value.block_until_ready()

    def on_device(i: int, clock: Clock) -> None:
        state["params"], value = train_step(state["params"], resident, y)
        value.block_until_ready()

    return Workload(iteration, ablations={"data_resident": on_device}, stop=prefetchers.stop)


def clip_decided_on_host(big: bool) -> Workload:
    """Each annotated step computes the gradients in one jitted call, their global norm with eager jnp calls
    (one per parameter, then a float() that waits for them), decides the clipping scale in Python and applies the
    update in a second jitted call. Ablation: the clipping inside one jitted step."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big, widths=[1024] + [2048] * 8 + [1024] if big else [64] + [128] * 8 + [64],
                                batch=1024 if big else 64)
    grad_of = jax.jit(jax.grad(mlp_loss))

    @functools.partial(jax.jit, donate_argnums=0)
    def apply(params, grads, scale):
        return [(p - 1e-3 * scale * g).astype(p.dtype) for p, g in zip(params, grads)]

    @functools.partial(jax.jit, donate_argnums=0)
    def clipped_step(params, x, y):
        grads = jax.grad(mlp_loss)(params, x, y)
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype("float32"))) for g in grads))
        return [(p - 1e-3 * jnp.minimum(1.0, 1.0 / norm) * g).astype(p.dtype) for p, g in zip(params, grads)]

    state = {"params": params}

    def on_host(i: int, clock: Clock) -> None:
        grads = grad_of(state["params"], x, y)
        norm = float(jnp.sqrt(sum(jnp.sum(jnp.square(g.astype("float32"))) for g in grads)))
        state["params"] = apply(state["params"], grads, min(1.0, 1.0 / norm))
        jax.block_until_ready(state["params"])

    def in_the_step(i: int, clock: Clock) -> None:
        state["params"] = clipped_step(state["params"], x, y)
        jax.block_until_ready(state["params"])

    return Workload(on_host, ablations={"clip_in_the_step": in_the_step})


def float64_batch_promotes(big: bool) -> Workload:
    """With ``jax_enable_x64`` on (as a port of numpy code leaves it), each annotated step hands an f32 MLP train
    step a numpy float64 batch straight from numpy: the batch's dtype promotes every matmul of the step to float64,
    which the chip emulates. Ablation: the batch cast to float32 on the host first."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    widths, batch = ([1024, 2048, 2048, 1024], 2048) if big else ([128, 256, 256, 128], 256)
    params = _mlp_params(widths, "float32")
    rng = np.random.default_rng(71)
    x64 = rng.standard_normal((batch, widths[0]))  # float64, numpy's default
    y = np.zeros((batch, widths[-1]))

    def loss(params, x, y):
        for w in params[:-1]:
            x = jax.nn.relu(x @ w)
        return jnp.mean((x @ params[-1] - y) ** 2)

    @functools.partial(jax.jit, donate_argnums=0)
    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value

    state = {"params": params}

    def run(x, y):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], x, y)
            value.block_until_ready()

        return iteration

    return Workload(run(x64, y), ablations={"float32_batch": run(x64.astype(np.float32), y.astype(np.float32))})


def callback_in_loop_body(big: bool) -> Workload:
    """A jitted step whose ``lax.fori_loop`` of 32 refinement iterations calls back to the host in every iteration
    (``jax.pure_callback`` for a numpy clipping bound): 32 round trips to Python per step. Ablation: the bound
    computed on the device."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    n = 2048 if big else 256
    a = _normal(jax.random.key(72), (n, n), "float32")
    x0 = jnp.ones((n, n // 8), "float32")

    def host_bound(v: np.ndarray) -> np.ndarray:
        return np.float32(np.percentile(np.abs(np.asarray(v)), 99) + 1e-3)

    def refine(on_host: bool):
        @jax.jit
        def run(x):
            def body(_, x):
                x = jnp.tanh(a @ x)
                bound = (jax.pure_callback(host_bound, jax.ShapeDtypeStruct((), jnp.float32), x[:64])
                         if on_host else jnp.percentile(jnp.abs(x[:64]), 99) + 1e-3)
                return jnp.clip(x, -bound, bound)

            return jax.lax.fori_loop(0, 32, body, x)

        return lambda i, clock: run(x0).block_until_ready()

    return Workload(refine(True), ablations={"bound_on_device": refine(False)})


def grad_accumulation_in_python(big: bool) -> Workload:
    """Gradient accumulation over 8 micro-batches in a Python loop: a jitted gradient per micro-batch, the sum with
    eager ``jax.tree.map`` adds, and ``float(loss)`` after each micro-batch for a running average; then a jitted
    update. Ablation: the 8 micro-batches in one jitted ``lax.scan`` with the update."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big, widths=[1024, 2048, 2048, 1024] if big else [64, 128, 128, 64],
                                batch=8 * (512 if big else 32))
    micro_x, micro_y = x.reshape(8, -1, x.shape[1]), y.reshape(8, -1, y.shape[1])
    grad_of = jax.jit(jax.value_and_grad(mlp_loss))

    @functools.partial(jax.jit, donate_argnums=0)
    def update(params, grads):
        return [(p - 1e-3 * g / 8).astype(p.dtype) for p, g in zip(params, grads)]

    @functools.partial(jax.jit, donate_argnums=0)
    def scanned(params, micro_x, micro_y):
        def accumulate(total, batch):
            value, grads = jax.value_and_grad(mlp_loss)(params, *batch)
            return [t + g for t, g in zip(total, grads)], value

        grads, values = jax.lax.scan(accumulate, [jnp.zeros_like(p) for p in params], (micro_x, micro_y))
        return [(p - 1e-3 * g / 8).astype(p.dtype) for p, g in zip(params, grads)], jnp.mean(values)

    state = {"params": params, "seen": 0.0}

    def in_python(i: int, clock: Clock) -> None:
        total = None
        for k in range(8):
            value, grads = grad_of(state["params"], micro_x[k], micro_y[k])
            total = grads if total is None else jax.tree.map(jnp.add, total, grads)
            state["seen"] += float(value)
        state["params"] = update(state["params"], total)
        jax.block_until_ready(state["params"])

    def in_one_program(i: int, clock: Clock) -> None:
        state["params"], value = scanned(state["params"], micro_x, micro_y)
        state["seen"] += float(value)

    return Workload(in_python, ablations={"one_scan": in_one_program})


def python_convergence_loop(big: bool) -> Workload:
    """Each annotated step solves a fixed point from Python: ``while float(change) > tol`` around a small jitted
    update (one 1024x1024 f32 matvec block on the chip), at most 40 iterations, each reading the change back to
    decide on the next. Ablation: the same iteration in one ``lax.while_loop``."""
    import jax
    import jax.numpy as jnp

    n = 1024 if big else 128
    most = 40  # iterations
    a = _normal(jax.random.key(73), (n, n), "float32") * 0.5
    b = jnp.ones((n, 8), "float32")

    @jax.jit
    def update(x):
        new = jnp.tanh(a @ x + b)
        return new, jnp.max(jnp.abs(new - x))

    @jax.jit
    def solve(x):
        def go_on(state):
            return (state[1] > 1e-4) & (state[2] < most)

        def step(state):
            return (*update.__wrapped__(state[0]), state[2] + 1)

        return jax.lax.while_loop(go_on, step, (x, jnp.float32(1.0), 0))[0]

    x0 = jnp.zeros((n, 8), "float32")

    def from_python(i: int, clock: Clock) -> None:
        x, change, iterations = x0, 1.0, 0
        while change > 1e-4 and iterations < most:  # a fixed point the chip's rounding never reaches
            x, delta = update(x)
            change, iterations = float(delta), iterations + 1

    return Workload(from_python, ablations={"one_while_loop": lambda i, clock: solve(x0).block_until_ready()})


def closed_over_table(big: bool) -> Workload:
    """A bf16 MLP train step that closes over a large numpy lookup table (64 MiB of f32 on the chip, a per-class
    weight), which XLA embeds in the program as a constant: a long first compile, nothing per step. Healthy in the
    steady state. Ablation: the table passed as an argument."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params, _, x, y = _mlp_step(big)
    table = np.random.default_rng(74).random((4096, 4096) if big else (256, 256), dtype=np.float32)
    rows = x.shape[0]

    def loss(params, x, y, weights):
        scale = jnp.mean(weights[: rows % weights.shape[0] + 1]) + 0.5
        return mlp_loss(params, x, y) * scale

    closed = sgd(lambda params, x, y: loss(params, x, y, table))
    passed = sgd(loss)
    on_device = jax.device_put(table)
    state = {"params": params}

    def run(step, *extra):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], x, y, *extra)
            value.block_until_ready()

        return iteration

    return Workload(run(closed), ablations={"table_as_argument": run(passed, on_device)})


def eager_row_writes(big: bool) -> Workload:
    """Each annotated step encodes 32 chunks with a small jitted function and writes each result into a preallocated
    (32, 2M) f32 buffer (256 MiB on the chip) with an eager ``buffer.at[i].set(row)``, a new buffer each time, then
    trains a bf16 MLP step weighted by the buffer's mean. Ablation: the 32 rows stacked once (``jnp.stack``)."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big)
    rows, width = 32, (1 << 21) if big else (1 << 14)
    chunks = [jax.random.normal(key, (width,)) for key in jax.random.split(jax.random.key(80), rows)]
    encode = jax.jit(lambda chunk: jnp.tanh(chunk) * 0.5)
    step = sgd(lambda params, x, y, features: mlp_loss(params, x, y) * (1 + 1e-3 * jnp.mean(features)))
    state = {"params": params, "buffer": jnp.zeros((rows, width), "float32")}

    def row_by_row(i: int, clock: Clock) -> None:
        buffer = state["buffer"]
        for row, chunk in enumerate(chunks):
            buffer = buffer.at[row].set(encode(chunk))
        state["buffer"] = buffer
        state["params"], value = step(state["params"], x, y, buffer)
        value.block_until_ready()

    def stacked(i: int, clock: Clock) -> None:
        state["buffer"] = jnp.stack([encode(chunk) for chunk in chunks])
        state["params"], value = step(state["params"], x, y, state["buffer"])
        value.block_until_ready()

    return Workload(row_by_row, ablations={"stacked_once": stacked})


def params_on_cpu_backend(big: bool) -> Workload:
    """The parameters and the batch were placed on ``jax.devices("cpu")[0]`` (a loading helper's device left in
    place), so the jitted f32 MLP train step follows its committed arguments onto the host's CPU while the chip
    idles. Ablation: the same arrays on the default device."""
    import jax

    sizes = {"dtype": "float32", "widths": [256, 1024, 1024, 256], "batch": 256}
    params, step, x, y = _mlp_step(big, **sizes)
    twin = _mlp_step(big, **sizes)[0]  # its own buffers: each version's step donates its parameters
    cpu, default = jax.devices("cpu")[0], jax.devices()[0]
    on_cpu = {"params": jax.device_put(params, cpu), "x": jax.device_put(x, cpu), "y": jax.device_put(y, cpu)}
    on_default = {"params": jax.device_put(twin, default), "x": x, "y": y}

    def run(state: dict):
        return _training(state, step, state["x"], state["y"])

    return Workload(run(on_cpu), ablations={"on_the_default_device": run(on_default)})


def history_stack_each_step(big: bool) -> Workload:
    """After each annotated bf16 MLP train step the loss is appended to a Python list of device scalars and the
    running mean over the whole history is recomputed with ``jnp.mean(jnp.stack(history))``: a concatenation of a
    new number of arrays every step, compiled anew each time. Ablation: a running sum on the device."""
    import jax.numpy as jnp

    params, step, x, y = _mlp_step(big)
    state = {"params": params, "history": [], "total": jnp.float32(0), "mean": None}

    def stacked(i: int, clock: Clock) -> None:
        state["params"], value = step(state["params"], x, y)
        state["history"].append(value)
        state["mean"] = jnp.mean(jnp.stack(state["history"]))
        state["mean"].block_until_ready()

    def running_sum(i: int, clock: Clock) -> None:
        state["params"], value = step(state["params"], x, y)
        state["total"] = state["total"] + value
        state["mean"] = state["total"] / (i + 1)
        state["mean"].block_until_ready()

    return Workload(stacked, ablations={"running_sum": running_sum})


def eigh_each_step(big: bool) -> Workload:
    """A bf16 MLP train step whose first layer's gradient is whitened by a preconditioner recomputed every step
    inside the jit: ``jnp.linalg.eigh`` of the 1024x1024 f32 gradient covariance (an iterative eigensolver on the
    chip). Ablation: the preconditioner recomputed every 10th step and reused in between."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big)
    n = params[0].shape[0]

    def preconditioner(g):
        g = g.astype("float32")
        values, vectors = jnp.linalg.eigh(g @ g.T / g.shape[1] + 1e-3 * jnp.eye(n))
        return (vectors * jax.lax.rsqrt(values + 1e-3)) @ vectors.T

    def apply(params, grads, p0):
        grads = [(p0 @ grads[0].astype("float32")).astype(grads[0].dtype), *grads[1:]]
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)]

    @functools.partial(jax.jit, donate_argnums=0)
    def fresh(params, x, y):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        p0 = preconditioner(grads[0])
        return apply(params, grads, p0), value, p0

    @functools.partial(jax.jit, donate_argnums=0)
    def reused(params, x, y, p0):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        return apply(params, grads, p0), value

    state = {"params": params, "p0": None}

    def every_step(i: int, clock: Clock) -> None:
        state["params"], value, state["p0"] = fresh(state["params"], x, y)
        value.block_until_ready()

    def every_tenth(i: int, clock: Clock) -> None:
        if i % 10 == 0 or state["p0"] is None:
            state["params"], value, state["p0"] = fresh(state["params"], x, y)
        else:
            state["params"], value = reused(state["params"], x, y, state["p0"])
        value.block_until_ready()

    return Workload(every_step, ablations={"every_tenth_step": every_tenth})


def one_hot_embedding_lookup(big: bool) -> Workload:
    """A bf16 train step whose embedding lookup is a matmul with a one-hot matrix: ``one_hot(ids, 32768) @ table``
    for 8192 tokens (on the chip), then a bf16 MLP; the matmuls run near the chip's peak doing multiplications by
    zero. Ablation: the lookup as ``jnp.take(table, ids)``."""
    import jax
    import jax.numpy as jnp

    vocab, tokens = (32768, 8192) if big else (2048, 512)
    params, _, _, y = _mlp_step(big, batch=tokens)
    table = _normal(jax.random.key(81), (vocab, params[0].shape[0]), "bfloat16")
    ids = jax.random.randint(jax.random.key(82), (tokens,), 0, vocab)

    def loss(weights, ids, y, lookup):
        table, params = weights
        return mlp_loss(params, lookup(table, ids), y)

    def by_one_hot(table, ids):
        return jax.nn.one_hot(ids, vocab, dtype=table.dtype) @ table

    one_hot = sgd(lambda weights, ids, y: loss(weights, ids, y, by_one_hot))
    take = sgd(lambda weights, ids, y: loss(weights, ids, y, lambda table, ids: jnp.take(table, ids, axis=0)))
    state = {"weights": (table, params)}
    return Workload(_training(state, one_hot, ids, y, key="weights"),
                    ablations={"take": _training(state, take, ids, y, key="weights")})


def static_config_object(big: bool) -> Workload:
    """Each annotated step builds a fresh ``TrainConfig`` (a plain class, hashed by identity) and passes it to a
    bf16 MLP train step as a static argument: every call is a new static value, so the step is traced and compiled
    again each time. Ablation: one config object made before the loop."""
    import jax

    params, _, x, y = _mlp_step(big)

    class TrainConfig:
        def __init__(self, learning_rate: float) -> None:
            self.learning_rate = learning_rate

    @functools.partial(jax.jit, static_argnums=3, donate_argnums=0)
    def step(params, x, y, config):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        return [(p - config.learning_rate * g).astype(p.dtype) for p, g in zip(params, grads)], value

    state = {"params": params}
    once = TrainConfig(1e-3)

    def run(config_of):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], x, y, config_of())
            value.block_until_ready()

        return iteration

    return Workload(run(lambda: TrainConfig(1e-3)), ablations={"one_config": run(lambda: once)})


def healthy_bf16_inference(big: bool) -> Workload:
    """Batched bf16 inference of a 6-layer MLP (d 4096, batch 8192 on the chip) on resident inputs, each result
    read before the next call: nothing to fix. Ablation: a result read only every fourth call, the launches queued
    ahead of the device, which a loop whose device is busy gains nothing from."""
    import jax
    import jax.numpy as jnp

    widths = [4096] * 7 if big else [256] * 7
    params = _mlp_params(widths, "bfloat16")
    x = jax.random.normal(jax.random.key(90), (8192 if big else 256, widths[0])).astype("bfloat16")

    @jax.jit
    def infer(params, x):
        for w in params:
            x = jax.nn.gelu(x @ w)
        return jnp.mean(x.astype("float32"))

    def read_each(i: int, clock: Clock) -> None:
        infer(params, x).block_until_ready()

    def read_every_fourth(i: int, clock: Clock) -> None:
        result = infer(params, x)
        if i % 4 == 3:
            result.block_until_ready()

    return Workload(read_each, ablations={"queued_ahead": read_every_fourth})


def eager_random_augment(big: bool) -> Workload:
    """Each annotated step augments a resident bf16 image batch outside the jit, op by op: a key split, a random
    flip decided per image, a random brightness and a random crop by eager jax.random and jnp calls (some 20
    launches), then a jitted bf16 MLP train step. Ablation: the same augmentation inside the jitted step."""
    import jax
    import jax.numpy as jnp

    batch, side = (4096, 32) if big else (256, 16)
    params, _, _, y = _mlp_step(big, widths=[side * side, 4096, 4096, 1024] if big else [side * side, 512, 512, 256],
                                batch=batch)
    images = jax.random.normal(jax.random.key(91), (batch, side + 4, side + 4)).astype("bfloat16")

    def augment(key, images):
        flip_key, bright_key, crop_key = jax.random.split(key, 3)
        flips = jax.random.bernoulli(flip_key, 0.5, (batch, 1, 1))
        images = jnp.where(flips, images[:, :, ::-1], images)
        images = images * jax.random.uniform(bright_key, (batch, 1, 1), minval=0.8, maxval=1.2).astype(images.dtype)
        dx, dy = jax.random.randint(crop_key, (2,), 0, 5)
        images = jax.lax.dynamic_slice(images, (0, dx, dy), (batch, side, side))
        return jnp.clip(images, -3, 3).reshape(batch, -1)

    plain = sgd(mlp_loss)
    inside = sgd(lambda params, key, images, y: mlp_loss(params, augment(key, images), y))
    state = {"params": params, "key": jax.random.key(92)}

    def eager(i: int, clock: Clock) -> None:
        state["key"], key = jax.random.split(state["key"])
        state["params"], value = plain(state["params"], augment(key, images), y)
        value.block_until_ready()

    def jitted(i: int, clock: Clock) -> None:
        state["key"], key = jax.random.split(state["key"])
        state["params"], value = inside(state["params"], key, images, y)
        value.block_until_ready()

    return Workload(eager, ablations={"augment_in_the_step": jitted})


def json_loader_thread(big: bool) -> Workload:
    """A 'loader' thread parses each batch from JSON lines (json.loads of one record per row, a C builtin that holds
    the interpreter) into a numpy array and hands it over a queue of two to a bf16 MLP train step; the parsing is
    slower than the step. Python tracer on; ablation: the batches parsed before the loop (the same thread)."""
    import json

    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    rows, width = x.shape
    rng = np.random.default_rng(93)
    lines = [json.dumps({"id": row, "features": rng.standard_normal(width).round(4).tolist()})
             for row in range(rows)]
    parsed = np.asarray([json.loads(line)["features"] for line in lines], dtype=np.float32)
    state = {"params": params}
    clocks: dict[str, Clock] = {}

    def parse_batch() -> np.ndarray:
        return np.asarray([json.loads(line)["features"] for line in lines], dtype=np.float32)

    def start(slow: bool) -> tuple[queue.Queue, threading.Event]:
        batches: queue.Queue = queue.Queue(maxsize=2)
        stopping = threading.Event()

        def load() -> None:
            while not stopping.is_set():
                started = time.perf_counter()
                batch = parse_batch() if slow else parsed
                if slow and "clock" in clocks:
                    clocks["clock"].call("parse_batch", (time.perf_counter() - started) * 1e3)
                _put(batches, batch, stopping)

        threading.Thread(target=load, name="loader", daemon=True).start()
        return batches, stopping

    return _fed_by_a_loader(OneThreadAtATime(start), clocks, state, train_step, y,
                            Path(tempfile.mkdtemp(prefix="json-")), "parsed_ahead")


def unique_ids_each_step(big: bool) -> Workload:
    """Each annotated step deduplicates the batch's token ids with an eager ``jnp.unique`` (a size taken from the
    data, read back to the host) and gathers those rows of an embedding table for a bf16 MLP train step on their
    mean: a sync and a compile for every new count. Ablation: ``jnp.unique(ids, size=k, fill_value=0)``."""
    import jax
    import jax.numpy as jnp

    params, _, _, y = _mlp_step(big, batch=1)
    vocab, tokens = (65536, 16384) if big else (4096, 1024)
    table = _normal(jax.random.key(94), (vocab, params[0].shape[0]), "bfloat16")
    keys = jax.random.split(jax.random.key(95), 64)
    step = sgd(lambda params, rows, y: mlp_loss(params, jnp.mean(rows, axis=0, keepdims=True), y))
    state = {"params": params}

    def run(unique):
        def iteration(i: int, clock: Clock) -> None:
            ids = jax.random.randint(keys[i % len(keys)], (tokens,), 0, vocab)
            state["params"], value = step(state["params"], table[unique(ids)], y)
            value.block_until_ready()

        return iteration

    return Workload(run(jnp.unique), ablations={
        "fixed_size": run(lambda ids: jnp.unique(ids, size=tokens, fill_value=0))})


def float16_on_tpu(big: bool) -> Workload:
    """An MLP train step (1024-4096-4096-1024, batch 4096 on the chip) in float16, as code written for GPUs runs it.
    Ablation: the same step in bfloat16, the TPU's own 16-bit type (on a v5e it saves nothing measurable)."""
    import jax

    def run(dtype: str):
        params, step, x, y = _mlp_step(big, dtype=dtype)
        return _training({"params": params}, step, x, y)

    return Workload(run("float16"), ablations={"bfloat16": run("bfloat16")})


def numpy_scalar_promotes_bf16(big: bool) -> Workload:
    """A bf16 MLP train step whose hidden activations are divided by ``np.sqrt(width)``: a numpy float64 scalar is
    not weakly typed, so each layer's bf16 activations promote to float32 before the next matmul. Ablation: the
    same scale as a Python float, which keeps bf16 (on a v5e it saves nothing measurable)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params, _, x, y = _mlp_step(big)

    def loss_with(scale_of):
        def loss(params, x, y):
            for w in params[:-1]:
                x = jax.nn.relu(x @ w) / scale_of(w.shape[1])
            return jnp.mean(((x @ params[-1]).astype("float32") - y) ** 2)

        return loss

    promoted, kept = sgd(loss_with(np.sqrt)), sgd(loss_with(lambda width: float(np.sqrt(width))))
    state = {"params": params}
    return Workload(_training(state, promoted, x, y), ablations={"python_float_scale": _training(state, kept, x, y)})


def activation_offload_to_host(big: bool) -> Workload:
    """A 9-layer bf16 MLP (d 4096, batch 8192 on the chip) trained with each layer under jax.checkpoint whose policy
    offloads the saved activations to pinned host memory and brings them back for the backward pass, where the 512
    MiB they take fit in HBM many times over. Ablation: the same policy saving them in device memory (on a v5e it
    saves nothing: the copies overlap the compute)."""
    import jax
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    params, _, x, y = _mlp_step(big, widths=[4096] * 10 if big else [256] * 10, batch=8192 if big else 256)
    policies = jax.checkpoint_policies
    offloaded = policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["activation"], offload_src="device",
        offload_dst="pinned_host")
    on_device = policies.save_only_these_names("activation")

    def loss_with(policy):
        layer = jax.checkpoint(lambda x, w: checkpoint_name(jax.nn.relu(x @ w), "activation"), policy=policy)

        def loss(params, x, y):
            for w in params[:-1]:
                x = layer(x, w)
            return jnp.mean(((x @ params[-1]).astype("float32") - y) ** 2)

        return loss

    state = {"params": params}
    return Workload(_training(state, sgd(loss_with(offloaded)), x, y),
                    ablations={"saved_on_device": _training(state, sgd(loss_with(on_device)), x, y)})


def int64_index_math(big: bool) -> Workload:
    """With ``jax_enable_x64`` on, an embedding-bag step hashes numpy's int64 ids into a 65,536-row bf16 table with
    int64 arithmetic (a multiply-add modulo the rows), gathers 64 rows per bag for 16,384 bags and trains a bf16
    MLP on the bags' means, all in one jit. Ablation: the ids as int32 (on a v5e it saves nothing measurable: the
    gathers hold the step)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    params, _, _, y = _mlp_step(big, batch=16384 if big else 512)
    rows = 65536 if big else 4096
    table = _normal(jax.random.key(96), (rows, params[0].shape[0]), "bfloat16")
    ids64 = np.random.default_rng(97).integers(0, 1 << 40, (y.shape[0], 64))  # int64, numpy's default

    def loss(weights, ids, y):
        table, params = weights
        bags = jnp.take(table, (ids * 40503 + 12345) % rows, axis=0)
        return mlp_loss(params, jnp.mean(bags, axis=1), y)

    step, state = sgd(loss), {"weights": (table, params)}
    return Workload(_training(state, step, jax.device_put(ids64), y, key="weights"), ablations={
        "int32_ids": _training(state, step, jax.device_put((ids64 % rows).astype(np.int32)), y, key="weights")})


def one_hot_labels_loss(big: bool) -> Workload:
    """A bf16 LM-head train step (8192 tokens, vocab 32768 on the chip) whose cross-entropy multiplies the log-softmax
    by one_hot(labels) and sums: the one-hot only selects, fused into the reduction, never multiplied in a matmul.
    Healthy. Ablation: the labels' log-probabilities taken with jnp.take_along_axis."""
    import jax
    import jax.numpy as jnp

    vocab, tokens, d = (32768, 8192, 1024) if big else (2048, 512, 128)
    head = _normal(jax.random.key(98), (d, vocab), "bfloat16")
    x = jax.random.normal(jax.random.key(99), (tokens, d)).astype("bfloat16")
    labels = jax.random.randint(jax.random.key(100), (tokens,), 0, vocab)

    def loss_with(pick):
        def loss(head, x, labels):
            logp = jax.nn.log_softmax((x @ head).astype("float32"))
            return -jnp.mean(pick(logp, labels))

        return loss

    by_one_hot = sgd(loss_with(lambda logp, labels: jnp.sum(jax.nn.one_hot(labels, vocab) * logp, axis=-1)))
    taken = sgd(loss_with(lambda logp, labels: jnp.take_along_axis(logp, labels[:, None], axis=-1)[:, 0]))
    state = {"params": head}
    return Workload(_training(state, by_one_hot, x, labels),
                    ablations={"take_along_axis": _training(state, taken, x, labels)})


def small_vocab_one_hot_lookup(big: bool) -> Workload:
    """A bf16 train step whose lookup of 8192 tokens in a 1,024-row table is one_hot(ids, 1024) @ table, then an
    MLP: on a TPU the matrix unit runs a one-hot matmul of so few classes about as fast as a gather. Ablation: the
    lookup as jnp.take."""
    import jax
    import jax.numpy as jnp

    vocab, tokens = (1024, 8192) if big else (256, 512)
    params, _, _, y = _mlp_step(big, batch=tokens)
    table = _normal(jax.random.key(101), (vocab, params[0].shape[0]), "bfloat16")
    ids = jax.random.randint(jax.random.key(102), (tokens,), 0, vocab)

    def loss_with(lookup):
        def loss(weights, ids, y):
            table, params = weights
            return mlp_loss(params, lookup(table, ids), y)

        return loss

    one_hot = sgd(loss_with(lambda table, ids: jax.nn.one_hot(ids, vocab, dtype=table.dtype) @ table))
    take = sgd(loss_with(lambda table, ids: jnp.take(table, ids, axis=0)))
    state = {"weights": (table, params)}
    return Workload(_training(state, one_hot, ids, y, key="weights"),
                    ablations={"take": _training(state, take, ids, y, key="weights")})


def donated_row_writes(big: bool) -> Workload:
    """Each annotated step writes 32 encoded rows into a 256 MiB f32 buffer (on the chip) inside one jitted
    function that donates the buffer (a fori_loop of dynamic_update_slice), then trains a bf16 MLP step on it: the
    writes land in place, one kernel each, and each row is thinner than the buffer's tiles of 8 rows. Ablation: the
    rows stacked into a new buffer at once (jnp.stack)."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big)
    rows, width = 32, (1 << 21) if big else (1 << 14)
    chunks = jax.random.normal(jax.random.key(103), (rows, width))

    @functools.partial(jax.jit, donate_argnums=0)
    def write_rows(buffer, chunks):
        return jax.lax.fori_loop(0, rows, lambda row, buffer: jax.lax.dynamic_update_slice(
            buffer, jnp.tanh(chunks[row])[None] * 0.5, (row, 0)), buffer)

    stack = jax.jit(lambda chunks: jnp.stack([jnp.tanh(chunks[row]) * 0.5 for row in range(rows)]))
    step = sgd(lambda params, x, y, features: mlp_loss(params, x, y) * (1 + 1e-3 * jnp.mean(features)))
    state = {"params": params, "buffer": jnp.zeros((rows, width), "float32")}

    def run(fill):
        def iteration(i: int, clock: Clock) -> None:
            state["buffer"] = fill(state["buffer"])
            state["params"], value = step(state["params"], x, y, state["buffer"])
            value.block_until_ready()

        return iteration

    return Workload(run(lambda buffer: write_rows(buffer, chunks)),
                    ablations={"stacked": run(lambda buffer: stack(chunks))})


def scan_stacked_rows(big: bool) -> Workload:
    """Each annotated step computes 32 encoded rows (256 MiB of f32 on the chip) as the stacked outputs of a
    lax.scan, then trains a bf16 MLP step weighted by their mean: the scan writes its outputs one row per
    iteration, each thinner than the buffer's tiles of 8 rows. Ablation: the rows built by one jnp.stack."""
    import jax
    import jax.numpy as jnp

    params, _, x, y = _mlp_step(big)
    rows, width = 32, (1 << 21) if big else (1 << 14)
    chunks = jax.random.normal(jax.random.key(104), (rows, width))
    scanned = jax.jit(lambda chunks: jax.lax.scan(lambda carry, chunk: (carry, jnp.tanh(chunk) * 0.5), 0, chunks)[1])
    stacked = jax.jit(lambda chunks: jnp.stack([jnp.tanh(chunks[row]) * 0.5 for row in range(rows)]))
    step = sgd(lambda params, x, y, features: mlp_loss(params, x, y) * (1 + 1e-3 * jnp.mean(features)))
    state = {"params": params}

    def run(build):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], x, y, build(chunks))
            value.block_until_ready()

        return iteration

    return Workload(run(scanned), ablations={"stacked": run(stacked)})


def lax_map_per_example(big: bool) -> Workload:
    """Inference that scores 512 examples with jax.lax.map over a per-example bf16 MLP (d 2048 on the chip): the
    device runs the examples one after another, each a matrix-vector product. Ablation: jax.vmap, one batched
    matmul per layer."""
    import jax
    import jax.numpy as jnp

    widths = [2048, 2048, 2048, 2048] if big else [128, 128, 128, 128]
    params = _mlp_params(widths, "bfloat16")
    examples = jax.random.normal(jax.random.key(106), (512 if big else 64, widths[0])).astype("bfloat16")

    def score(x):
        for w in params:
            x = jax.nn.relu(x @ w)
        return jnp.sum(x.astype("float32"))

    mapped, vmapped = jax.jit(lambda xs: jax.lax.map(score, xs)), jax.jit(jax.vmap(score))

    def run(scores):
        def iteration(i: int, clock: Clock) -> None:
            scores(examples).block_until_ready()

        return iteration

    return Workload(run(mapped), ablations={"vmap": run(vmapped)})


def kv_cache_layout(big: bool) -> Workload:
    """Token-by-token decode (16 bf16 layers, batch 8, d 1024, 2048 positions on the chip, the cache donated) with
    the cache laid out [layers, 2, batch, positions, d]: each token's write and the attention's
    einsums cut across the positions axis. Ablation: the cache laid out [layers, 2, positions, batch, d], each
    token's keys and values one contiguous slab."""
    import jax
    import jax.numpy as jnp

    layers, batch, positions, d = (16, 8, 2048, 1024) if big else (4, 4, 256, 64)

    def run(batch_major: bool):
        step = jax.jit(_kv_decode(layers, positions, d, batch_major=batch_major, seed=105), donate_argnums=0)
        shape = (layers, 2, batch, positions, d) if batch_major else (layers, 2, positions, batch, d)
        state = {"cache": jnp.zeros(shape, "bfloat16"), "x": jnp.ones((batch, d), "bfloat16")}

        def iteration(i: int, clock: Clock) -> None:
            state["cache"], state["x"] = step(state["cache"], state["x"], jnp.int32(i % positions))
            state["x"].block_until_ready()

        return iteration

    return Workload(run(True), ablations={"positions_major": run(False)})


def clear_caches_each_step(big: bool) -> Workload:
    """After each annotated bf16 MLP train step ``jax.clear_caches()`` frees what JAX keeps between calls (to hold
    host memory down): the next call traces and compiles the same step, with the same shapes, again. Ablation: no
    clearing."""
    import jax

    params, step, x, y = _mlp_step(big)
    state = {"params": params}

    def run(clear: bool):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], x, y)
            value.block_until_ready()
            if clear:
                jax.clear_caches()

        return iteration

    return Workload(run(True), ablations={"no_clearing": run(False)})


def narrow_heads_attention(big: bool) -> Workload:
    """Two transformer blocks trained in bf16 (d 1024, 2048 tokens on the chip) whose attention splits the width
    into 16 heads of 64, its scores materialised. Ablations: 8 heads of 128, the same parameters and FLOPs; on the
    chip, the same 16 heads in Pallas's flash attention."""
    import jax
    import jax.numpy as jnp

    d, seq, batch, layers = (1024, 2048, 4, 2) if big else (128, 256, 1, 1)
    narrow, wide = (64, 128) if big else (16, 32)
    dtype = "bfloat16" if big else "float32"  # bf16 matmuls are slow on a CPU
    keys = iter(jax.random.split(jax.random.key(110), 4 * layers + 1))
    params = [{"qkv": _normal(next(keys), (d, 3 * d), dtype), "out": _normal(next(keys), (d, d), dtype),
               "up": _normal(next(keys), (d, 4 * d), dtype), "down": _normal(next(keys), (4 * d, d), dtype)}
              for _ in range(layers)]
    x = jax.random.normal(next(keys), (batch, seq, d)).astype(dtype)

    def train_step(head_dim: int, fused: bool = False):
        heads = d // head_dim

        def loss(params, x):
            for layer in params:
                q, k, v = jnp.split((x @ layer["qkv"]).reshape(batch, seq, 3 * heads, head_dim), 3, axis=2)
                x = x + _causal_attention(q, k, v, fused).reshape(batch, seq, d) @ layer["out"]
                x = x + jax.nn.gelu(x @ layer["up"]) @ layer["down"]
            return jnp.mean(x.astype("float32") ** 2)

        return sgd(loss)

    state = {"params": params}

    def run(step):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], x)
            value.block_until_ready()

        return iteration

    ablations = {"wide_heads": train_step(wide)} | ({"fused_attention": train_step(narrow, fused=True)} if big else {})
    return Workload(run(train_step(narrow)), ablations={name: run(step) for name, step in ablations.items()})


def full_shuffle_each_step(big: bool) -> Workload:
    """Each annotated step's ``next_batch`` shuffles the whole host dataset (a fancy-indexed copy of 512 MiB of f32
    rows on the chip's host) to take the first 4096 rows of it for a bf16 MLP train step. Ablation: one permutation
    made before the loop, and only each batch's rows indexed."""
    import jax
    import numpy as np

    params, step, x, y = _mlp_step(big)
    batch, width = x.shape
    rows = 131072 if big else 65536
    data = np.random.default_rng(0).standard_normal((rows, width), dtype=np.float32)
    rng = np.random.default_rng(1)
    order = rng.permutation(rows)
    state = {"params": params}

    def next_batch(i: int) -> np.ndarray:
        shuffled = data[rng.permutation(rows)]
        return shuffled[:batch]

    def batch_rows(i: int) -> np.ndarray:
        start = (i * batch) % (rows - batch)
        return data[order[start:start + batch]]

    def run(make):
        def iteration(i: int, clock: Clock) -> None:
            with clock.part("next_batch"):
                rows_ = make(i)
            state["params"], value = step(state["params"], jax.device_put(rows_), y)
            value.block_until_ready()

        return iteration

    return Workload(run(next_batch), ablations={"batch_rows_only": run(batch_rows)})


def growing_kv_concat_decode(big: bool) -> Workload:
    """Token-by-token decode through 4 bf16 layers (d 1024, batch 8 on the chip) whose KV cache grows by one
    position each token with ``jnp.concatenate`` inside the jitted step: every token hands the step a cache one
    longer, so it compiles again. Ablation: a cache preallocated to its final length, written in place with
    ``lax.dynamic_update_slice`` and masked past the current position."""
    import jax
    import jax.numpy as jnp

    layers, d, batch, prompt, tokens = (4, 1024, 8, 256, 64) if big else (2, 128, 2, 32, 64)
    dtype = "bfloat16" if big else "float32"
    keys = iter(jax.random.split(jax.random.key(111), 2 * layers + 2))
    params = [{"qkv": _normal(next(keys), (d, 3 * d), dtype), "out": _normal(next(keys), (d, d), dtype)}
              for _ in range(layers)]
    prefix = jax.random.normal(next(keys), (layers, 2, batch, prompt, d)).astype(dtype)

    def attend(q, k, v, mask=None):
        scores = jnp.einsum("bqd,bkd->bqk", q, k).astype("float32") / d**0.5
        if mask is not None:
            scores = jnp.where(mask, scores, -1e9)
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(scores, -1).astype(dtype), v)

    @jax.jit
    def grow(params, x, caches):
        grown = []
        for layer, (k, v) in zip(params, caches):
            q, k_new, v_new = jnp.split(x @ layer["qkv"], 3, -1)
            k, v = jnp.concatenate([k, k_new], 1), jnp.concatenate([v, v_new], 1)
            x = x + attend(q, k, v) @ layer["out"]
            grown.append((k, v))
        return x, grown

    @functools.partial(jax.jit, donate_argnums=2)
    def write(params, x, cache, position):
        mask = jnp.arange(cache.shape[3]) <= position
        for n, layer in enumerate(params):
            q, k_new, v_new = jnp.split(x @ layer["qkv"], 3, -1)
            cache = jax.lax.dynamic_update_slice(cache, jnp.stack([k_new, v_new])[None], (n, 0, 0, position, 0))
            x = x + attend(q, cache[n, 0], cache[n, 1], mask) @ layer["out"]
        return x, cache

    x0 = jnp.ones((batch, 1, d), dtype)
    state = {"x": x0, "caches": [(prefix[n, 0], prefix[n, 1]) for n in range(layers)],
             "cache": jnp.concatenate([prefix, jnp.zeros((layers, 2, batch, tokens, d), dtype)], 3)}

    def growing(i: int, clock: Clock) -> None:
        state["x"], state["caches"] = grow(params, state["x"], state["caches"])
        state["x"].block_until_ready()

    def in_place(i: int, clock: Clock) -> None:
        state["x"], state["cache"] = write(params, state["x"], state["cache"], jnp.int32(prompt + i % tokens))
        state["x"].block_until_ready()

    return Workload(growing, ablations={"preallocated": in_place})


def nchw_conv_net(big: bool) -> Workload:
    """A convolutional net's training step in bf16 (six 3x3 convolutions of 128 channels on the chip) written
    channels-first: images NCHW, kernels OIHW. Ablation: the same net channels-last (NHWC, HWIO)."""
    import jax
    import jax.numpy as jnp

    batch, side, channels, convs = (32, 64, 128, 6) if big else (8, 32, 32, 3)
    dtype = "bfloat16" if big else "float32"
    keys = jax.random.split(jax.random.key(112), convs + 2)
    hwio = {"stem": _normal(keys[0], (3, 3, 3, channels), dtype),
            "convs": [_normal(k, (3, 3, channels, channels), dtype) * 0.3 for k in keys[1:-1]],
            "head": _normal(keys[-1], (channels, 10), dtype)}
    # Each layout's parameters are arrays of their own: the train steps donate them.
    oihw = {"stem": hwio["stem"].transpose(3, 2, 0, 1), "convs": [k.transpose(3, 2, 0, 1) for k in hwio["convs"]],
            "head": jnp.copy(hwio["head"])}
    nhwc = jax.random.normal(keys[-1], (batch, side, side, 3)).astype(dtype)
    labels = jax.nn.one_hot(jnp.arange(batch) % 10, 10)

    def train_step(layout: tuple[str, str, str]):
        spatial = (2, 3) if layout[0] == "NCHW" else (1, 2)

        def loss(params, images, labels):
            def conv(x, kernel):
                return jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=layout)

            x = jax.nn.relu(conv(images, params["stem"]))
            for kernel in params["convs"]:
                x = x + jax.nn.relu(conv(x, kernel))
            logits = (jnp.mean(x, axis=spatial) @ params["head"]).astype("float32")
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * labels, -1))

        return sgd(loss)

    def run(step, params, images):
        state = {"params": params}

        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], images, labels)
            value.block_until_ready()

        return iteration

    return Workload(run(train_step(("NCHW", "OIHW", "NCHW")), oihw, nhwc.transpose(0, 3, 1, 2)),
                    ablations={"channels_last": run(train_step(("NHWC", "HWIO", "NHWC")), hwio, nhwc)})


def python_sum_of_losses(big: bool) -> Workload:
    """After each annotated bf16 MLP train step the loss joins a Python list of device scalars, and the running
    mean for the log is ``sum(losses) / len(losses)``: Python's sum adds the scalars one eager add at a time, one
    more each step. Ablation: a running total on the device, one add a step."""
    params, step, x, y = _mlp_step(big)
    state = {"params": params, "losses": [], "total": None}

    def summed(i: int, clock: Clock) -> None:
        state["params"], value = step(state["params"], x, y)
        state["losses"].append(value)
        with clock.part("log_mean"):
            print(f"step {i}: mean loss {float(sum(state['losses']) / len(state['losses'])):.4f}", file=sys.stderr)

    def running(i: int, clock: Clock) -> None:
        state["params"], value = step(state["params"], x, y)
        state["total"] = value if state["total"] is None else state["total"] + value
        print(f"step {i}: mean loss {float(state['total'] / (i + 2)):.4f}", file=sys.stderr)

    return Workload(summed, ablations={"running_total": running})


def host_dropout_masks(big: bool) -> Workload:
    """Each annotated step's ``make_dropout_masks`` draws the dropout masks of a bf16 MLP's two hidden layers with
    numpy on the host (4096 x 4096 each on the chip) and hands them to the jitted train step. Ablation: the masks
    drawn inside the jit with ``jax.random.bernoulli``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params, _, x, y = _mlp_step(big)
    rows, hidden = x.shape[0], params[0].shape[1]
    rng = np.random.default_rng(0)

    def loss(params, x, y, masks):
        h = x
        for w, mask in zip(params[:-1], masks):
            h = jax.nn.relu(h @ w) * mask.astype(h.dtype) / 0.9
        return jnp.mean(((h @ params[-1]).astype("float32") - y) ** 2)

    host_step = sgd(loss)

    @functools.partial(jax.jit, donate_argnums=0)
    def device_step(params, x, y, key):
        keys = jax.random.split(key, len(params) - 1)
        masks = [jax.random.bernoulli(k, 0.9, (rows, hidden)) for k in keys]
        value, grads = jax.value_and_grad(loss)(params, x, y, masks)
        return jax.tree.map(lambda p, g: (p - 1e-3 * g).astype(p.dtype), params, grads), value

    def make_dropout_masks() -> list:
        return [rng.random((rows, hidden), dtype=np.float32) < 0.9 for _ in params[:-1]]

    state = {"params": params}

    def on_host(i: int, clock: Clock) -> None:
        with clock.part("make_dropout_masks"):
            masks = make_dropout_masks()
        state["params"], value = host_step(state["params"], x, y, masks)
        value.block_until_ready()

    def on_device(i: int, clock: Clock) -> None:
        state["params"], value = device_step(state["params"], x, y, jax.random.key(i))
        value.block_until_ready()

    return Workload(on_host, ablations={"masks_in_the_jit": on_device})


def host_ema_each_step(big: bool) -> Workload:
    """After each annotated f32 MLP train step ``update_ema`` copies the parameters to the host with
    ``jax.device_get`` and updates an exponential moving average of them with numpy. Ablation: the average kept on
    the device, updated by a jitted function."""
    import jax
    import numpy as np

    params, step, x, y = _mlp_step(big, "float32")
    state = {"params": params, "ema": [np.array(p) for p in params], "device_ema": [p * 1 for p in params]}

    def update_ema(params) -> None:
        for average, value in zip(state["ema"], jax.device_get(params)):
            average *= 0.999
            average += 0.001 * value

    @functools.partial(jax.jit, donate_argnums=0)
    def device_update(ema, params):
        return [0.999 * a + 0.001 * p for a, p in zip(ema, params)]

    def on_host(i: int, clock: Clock) -> None:
        state["params"], value = step(state["params"], x, y)
        with clock.part("update_ema"):
            update_ema(state["params"])
        value.block_until_ready()

    def on_device(i: int, clock: Clock) -> None:
        state["params"], value = step(state["params"], x, y)
        state["device_ema"] = device_update(state["device_ema"], state["params"])
        value.block_until_ready()

    return Workload(on_host, ablations={"ema_on_the_device": on_device})


def pickle_snapshot_every_5(big: bool) -> Workload:
    """Every 5th annotated f32 MLP train step ``snapshot_state`` pickles the parameters (device arrays, copied to
    the host as they are pickled) into a file. Ablation: no snapshot."""
    import pickle

    params, step, x, y = _mlp_step(big, "float32", [4096] * 5 if big else [1024] * 5, 2048 if big else 64)
    folder = Path(tempfile.mkdtemp(prefix="snapshot-"))
    state = {"params": params}

    def snapshot_state(i: int) -> None:
        (folder / f"state-{i}.pkl").write_bytes(pickle.dumps(state["params"]))

    def run(snapshot: bool):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = step(state["params"], x, y)
            value.block_until_ready()
            if snapshot and i % 5 == 4:
                with clock.part("snapshot_state"):
                    snapshot_state(i)

        return iteration

    return Workload(run(True), ablations={"no_snapshot": run(False)},
                    stop=lambda: shutil.rmtree(folder, ignore_errors=True))


def replay_buffer_concat(big: bool) -> Workload:
    """Each annotated step ``add_to_buffer`` appends the step's 4096 new f32 rows to a host replay buffer with
    ``np.concatenate``, copying the whole buffer, one batch longer each step, then trains a bf16 MLP step on a batch
    sampled from it. Ablation: a buffer preallocated for every row, written in place."""
    import jax
    import numpy as np

    params, step, x, y = _mlp_step(big)
    rows, width = x.shape
    capacity = rows * 64
    rng = np.random.default_rng(0)
    fresh = rng.standard_normal((rows, width), dtype=np.float32)
    state = {"params": params, "buffer": np.empty((0, width), np.float32),
             "ring": np.empty((capacity, width), np.float32), "filled": 0}

    def add_to_buffer(new: np.ndarray) -> np.ndarray:
        state["buffer"] = np.concatenate([state["buffer"], new])
        return state["buffer"]

    def write_in_place(new: np.ndarray) -> np.ndarray:
        start = state["filled"] % capacity
        state["ring"][start:start + len(new)] = new
        state["filled"] += len(new)
        return state["ring"][:min(state["filled"], capacity)]

    def run(add):
        def iteration(i: int, clock: Clock) -> None:
            with clock.part("add_to_buffer"):
                buffer = add(fresh)
            batch = buffer[rng.integers(0, len(buffer), rows)]
            state["params"], value = step(state["params"], jax.device_put(batch), y)
            value.block_until_ready()

        return iteration

    return Workload(run(add_to_buffer), ablations={"preallocated": run(write_in_place)})


def python_row_loop_preprocess(big: bool) -> Workload:
    """Each annotated step's ``normalize_rows`` standardises the 4096 rows of a fresh f32 host batch in a Python
    loop, one numpy call per row, before a bf16 MLP train step. Ablation: the same normalisation in one vectorised
    numpy expression."""
    import jax
    import numpy as np

    params, step, x, y = _mlp_step(big)
    rows, width = x.shape
    raw = np.random.default_rng(0).standard_normal((rows, width), dtype=np.float32) * 3 + 1
    state = {"params": params}

    def normalize_rows(batch: np.ndarray) -> np.ndarray:
        out = np.empty_like(batch)
        for n in range(len(batch)):
            row = batch[n]
            out[n] = (row - row.mean()) / (row.std() + 1e-6)
        return out

    def vectorised(batch: np.ndarray) -> np.ndarray:
        return (batch - batch.mean(1, keepdims=True)) / (batch.std(1, keepdims=True) + 1e-6)

    def run(normalize):
        def iteration(i: int, clock: Clock) -> None:
            with clock.part("normalize_rows"):
                batch = normalize(raw)
            state["params"], value = step(state["params"], jax.device_put(batch), y)
            value.block_until_ready()

        return iteration

    return Workload(run(normalize_rows), ablations={"vectorised": run(vectorised)})


def eager_param_cast(big: bool) -> Workload:
    """f32 master parameters (4 x 4096 x 4096 on the chip) cast to bf16 by eager ``astype`` calls before each
    annotated step's jitted bf16 train step, whose f32 gradients update the masters in a second jit. Ablation: the
    cast inside the jitted step."""
    import jax
    import jax.numpy as jnp

    widths = [4096] * 5 if big else [512] * 5
    masters = _mlp_params(widths, "float32")
    x = jax.random.normal(jax.random.key(113), (2048 if big else 64, widths[0])).astype("bfloat16")
    y = jnp.zeros((x.shape[0], widths[-1]), "float32")
    grad = jax.jit(jax.value_and_grad(mlp_loss))

    @functools.partial(jax.jit, donate_argnums=0)
    def apply(masters, grads):
        return [m - 1e-3 * g.astype("float32") for m, g in zip(masters, grads)]

    @functools.partial(jax.jit, donate_argnums=0)
    def fused_step(masters, x, y):
        value, grads = jax.value_and_grad(mlp_loss)([m.astype("bfloat16") for m in masters], x, y)
        return [m - 1e-3 * g.astype("float32") for m, g in zip(masters, grads)], value

    state = {"masters": masters}

    def eager(i: int, clock: Clock) -> None:
        compute = [m.astype("bfloat16") for m in state["masters"]]
        value, grads = grad(compute, x, y)
        state["masters"] = apply(state["masters"], grads)
        value.block_until_ready()

    def fused(i: int, clock: Clock) -> None:
        state["masters"], value = fused_step(state["masters"], x, y)
        value.block_until_ready()

    return Workload(eager, ablations={"cast_in_the_jit": fused})


def variable_length_requests(big: bool) -> Workload:
    """Inference on requests of random lengths (128 to 1024 tokens on the chip, batch 8) through a jitted bf16
    two-layer transformer block, each request at its own length: most lengths are new to the jit, so it compiles
    again. Ablation: each request padded up to the next of four bucket lengths, its padding masked."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    d, batch, shortest, longest = (1024, 8, 128, 1024) if big else (64, 2, 16, 128)
    dtype = "bfloat16" if big else "float32"
    keys = iter(jax.random.split(jax.random.key(114), 4))
    params = {"qkv": _normal(next(keys), (d, 3 * d), dtype), "out": _normal(next(keys), (d, d), dtype),
              "up": _normal(next(keys), (d, 4 * d), dtype), "down": _normal(next(keys), (4 * d, d), dtype)}
    lengths = np.random.default_rng(114).integers(shortest, longest + 1, 64)
    buckets = [longest // 8, longest // 4, longest // 2, longest]

    @jax.jit
    def infer(params, x, valid):
        q, k, v = jnp.split(x @ params["qkv"], 3, -1)
        scores = jnp.einsum("bqd,bkd->bqk", q, k).astype("float32") / d**0.5
        weights = jax.nn.softmax(jnp.where(valid[:, None, :], scores, -1e9), -1).astype(x.dtype)
        x = x + jnp.einsum("bqk,bkd->bqd", weights, v) @ params["out"]
        x = x + jax.nn.gelu(x @ params["up"]) @ params["down"]
        return jnp.sum(jnp.where(valid[..., None], x, 0).astype("float32"), 1)

    def request(length: int, padded: int):
        x = jnp.ones((batch, padded, d), dtype)
        return x, jnp.arange(padded)[None, :].repeat(batch, 0) < length

    def run(bucketed: bool):
        def iteration(i: int, clock: Clock) -> None:
            length = int(lengths[i % len(lengths)])
            padded = next(b for b in buckets if b >= length) if bucketed else length
            infer(params, *request(length, padded)).block_until_ready()

        return iteration

    return Workload(run(False), ablations={"bucketed": run(True)})


def unannotated_inference(big: bool) -> Workload:
    """Batched bf16 inference of a 6-layer MLP (d 4096, batch 4096 on the chip) called 30 times, each result read
    before the next call, with no step markers (as under xprof's capture of a serving loop): nothing to fix.
    Ablation: the results read only every fourth call."""
    import jax
    import jax.numpy as jnp

    widths = [4096] * 7 if big else [256] * 7
    params = _mlp_params(widths, "bfloat16")
    x = jax.random.normal(jax.random.key(115), (4096 if big else 256, widths[0])).astype("bfloat16")

    @jax.jit
    def infer(params, x):
        for w in params:
            x = jax.nn.gelu(x @ w)
        return jnp.mean(x.astype("float32"))

    pending: list = []

    def read_each(i: int, clock: Clock) -> None:
        infer(params, x).block_until_ready()

    def read_every_fourth(i: int, clock: Clock) -> None:
        pending.append(infer(params, x))
        if len(pending) == 4:
            pending.pop().block_until_ready()
            pending.clear()

    return Workload(read_each, ablations={"read_every_fourth": read_every_fourth})


def split_jit_forward(big: bool) -> Workload:
    """Each annotated step runs the bf16 MLP's forward pass in one jit to log its loss, then its gradient in a
    second (which computes the forward again) and the update in a third. Ablation: one jitted step returning the
    loss with the update."""
    import jax

    params, step, x, y = _mlp_step(big)
    forward = jax.jit(mlp_loss)
    gradient = jax.jit(jax.grad(mlp_loss))

    @functools.partial(jax.jit, donate_argnums=0)
    def apply(params, grads):
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)]

    state = {"params": params}

    def split(i: int, clock: Clock) -> None:
        value = forward(state["params"], x, y)
        state["params"] = apply(state["params"], gradient(state["params"], x, y))
        value.block_until_ready()

    def fused(i: int, clock: Clock) -> None:
        state["params"], value = step(state["params"], x, y)
        value.block_until_ready()

    return Workload(split, ablations={"one_jit": fused})


def fft_long_filter_conv(big: bool) -> Workload:
    """A 1-D signal model of four layers, each convolving the f32 signal (batch 16, 32 channels, 16384 samples on
    the chip) with a learned 1024-tap filter per channel by FFT (``jnp.fft.rfft``, a product, ``irfft``) and a
    tanh, trained, data resident. Ablation: the same convolutions as a depthwise ``lax.conv_general_dilated``."""
    import jax
    import jax.numpy as jnp

    batch, channels, length, taps = (16, 32, 16384, 1024) if big else (4, 8, 4096, 256)
    x = jax.random.normal(jax.random.key(70), (batch, channels, length))
    filters = [_normal(jax.random.key(71 + layer), (channels, taps), "float32") for layer in range(4)]
    size = 2 * length

    def by_fft(x, h):
        spectrum = jnp.fft.rfft(x, n=size, axis=-1) * jnp.fft.rfft(h, n=size, axis=-1)[None]
        return jnp.fft.irfft(spectrum, n=size, axis=-1)[..., :length]

    def direct(x, h):
        return jax.lax.conv_general_dilated(x, h[:, None, ::-1], window_strides=(1,), padding=[(taps - 1, 0)],
                                            feature_group_count=channels, dimension_numbers=("NCH", "OIH", "NCH"))

    def make_step(convolve):
        def loss(filters, x):
            for h in filters:
                x = jnp.tanh(convolve(x, h))
            return jnp.mean(x ** 2)

        @jax.jit
        def step(filters, x):
            value, grads = jax.value_and_grad(loss)(filters, x)
            return [h - 1e-3 * g for h, g in zip(filters, grads)], value

        return step

    state = {"filters": filters}

    def loop(convolve):
        step = make_step(convolve)

        def iteration(i: int, clock: Clock) -> None:
            state["filters"], value = step(state["filters"], x)
            value.block_until_ready()

        return iteration

    return Workload(loop(by_fft), ablations={"direct_conv": loop(direct)})


def exact_top_k_retrieval(big: bool) -> Workload:
    """A retrieval step: 256 bf16 queries scored against a table of a million 128-wide item embeddings on the chip,
    then the exact top 100 of each row with ``lax.top_k``, data resident. Ablation: ``lax.approx_max_k`` at a
    recall target of 0.95."""
    import jax

    queries, items, width, k = (256, 1 << 20, 128, 100) if big else (32, 1 << 16, 64, 100)
    table = _normal(jax.random.key(80), (items, width), "bfloat16")
    q = _normal(jax.random.key(81), (queries, width), "bfloat16")

    @jax.jit
    def exact(q, table):
        return jax.lax.top_k((q @ table.T).astype("float32"), k)

    @jax.jit
    def approximate(q, table):
        return jax.lax.approx_max_k((q @ table.T).astype("float32"), k, recall_target=0.95)

    def loop(retrieve):
        def iteration(i: int, clock: Clock) -> None:
            jax.block_until_ready(retrieve(q, table))

        return iteration

    return Workload(loop(exact), ablations={"approx_max_k": loop(approximate)})


def log_grad_norms_each_leaf(big: bool) -> Workload:
    """Each annotated step of a 12-layer bf16 MLP returns its gradients from one jit; ``log_grad_norms`` reads each
    of the 12 leaves' norms with ``float(jnp.linalg.norm(g))`` for the log, then a second jit applies them.
    Ablation: the norms computed in the jitted step and read as one array after it."""
    import jax
    import jax.numpy as jnp

    width = 1024 if big else 256
    params = _mlp_params([width] * 13, "bfloat16")
    x = jax.random.normal(jax.random.key(3), (4096 if big else 256, width)).astype("bfloat16")
    y = jnp.zeros((x.shape[0], width), "float32")
    gradient = jax.jit(jax.value_and_grad(mlp_loss))

    @functools.partial(jax.jit, donate_argnums=0)
    def apply(params, grads):
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)]

    @functools.partial(jax.jit, donate_argnums=0)
    def step_with_norms(params, x, y):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        norms = jnp.stack([jnp.linalg.norm(g.astype("float32")) for g in grads])
        return apply(params, grads), value, norms

    def log_grad_norms(grads) -> list[float]:
        return [float(jnp.linalg.norm(g.astype("float32"))) for g in grads]

    state = {"params": params}

    def per_leaf(i: int, clock: Clock) -> None:
        value, grads = gradient(state["params"], x, y)
        with clock.part("log_grad_norms"):
            log_grad_norms(grads)
        state["params"] = apply(state["params"], grads)
        value.block_until_ready()

    def in_the_jit(i: int, clock: Clock) -> None:
        state["params"], value, norms = step_with_norms(state["params"], x, y)
        jax.device_get(norms)
        value.block_until_ready()

    return Workload(per_leaf, ablations={"norms_in_the_jit": in_the_jit})


def labels_from_python_list(big: bool) -> Workload:
    """Each annotated step's labels (32 per row of a 4096-row batch on the chip) come from the dataset as a Python
    list of lists of ints and go to the device with ``jnp.asarray(labels)`` before a bf16 MLP classifier's train
    step. Ablations: the list converted with ``np.asarray(labels, np.int32)`` first; the dataset's labels stored
    as a numpy array."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params, _, x, _ = _mlp_step(big)
    rows, classes, per_row = x.shape[0], params[-1].shape[1], 32
    stored = np.random.default_rng(0).integers(0, classes, (4, rows, per_row), dtype=np.int32)
    as_lists = [batch.tolist() for batch in stored]

    def loss(params, x, labels):
        h = x
        for w in params[:-1]:
            h = jax.nn.relu(h @ w)
        logits = jax.nn.log_softmax((h @ params[-1]).astype("float32"))
        return -jnp.mean(jnp.take_along_axis(logits, labels, axis=-1))

    step = sgd(loss)
    state = {"params": params}

    def loop(to_device):
        def iteration(i: int, clock: Clock) -> None:
            with clock.part("labels_to_device"):
                labels = to_device(i % len(stored))
            state["params"], value = step(state["params"], x, labels)
            value.block_until_ready()

        return iteration

    return Workload(loop(lambda b: jnp.asarray(as_lists[b])),
                    ablations={"numpy_convert": loop(lambda b: jnp.asarray(np.asarray(as_lists[b], np.int32))),
                               "stored_as_array": loop(lambda b: jnp.asarray(stored[b]))})


def gan_unannotated(big: bool) -> Workload:
    """A GAN's iteration without step markers: two discriminator train steps, then one generator train step, each
    its own jit (bf16 MLPs, 4096 wide on the chip), the noise and real batch resident. The truth is each
    program's share of the iteration."""
    import jax
    import jax.numpy as jnp

    width, rows = (4096, 2048) if big else (512, 128)
    generator = _mlp_params([256, width, width, 512], "bfloat16", seed=1)
    discriminator = _mlp_params([512, width, width, 1], "bfloat16", seed=2)
    noise = jax.random.normal(jax.random.key(90), (rows, 256)).astype("bfloat16")
    real = jax.random.normal(jax.random.key(91), (rows, 512)).astype("bfloat16")

    def forward(params, x):
        for w in params[:-1]:
            x = jax.nn.relu(x @ w)
        return (x @ params[-1]).astype("float32")

    def discriminator_loss(d, g, noise, real):
        fake = forward(g, noise).astype("bfloat16")
        return jnp.mean(jax.nn.softplus(forward(d, fake))) + jnp.mean(jax.nn.softplus(-forward(d, real)))

    def generator_loss(g, d, noise):
        return jnp.mean(jax.nn.softplus(-forward(d, forward(g, noise).astype("bfloat16"))))

    d_step, g_step = sgd(discriminator_loss), sgd(generator_loss)
    state = {"d": discriminator, "g": generator}

    def iteration(i: int, clock: Clock) -> None:
        with clock.part("discriminator_steps"):
            for _ in range(2):
                state["d"], value = d_step(state["d"], state["g"], noise, real)
            value.block_until_ready()
        with clock.part("generator_step"):
            state["g"], value = g_step(state["g"], state["d"], noise)
            value.block_until_ready()

    return Workload(iteration)


def dense_embedding_update(big: bool) -> Workload:
    """A bf16 embedding table (262144 x 512 on the chip) trained with a small MLP on each annotated step's 4096
    looked-up rows: the gradient of ``jnp.take`` is a table-sized scatter-add into zeros, and SGD's
    ``p - lr * g`` rewrites the whole table every step. Ablation: only the looked-up rows updated, in place
    (``table.at[ids].add``, the table donated)."""
    import jax
    import jax.numpy as jnp

    vocab, width, rows = (262144, 512, 4096) if big else (32768, 128, 256)
    table = _normal(jax.random.key(95), (vocab, width), "bfloat16")
    mlp = _mlp_params([width, 4 * width, width], "bfloat16", seed=4)
    ids = jax.random.randint(jax.random.key(96), (rows,), 0, vocab)
    y = jnp.zeros((rows, width), "float32")

    def loss(mlp, embedded, y):
        return mlp_loss(mlp, embedded, y)

    def dense_loss(params, ids, y):
        table, mlp = params
        return loss(mlp, jnp.take(table, ids, axis=0), y)

    dense_step = sgd(dense_loss)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def sparse_step(table, mlp, ids, y):
        value, (mlp_grads, row_grads) = jax.value_and_grad(loss, argnums=(0, 1))(mlp, jnp.take(table, ids, axis=0),
                                                                                  y)
        mlp = [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(mlp, mlp_grads)]
        return table.at[ids].add((-1e-3 * row_grads).astype(table.dtype)), mlp, value

    state = {"params": (table, mlp)}

    def dense(i: int, clock: Clock) -> None:
        state["params"], value = dense_step(state["params"], ids, y)
        value.block_until_ready()

    def sparse(i: int, clock: Clock) -> None:
        table, mlp, value = sparse_step(*state["params"], ids, y)
        state["params"] = (table, mlp)
        value.block_until_ready()

    return Workload(dense, ablations={"rows_updated_in_place": sparse})


def large_vocab_loss(big: bool) -> Workload:
    """An LM head's train step: 4096 bf16 hidden states (1024 wide on the chip) times a 1024 x 65536 bf16 output
    matrix, the f32 logits' log-softmax and cross-entropy against integer labels, data resident. Ablation: the
    loss over the vocabulary in 8 chunks of a ``lax.scan`` with a running logsumexp, no full logits kept."""
    import jax
    import jax.numpy as jnp

    tokens, width, vocab, chunks = (4096, 1024, 65536, 8) if big else (256, 128, 8192, 8)
    hidden = _normal(jax.random.key(100), (tokens, width), "bfloat16")
    head = _normal(jax.random.key(101), (width, vocab), "bfloat16")
    labels = jax.random.randint(jax.random.key(102), (tokens,), 0, vocab)

    def full_loss(head, hidden, labels):
        logits = (hidden @ head).astype("float32")
        picked = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)

    def chunked_loss(head, hidden, labels):
        pieces = head.reshape(width, chunks, vocab // chunks).transpose(1, 0, 2)

        def chunk(carry, piece_and_offset):
            total, picked = carry
            piece, offset = piece_and_offset
            logits = (hidden @ piece).astype("float32")
            local = labels - offset
            inside = (local >= 0) & (local < piece.shape[1])
            here = jnp.take_along_axis(logits, jnp.clip(local, 0, piece.shape[1] - 1)[:, None], axis=-1)[:, 0]
            total = jnp.logaddexp(total, jax.nn.logsumexp(logits, axis=-1))
            return (total, picked + jnp.where(inside, here, 0.0)), None

        start = (jnp.full((tokens,), -jnp.inf), jnp.zeros((tokens,)))
        (total, picked), _ = jax.lax.scan(jax.checkpoint(chunk), start,
                                          (pieces, jnp.arange(chunks) * (vocab // chunks)))
        return jnp.mean(total - picked)

    full_step, chunked_step = sgd(full_loss), sgd(chunked_loss)
    state = {"params": head}

    def extra(clock: Clock, ablations: dict[str, Clock]) -> dict:
        stats = _program_stats(full_step, state["params"], hidden, labels)
        return _compute_truth(stats["flops"], _steady_ms(clock), "train step")

    return Workload(_training(state, full_step, hidden, labels),
                    ablations={"chunked_vocab": _training(state, chunked_step, hidden, labels)}, extra=extra)


def static_lr_schedule(big: bool) -> Workload:
    """A bf16 MLP train step whose learning rate, decayed every annotated step, is a static argument
    (``static_argnums``): each new value traces and compiles the step again. Ablation: the learning rate as an
    ordinary (traced) argument."""
    import jax

    params, _, x, y = _mlp_step(big)

    def step(params, x, y, lr):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        return [(p - lr * g).astype(p.dtype) for p, g in zip(params, grads)], value

    static = jax.jit(step, static_argnums=3, donate_argnums=0)
    traced = jax.jit(step, donate_argnums=0)
    state = {"params": params}

    def loop(train):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = train(state["params"], x, y, 1e-3 * 0.99 ** (i + 1))
            value.block_until_ready()

        return iteration

    return Workload(loop(static), ablations={"traced_lr": loop(traced)})


def stem_conv_rgb(big: bool) -> Workload:
    """A small bf16 NHWC conv net on RGB images (batch 64, 224 x 224 on the chip): a 7x7 stride-2 stem from the 3
    input channels to 64, three 3x3 convolutions of 64 channels at 112 x 112, pooling and a dense head, trained,
    data resident. Ablation: a stem of the same output on a space-to-depth input (2x2 pixel blocks as 12
    channels, a 4x4 kernel)."""
    import jax
    import jax.numpy as jnp

    batch, side = (64, 224) if big else (8, 64)
    images = jax.random.normal(jax.random.key(110), (batch, side, side, 3)).astype("bfloat16")
    blocks = images.reshape(batch, side // 2, 2, side // 2, 2, 3).transpose(0, 1, 3, 2, 4, 5).reshape(
        batch, side // 2, side // 2, 12)
    y = jnp.zeros((batch, 10), "float32")

    def conv(x, w, stride=1):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def body(params, h):
        for w in params["body"]:
            h = jax.nn.relu(conv(h, w))
        return (jnp.mean(h, axis=(1, 2)) @ params["head"]).astype("float32")

    def rgb_loss(params, images, y):
        return jnp.mean((body(params, jax.nn.relu(conv(images, params["stem"], 2))) - y) ** 2)

    def blocks_loss(params, blocks, y):
        return jnp.mean((body(params, jax.nn.relu(conv(blocks, params["stem"]))) - y) ** 2)

    def make(stem_shape):
        keys = jax.random.split(jax.random.key(111), 5)
        return {"stem": _normal(keys[0], stem_shape, "bfloat16"),
                "body": [_normal(k, (3, 3, 64, 64), "bfloat16") for k in keys[1:4]],
                "head": _normal(keys[4], (64, 10), "bfloat16")}

    rgb_step, blocks_step = sgd(rgb_loss), sgd(blocks_loss)
    state = {"rgb": make((7, 7, 3, 64)), "blocks": make((4, 4, 12, 64))}
    return Workload(_training(state, rgb_step, images, y, key="rgb"),
                    ablations={"space_to_depth": _training(state, blocks_step, blocks, y, key="blocks")})


def top_p_sort_decode(big: bool) -> Workload:
    """Token-by-token sampling over a 262144-token vocabulary (batch 32 on the chip): each annotated step's jitted
    call runs two bf16 layers (2048 wide) and the output head, then samples by nucleus (top-p 0.9) after a full
    ``jnp.sort`` of the probabilities. Ablation: the nucleus taken among the top 64 of ``lax.top_k``."""
    import jax
    import jax.numpy as jnp

    batch, width, vocab = (32, 2048, 262144) if big else (4, 256, 16384)
    layers = _mlp_params([width, width, width], "bfloat16", seed=7)
    head = _normal(jax.random.key(120), (width, vocab), "bfloat16")
    start = _normal(jax.random.key(121), (batch, width), "bfloat16")

    def logits_of(h):
        for w in layers:
            h = jnp.tanh(h @ w)
        return (h @ head).astype("float32"), h

    @jax.jit
    def by_sort(h, key):
        logits, h = logits_of(h)
        probs = jax.nn.softmax(logits)
        ranked = jnp.sort(probs, axis=-1)[:, ::-1]
        kept = jnp.sum(jnp.cumsum(ranked, axis=-1) < 0.9, axis=-1, keepdims=True)
        cutoff = jnp.take_along_axis(ranked, kept, axis=-1)
        return jax.random.categorical(key, jnp.where(probs >= cutoff, logits, -jnp.inf)), h

    @jax.jit
    def by_top_k(h, key):
        logits, h = logits_of(h)
        top, ids = jax.lax.top_k(logits, 64)
        probs = jax.nn.softmax(top)
        keep = jnp.cumsum(probs, axis=-1) - probs < 0.9
        choice = jax.random.categorical(key, jnp.where(keep, top, -jnp.inf))
        return jnp.take_along_axis(ids, choice[:, None], axis=-1)[:, 0], h

    state = {"h": start}

    def loop(sample):
        def iteration(i: int, clock: Clock) -> None:
            token, state["h"] = sample(state["h"], jax.random.key(i))
            token.block_until_ready()

        return iteration

    return Workload(loop(by_sort), ablations={"top_k_nucleus": loop(by_top_k)})


def params_numpy_each_step(big: bool) -> Workload:
    """A bf16 MLP whose parameters live in numpy arrays on the host, as loaded from a checkpoint: each annotated
    step hands them to the jitted train step, which copies them to the device, and ``np.asarray`` copies the
    updated ones back for the next step. Ablation: the parameters put on the device once."""
    import jax
    import numpy as np

    params, donated, x, y = _mlp_step(big)

    def step(params, x, y):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, grads)], value

    train = jax.jit(step)
    state = {"host": [np.asarray(p) for p in params], "device": params}

    def on_host(i: int, clock: Clock) -> None:
        updated, value = train(state["host"], x, y)
        state["host"] = [np.asarray(p) for p in updated]
        value.block_until_ready()

    return Workload(on_host, ablations={"params_on_device": _training(state, donated, x, y, key="device")})


def cumsum_long_sequence(big: bool) -> Workload:
    """A sequence model's step built on running sums: each of 4 layers takes ``jnp.cumsum`` of its f32 input (batch
    16, 32768 positions, 256 channels on the chip) along the positions, mixes channels with a bf16 matmul and a
    tanh, trained, data resident. Ablation: the running sums as ``lax.associative_scan``."""
    import jax
    import jax.numpy as jnp

    batch, length, width = (16, 32768, 256) if big else (2, 4096, 64)
    x = jax.random.normal(jax.random.key(130), (batch, length, width))
    params = _mlp_params([width] * 5, "bfloat16", seed=8)
    y = jnp.zeros((batch, length, width), "float32")

    def make_step(running_sum):
        def loss(params, x, y):
            for w in params:
                x = jnp.tanh((running_sum(x) / length).astype("bfloat16") @ w).astype("float32")
            return jnp.mean((x - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    by_cumsum = make_step(lambda x: jnp.cumsum(x, axis=1))
    by_scan = make_step(lambda x: jax.lax.associative_scan(jnp.add, x, axis=1))
    return Workload(_training(state, by_cumsum, x, y), ablations={"associative_scan": _training(state, by_scan, x, y)})


def host_causal_mask_each_step(big: bool) -> Workload:
    """Each annotated step's ``make_attention_mask`` builds the causal mask of a two-block bf16 transformer's
    attention (batch 8, 2048 tokens on the chip) with numpy (``np.tril`` of ones, broadcast over the batch) and
    hands it to the jitted train step. Ablation: the mask made inside the jit (``jnp.tril``), where it fuses."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    batch, tokens, width, heads = (8, 2048, 1024, 8) if big else (2, 256, 128, 2)
    keys = jax.random.split(jax.random.key(140), 5)
    params = [_normal(k, (width, width), "bfloat16") for k in keys[:4]]
    x = jax.random.normal(keys[4], (batch, tokens, width)).astype("bfloat16")
    y = jnp.zeros((batch, tokens, width), "float32")

    def attend(params, x, mask):
        q, k, v, o = params
        split = lambda t: t.reshape(batch, tokens, heads, width // heads).transpose(0, 2, 1, 3)  # noqa: E731
        scores = (split(x @ q) @ split(x @ k).transpose(0, 1, 3, 2)).astype("float32") / np.sqrt(width // heads)
        scores = jnp.where(mask[:, None], scores, -1e9)
        out = (jax.nn.softmax(scores).astype("bfloat16") @ split(x @ v)).transpose(0, 2, 1, 3).reshape(x.shape)
        return x + out @ o

    def loss(params, x, y, mask):
        for _ in range(2):
            x = attend(params, x, mask)
        return jnp.mean((x.astype("float32") - y) ** 2)

    host_step = sgd(loss)
    device_step = sgd(lambda params, x, y: loss(params, x, y, jnp.tril(jnp.ones((batch, tokens, tokens), bool))))

    def make_attention_mask() -> np.ndarray:
        return np.broadcast_to(np.tril(np.ones((tokens, tokens), dtype=bool)), (batch, tokens, tokens)).copy()

    state = {"params": params}

    def on_host(i: int, clock: Clock) -> None:
        with clock.part("make_attention_mask"):
            mask = make_attention_mask()
        state["params"], value = host_step(state["params"], x, y, mask)
        value.block_until_ready()

    return Workload(on_host, ablations={"mask_in_the_jit": _training(state, device_step, x, y)})


def per_example_grads_dp(big: bool) -> Workload:
    """A differentially private SGD step: per-example gradients of a bf16 MLP (``jax.vmap`` of ``jax.grad`` over
    256 examples, 512 wide on the chip), each clipped to norm 1, summed and noised, data resident. Ablation: the
    batch's one gradient (what per-example clipping costs; not the same algorithm)."""
    import jax
    import jax.numpy as jnp

    width, rows = (512, 256) if big else (128, 64)
    params, _, x, y = _mlp_step(big, widths=[width] * 4, batch=rows)

    @functools.partial(jax.jit, donate_argnums=0)
    def private(params, x, y, key):
        grads = jax.vmap(jax.grad(mlp_loss), in_axes=(None, 0, 0))(params, x[:, None], y[:, None])
        norms = jnp.sqrt(sum(jnp.sum(g.astype("float32") ** 2, axis=tuple(range(1, g.ndim))) for g in grads))
        scale = jnp.minimum(1.0, 1.0 / (norms + 1e-6))
        keys = jax.random.split(key, len(params))
        noisy = [(jnp.einsum("n,n...->...", scale, g.astype("float32")) + jax.random.normal(k, p.shape)) / rows
                 for g, k, p in zip(grads, keys, params)]
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, noisy)], mlp_loss(params, x, y)

    batch_step = sgd(mlp_loss)
    state = {"params": params}

    def dp(i: int, clock: Clock) -> None:
        state["params"], value = private(state["params"], x, y, jax.random.key(i))
        value.block_until_ready()

    return Workload(dp, ablations={"batch_gradient": _training(state, batch_step, x, y)})


def rolling_history_scan(big: bool) -> Workload:
    """A recurrent model over 256 time steps as a ``lax.scan`` whose carry is a history of the last 256 states
    (256 x 4096 f32 on the chip), shifted each step with ``jnp.roll`` before the new state is written at its end;
    each step's state is a bf16 matmul of the history's mean, trained. Ablation: the history written in place at
    the step's index (``dynamic_update_slice``), no roll."""
    import jax
    import jax.numpy as jnp

    steps, width = (256, 4096) if big else (64, 256)
    w = _normal(jax.random.key(150), (width, width), "bfloat16")
    xs = jax.random.normal(jax.random.key(151), (steps, width))

    def make_step(rolled: bool):
        def loss(w, xs):
            def cell(history, step):
                t, x = step
                state = jnp.tanh((jnp.mean(history, axis=0) + x).astype("bfloat16") @ w).astype("float32")
                if rolled:
                    return jnp.roll(history, -1, axis=0).at[-1].set(state), None
                return jax.lax.dynamic_update_slice(history, state[None], (t, 0)), None

            history, _ = jax.lax.scan(cell, jnp.zeros((steps, width)), (jnp.arange(steps), xs))
            return jnp.mean(history ** 2)

        @jax.jit
        def step(w, xs):
            value, grad = jax.value_and_grad(loss)(w, xs)
            return (w - 1e-3 * grad).astype(w.dtype), value

        return step

    state = {"w": w}
    return Workload(_training(state, make_step(True), xs, key="w"),
                    ablations={"written_in_place": _training(state, make_step(False), xs, key="w")})


def preconditioner_inverse_each_step(big: bool) -> Workload:
    """A Shampoo-like step on one f32 2048 x 2048 layer (on the chip): each annotated step's jitted update keeps a
    running Gram matrix of the gradient and preconditions the gradient by its inverse, computed every step with
    ``jnp.linalg.inv``. Ablation: the inverse computed every 10th step and reused in between."""
    import jax
    import jax.numpy as jnp

    width, rows = (2048, 4096) if big else (128, 256)
    x = jax.random.normal(jax.random.key(160), (rows, width))
    eye = jnp.eye(width)

    def loss(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)

    @jax.jit
    def every_step(w, gram, x):
        g = jax.grad(loss)(w, x)
        gram = 0.9 * gram + 0.1 * g @ g.T + 1e-3 * eye
        return w - 1e-3 * jnp.linalg.inv(gram) @ g, gram

    @jax.jit
    def with_inverse(w, gram, inverse, x):
        g = jax.grad(loss)(w, x)
        return w - 1e-3 * inverse @ g, 0.9 * gram + 0.1 * g @ g.T + 1e-3 * eye

    refresh = jax.jit(jnp.linalg.inv)
    state = {"w": _normal(jax.random.key(161), (width, width), "float32"), "gram": eye, "inverse": eye}

    def each_step(i: int, clock: Clock) -> None:
        state["w"], state["gram"] = every_step(state["w"], state["gram"], x)
        state["w"].block_until_ready()

    def every_10th(i: int, clock: Clock) -> None:
        if i % 10 == 0 or i < 0:  # the warm-up iteration (-1) compiles the refresh too
            state["inverse"] = refresh(state["gram"])
        state["w"], state["gram"] = with_inverse(state["w"], state["gram"], state["inverse"], x)
        state["w"].block_until_ready()

    return Workload(each_step, ablations={"inverse_every_10th": every_10th})


def im2col_by_hand(big: bool) -> Workload:
    """A 1-D conv net of three bf16 layers (batch 32, 8192 positions, 512 channels on the chip) whose convolutions
    are written by hand: the 9 shifted slices of the padded input concatenated along the channels (an im2col)
    and multiplied by a (9 x 512) x 512 matrix, trained, data resident. Ablation: the same convolutions as
    ``lax.conv_general_dilated``."""
    import jax
    import jax.numpy as jnp

    batch, length, channels, taps = (32, 8192, 512, 9) if big else (4, 1024, 64, 9)
    x = jax.random.normal(jax.random.key(170), (batch, length, channels)).astype("bfloat16")
    y = jnp.zeros((batch, length, channels), "float32")
    keys = jax.random.split(jax.random.key(171), 3)
    params = [_normal(k, (taps * channels, channels), "bfloat16") for k in keys]

    def by_hand(x, w):
        padded = jnp.pad(x, ((0, 0), (taps // 2, taps // 2), (0, 0)))
        return jnp.concatenate([padded[:, k:k + length] for k in range(taps)], axis=-1) @ w

    def by_conv(x, w):
        return jax.lax.conv_general_dilated(x, w.reshape(taps, channels, channels), (1,), "SAME",
                                            dimension_numbers=("NWC", "WIO", "NWC"))

    def make_step(convolve):
        def loss(params, x, y):
            for w in params:
                x = jax.nn.relu(convolve(x, w))
            return jnp.mean((x.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_hand), x, y),
                    ablations={"lax_conv": _training(state, make_step(by_conv), x, y)})


def vit_patch_embedding(big: bool) -> Workload:
    """A ViT's patch embedding and two MLP blocks in bf16 (batch 64, 224 x 224 RGB images in 16 x 16 patches on the
    chip): the image is cut into patches with a reshape and a transpose, each patch flattened and multiplied by
    the embedding matrix, trained, data resident. Ablation: the embedding as a stride-16 ``lax.conv_general_dilated``
    (the same arithmetic)."""
    import jax
    import jax.numpy as jnp

    batch, side, patch, width = (64, 224, 16, 768) if big else (8, 64, 16, 128)
    grid = side // patch
    images = jax.random.normal(jax.random.key(180), (batch, side, side, 3)).astype("bfloat16")
    keys = jax.random.split(jax.random.key(181), 5)
    params = {"embed": _normal(keys[0], (patch * patch * 3, width), "bfloat16"),
              "blocks": [_normal(k, shape, "bfloat16") for k, shape in zip(
                  keys[1:], [(width, 4 * width), (4 * width, width)] * 2)]}
    y = jnp.zeros((batch, grid * grid, width), "float32")

    def by_reshape(images, embed):
        patches = images.reshape(batch, grid, patch, grid, patch, 3).transpose(0, 1, 3, 2, 4, 5)
        return patches.reshape(batch, grid * grid, patch * patch * 3) @ embed

    def by_conv(images, embed):
        kernel = embed.reshape(patch, patch, 3, width)
        out = jax.lax.conv_general_dilated(images, kernel, (patch, patch), "VALID",
                                           dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return out.reshape(batch, grid * grid, width)

    def make_step(embedding):
        def loss(params, images, y):
            h = embedding(images, params["embed"])
            for up, down in zip(params["blocks"][::2], params["blocks"][1::2]):
                h = h + jax.nn.gelu(h @ up) @ down
            return jnp.mean((h.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_reshape), images, y),
                    ablations={"conv_embedding": _training(state, make_step(by_conv), images, y)})


def conv_patches_matmul(big: bool) -> Workload:
    """A 2-D conv net of three bf16 layers (batch 32, 64 x 64 images, 128 channels on the chip) whose 3 x 3
    convolutions are ``lax.conv_general_dilated_patches`` (each pixel's 9 neighbours as 1152 channels) followed by
    a matmul, trained, data resident. Ablation: the same convolutions as ``lax.conv_general_dilated``."""
    import jax
    import jax.numpy as jnp

    batch, side, channels = (32, 64, 128) if big else (4, 16, 32)
    x = jax.random.normal(jax.random.key(190), (batch, side, side, channels)).astype("bfloat16")
    y = jnp.zeros((batch, side, side, channels), "float32")
    keys = jax.random.split(jax.random.key(191), 3)
    params = [_normal(k, (3, 3, channels, channels), "bfloat16") for k in keys]

    def by_patches(x, w):
        patches = jax.lax.conv_general_dilated_patches(x, (3, 3), (1, 1), "SAME",
                                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
        # The patches' channels run input channel first, then the window's rows and columns.
        return patches @ w.transpose(2, 0, 1, 3).reshape(9 * channels, channels)

    def by_conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def make_step(convolve):
        def loss(params, x, y):
            for w in params:
                x = jax.nn.relu(convolve(x, w))
            return jnp.mean((x.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_patches), x, y),
                    ablations={"lax_conv": _training(state, make_step(by_conv), x, y)})


def linear_attention_quadratic(big: bool) -> Workload:
    """Four layers of linear (kernelised) attention, bf16, trained, data resident (batch 2, 8 heads of 128, 4096
    tokens on the chip): each computes ``phi(q) @ phi(k).T``, normalises it and multiplies by ``v``, an n x n
    matrix per head where no softmax needs one. Ablation: the same attention as ``phi(q) @ (phi(k).T @ v)``."""
    import jax
    import jax.numpy as jnp

    batch, seq, heads, head_dim, layers = (2, 4096, 8, 128, 4) if big else (2, 512, 4, 32, 2)
    width = heads * head_dim
    keys = jax.random.split(jax.random.key(200), layers)
    params = [{"qkv": _normal(k, (width, 3 * width), "bfloat16"), "out": _normal(k, (width, width), "bfloat16")}
              for k in keys]
    x = jax.random.normal(jax.random.key(201), (batch, seq, width)).astype("bfloat16")
    y = jnp.zeros((batch, seq, width), "float32")

    def quadratic(q, k, v):
        scores = jnp.einsum("bhnd,bhmd->bhnm", q, k)
        return jnp.einsum("bhnm,bhmd->bhnd", scores / jnp.sum(scores, -1, keepdims=True), v)

    def linear(q, k, v):
        context = jnp.einsum("bhmd,bhme->bhde", k, v)
        normaliser = jnp.einsum("bhnd,bhd->bhn", q, jnp.sum(k, 2))
        return jnp.einsum("bhnd,bhde->bhne", q, context) / normaliser[..., None]

    def make_step(attend):
        def loss(params, x, y):
            for layer in params:
                q, k, v = jnp.split((x @ layer["qkv"]).reshape(batch, seq, 3 * heads, head_dim).transpose(
                    0, 2, 1, 3), 3, axis=1)
                q, k = jax.nn.elu(q) + 1, jax.nn.elu(k) + 1
                mixed = attend(q, k, v).transpose(0, 2, 1, 3).reshape(batch, seq, width)
                x = x + mixed.astype("bfloat16") @ layer["out"]
            return jnp.mean((x.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(quadratic), x, y),
                    ablations={"reassociated": _training(state, make_step(linear), x, y)})


def moe_dense_dispatch(big: bool) -> Workload:
    """Two mixture-of-experts layers (8 experts, top-1 routing, capacity 1.25, bf16), trained, data resident (4096
    tokens of 1024 on the chip): tokens reach their experts and come back through one-hot dispatch and combine
    tensors [tokens, experts, capacity] contracted by einsum, as in GShard. Ablation: the same routing by index:
    tokens scattered into the experts' slots and gathered back."""
    import jax
    import jax.numpy as jnp

    tokens, width, hidden, experts = (4096, 1024, 4096, 8) if big else (256, 64, 128, 4)
    capacity = int(1.25 * tokens / experts)
    keys = jax.random.split(jax.random.key(210), 4)
    params = [{"router": _normal(keys[2 * n], (width, experts), "float32"),
               "w_in": _normal(keys[2 * n + 1], (experts, width, hidden), "bfloat16"),
               "w_out": _normal(keys[2 * n + 1], (experts, hidden, width), "bfloat16") * 0.5} for n in range(2)]
    x = jax.random.normal(jax.random.key(211), (tokens, width)).astype("bfloat16")
    y = jnp.zeros((tokens, width), "float32")

    def route(layer, x):
        probabilities = jax.nn.softmax(x.astype("float32") @ layer["router"])
        expert = jnp.argmax(probabilities, -1)
        gate = jnp.max(probabilities, -1)
        chosen = jax.nn.one_hot(expert, experts, dtype="int32")
        slot = jnp.sum(jnp.cumsum(chosen, 0) * chosen, -1) - 1
        return expert, slot, jnp.where(slot < capacity, gate, 0.0)

    def experts_ffn(layer, inputs):
        hidden_states = jax.nn.relu(jnp.einsum("ecd,edf->ecf", inputs, layer["w_in"]))
        return jnp.einsum("ecf,efd->ecd", hidden_states, layer["w_out"])

    def by_einsum(layer, x):
        expert, slot, gate = route(layer, x)
        dispatch = (jax.nn.one_hot(expert, experts, dtype="bfloat16")[:, :, None]
                    * jax.nn.one_hot(slot, capacity, dtype="bfloat16")[:, None, :])
        outputs = experts_ffn(layer, jnp.einsum("tec,td->ecd", dispatch, x))
        return jnp.einsum("tec,ecd->td", dispatch * gate[:, None, None].astype("bfloat16"), outputs)

    def by_index(layer, x):
        expert, slot, gate = route(layer, x)
        flat = jnp.where(slot < capacity, expert * capacity + slot, experts * capacity)
        inputs = jnp.zeros((experts * capacity + 1, width), x.dtype).at[flat].set(x)[:-1]
        outputs = experts_ffn(layer, inputs.reshape(experts, capacity, width)).reshape(-1, width)
        outputs = jnp.concatenate([outputs, jnp.zeros((1, width), outputs.dtype)])
        return outputs[flat] * gate[:, None].astype("bfloat16")

    def make_step(moe):
        def loss(params, x, y):
            for layer in params:
                x = x + moe(layer, x)
            return jnp.mean((x.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_einsum), x, y),
                    ablations={"by_index": _training(state, make_step(by_index), x, y)})


def int32_count_matmul(big: bool) -> Workload:
    """Word co-occurrence counts of a document shard, ``counts.T @ counts`` with the counts (0-3 per word and
    document, 8192 documents x 8192 words on the chip) held as int32, then a PMI-like normalisation in f32; the
    same shard each step. Ablation: the counts in bf16 (exact for such small integers), multiplied with an f32
    accumulator."""
    import jax
    import jax.numpy as jnp

    documents, vocabulary = (8192, 8192) if big else (512, 512)
    counts = jax.random.randint(jax.random.key(220), (documents, vocabulary), 0, 4, dtype="int32")

    def normalised(cooccurrence):
        totals = jnp.diagonal(cooccurrence).astype("float32") + 1
        return jnp.sum(jnp.log1p(cooccurrence.astype("float32")) - 0.5 * jnp.log(totals[:, None] * totals))

    as_int = jax.jit(lambda c: normalised(c.T @ c))
    as_bf16 = jax.jit(lambda c: normalised(
        jax.lax.dot_general(c, c, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32).astype("int32")))
    counts16 = counts.astype("bfloat16")
    return Workload(lambda i, clock: as_int(counts).block_until_ready(),
                    ablations={"bf16_counts": lambda i, clock: as_bf16(counts16).block_until_ready()})


def strided_conv_by_slicing(big: bool) -> Workload:
    """A bf16 conv net of four 3 x 3 convolutions (batch 32, 128 x 128 images, 128 channels on the chip) whose
    last three halve the resolution by computing the convolution at full resolution and keeping every second row
    and column (``y[:, ::2, ::2]``), trained, data resident. Ablation: the same convolutions with stride 2."""
    import jax
    import jax.numpy as jnp

    batch, side, channels = (32, 128, 128) if big else (4, 32, 32)
    keys = jax.random.split(jax.random.key(230), 4)
    params = [_normal(k, (3, 3, channels, channels), "bfloat16") for k in keys]
    x = jax.random.normal(jax.random.key(231), (batch, side, side, channels)).astype("bfloat16")
    y = jnp.zeros((batch, side // 8, side // 8, channels), "float32")

    def conv(x, w, stride):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def make_step(downsample):
        def loss(params, x, y):
            x = jax.nn.relu(conv(x, params[0], 1))
            for w in params[1:]:
                x = jax.nn.relu(downsample(x, w))
            return jnp.mean((x.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    by_slicing = make_step(lambda x, w: conv(x, w, 1)[:, ::2, ::2, :])
    by_stride = make_step(lambda x, w: conv(x, w, 2))
    return Workload(_training(state, by_slicing, x, y), ablations={"strided": _training(state, by_stride, x, y)})


def subprocess_each_step(big: bool) -> Workload:
    """After each bf16 MLP train step the training thread calls ``report_usage``, which starts a Python
    subprocess to read the machine's load and waits for its output (as a shell-out to a monitoring command
    would). Python tracer on; ablation: a report every 50th step."""
    params, train_step, x, y = _mlp_step(big)
    state = {"params": params}

    def report_usage() -> str:
        return subprocess.run([sys.executable, "-c", "import os; print(os.getloadavg())"], capture_output=True,
                              text=True, check=True).stdout

    def loop(every: int):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = train_step(state["params"], x, y)
            value.block_until_ready()
            if i % every == every - 1:
                with clock.part("report_usage"):
                    report_usage()

        return iteration

    return Workload(loop(1), ablations={"every_50": loop(50)})


def attention_heads_python_loop(big: bool) -> Workload:
    """Four self-attention layers (batch 8, 1024 tokens, 16 heads of 64, bf16), trained, data resident, whose
    heads are a Python loop inside the jit: each head's projections, softmax attention and output are separate
    small matmuls, concatenated at the end. Ablation: the heads as one batched einsum."""
    import jax
    import jax.numpy as jnp

    batch, seq, heads, head_dim, layers = (8, 1024, 16, 64, 4) if big else (2, 128, 4, 16, 2)
    width = heads * head_dim
    keys = jax.random.split(jax.random.key(240), layers)
    params = [{"qkv": _normal(k, (width, 3 * width), "bfloat16"), "out": _normal(k, (width, width), "bfloat16")}
              for k in keys]
    x = jax.random.normal(jax.random.key(241), (batch, seq, width)).astype("bfloat16")
    y = jnp.zeros((batch, seq, width), "float32")

    def attend(q, k, v):
        scores = jnp.einsum("...nd,...md->...nm", q, k).astype("float32") / head_dim ** 0.5
        return jnp.einsum("...nm,...md->...nd", jax.nn.softmax(scores).astype("bfloat16"), v)

    def head_by_head(x, layer):
        q, k, v = jnp.split(layer["qkv"], 3, axis=1)
        columns = [slice(h * head_dim, (h + 1) * head_dim) for h in range(heads)]
        return jnp.concatenate([attend(x @ q[:, c], x @ k[:, c], x @ v[:, c]) for c in columns], -1)

    def all_heads(x, layer):
        q, k, v = jnp.split((x @ layer["qkv"]).reshape(batch, seq, 3 * heads, head_dim).transpose(0, 2, 1, 3), 3,
                            axis=1)
        return attend(q, k, v).transpose(0, 2, 1, 3).reshape(batch, seq, width)

    def make_step(attention):
        def loss(params, x, y):
            for layer in params:
                x = x + attention(x, layer) @ layer["out"]
            return jnp.mean((x.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(head_by_head), x, y),
                    ablations={"batched_heads": _training(state, make_step(all_heads), x, y)})


def logits_for_every_position(big: bool) -> Workload:
    """A prompt's prefill for generation (batch 8, 1024 tokens of 1024, two bf16 MLP blocks): the vocabulary's logits
    (32768 words) are computed for every position and only the last position's are kept to pick the next token.
    Ablation: the last position's hidden state alone multiplied by the vocabulary."""
    import jax
    import jax.numpy as jnp

    batch, seq, width, vocabulary = (8, 1024, 1024, 32768) if big else (2, 128, 128, 4096)
    keys = jax.random.split(jax.random.key(250), 3)
    blocks = [_normal(k, (width, width), "bfloat16") for k in keys[:2]]
    unembed = _normal(keys[2], (width, vocabulary), "bfloat16")
    prompt = jax.random.normal(jax.random.key(251), (batch, seq, width)).astype("bfloat16")

    def hidden(blocks, x):
        for w in blocks:
            x = x + jax.nn.gelu(x @ w)
        return x

    @jax.jit
    def every_position(blocks, unembed, x):
        return jnp.argmax((hidden(blocks, x) @ unembed)[:, -1].astype("float32"), -1)

    @jax.jit
    def last_position(blocks, unembed, x):
        return jnp.argmax((hidden(blocks, x)[:, -1] @ unembed).astype("float32"), -1)

    return Workload(lambda i, clock: every_position(blocks, unembed, prompt).block_until_ready(),
                    ablations={"last_only": lambda i, clock: last_position(blocks, unembed, prompt)
                               .block_until_ready()})


def strided_conv_downsampling(big: bool) -> Workload:
    """A bf16 conv net of four 3 x 3 convolutions (batch 32, 128 x 128 images, 128 channels on the chip) whose last
    three halve the resolution with stride 2, as a ResNet's stages do, trained, data resident. Ablation: the same
    net with every convolution at stride 1 and full resolution, four times the work of the last three."""
    import jax
    import jax.numpy as jnp

    batch, side, channels = (32, 128, 128) if big else (4, 32, 32)
    keys = jax.random.split(jax.random.key(260), 4)
    params = [_normal(k, (3, 3, channels, channels), "bfloat16") for k in keys]
    x = jax.random.normal(jax.random.key(261), (batch, side, side, channels)).astype("bfloat16")

    def conv(x, w, stride):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def make_step(stride: int):
        def loss(params, x):
            x = jax.nn.relu(conv(x, params[0], 1))
            for w in params[1:]:
                x = jax.nn.relu(conv(x, w, stride))
            return jnp.mean(x.astype("float32") ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(2), x),
                    ablations={"full_resolution": _training(state, make_step(1), x)})


def conv_transpose_decoder(big: bool) -> Workload:
    """A bf16 decoder of three 4 x 4 transposed convolutions of stride 2 (``lax.conv_transpose``; batch 32, 16 x 16
    up to 128 x 128, 128 channels on the chip), trained, data resident. Ablation: nearest-neighbour upsampling
    (``jnp.repeat``) then a 3 x 3 convolution."""
    import jax
    import jax.numpy as jnp

    batch, side, channels = (32, 16, 128) if big else (4, 8, 32)
    keys = jax.random.split(jax.random.key(270), 6)
    x = jax.random.normal(jax.random.key(271), (batch, side, side, channels)).astype("bfloat16")
    transposed = [_normal(k, (4, 4, channels, channels), "bfloat16") for k in keys[:3]]
    resized = [_normal(k, (3, 3, channels, channels), "bfloat16") for k in keys[3:]]
    numbers = ("NHWC", "HWIO", "NHWC")

    def by_transpose(x, w):
        return jax.lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=numbers)

    def by_resize(x, w):
        up = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
        return jax.lax.conv_general_dilated(up, w, (1, 1), "SAME", dimension_numbers=numbers)

    def make_step(upsample):
        def loss(params, x):
            for w in params:
                x = jax.nn.relu(upsample(x, w))
            return jnp.mean(x.astype("float32") ** 2)

        return sgd(loss)

    state = {"transposed": transposed, "resized": resized}
    return Workload(_training(state, make_step(by_transpose), x, key="transposed"),
                    ablations={"resize_then_conv": _training(state, make_step(by_resize), x, key="resized")})


def depthwise_separable_net(big: bool) -> Workload:
    """A MobileNet-like bf16 net: six blocks of a 3 x 3 depthwise convolution (``feature_group_count`` = channels)
    and a 1 x 1 pointwise one (batch 64, 56 x 56, 256 channels on the chip), trained, data resident; nothing else
    in the loop. Depthwise convolutions do little math per byte: the step is bound by memory, not the MXU."""
    import jax
    import jax.numpy as jnp

    batch, side, channels, blocks = (64, 56, 256, 6) if big else (4, 16, 32, 2)
    keys = jax.random.split(jax.random.key(280), 2 * blocks)
    params = [{"depthwise": _normal(keys[2 * b], (3, 3, 1, channels), "bfloat16"),
               "pointwise": _normal(keys[2 * b + 1], (1, 1, channels, channels), "bfloat16")} for b in range(blocks)]
    x = jax.random.normal(jax.random.key(281), (batch, side, side, channels)).astype("bfloat16")
    numbers = ("NHWC", "HWIO", "NHWC")

    def loss(params, x):
        for block in params:
            y = jax.lax.conv_general_dilated(x, block["depthwise"], (1, 1), "SAME", dimension_numbers=numbers,
                                             feature_group_count=channels)
            x = x + jax.nn.relu(jax.lax.conv_general_dilated(jax.nn.relu(y), block["pointwise"], (1, 1), "SAME",
                                                             dimension_numbers=numbers))
        return jnp.mean(x.astype("float32") ** 2)

    state = {"params": params}
    return Workload(_training(state, sgd(loss), x))


def metrics_push_waits_for_ack(big: bool) -> Workload:
    """After each bf16 MLP train step, ``push_metrics`` sends the step's host-side statistics over a socket pair to
    a collector thread and waits for its acknowledgement, which the collector sends after aggregating them (a sort
    of the run's history, tens of milliseconds). Python tracer on; ablation: the push sent without waiting for the
    acknowledgement."""
    import socket

    params, train_step, x, y = _mlp_step(big)
    state = {"params": params}
    ours, theirs = socket.socketpair()
    stopping = threading.Event()

    history = [float((n * 7919) % 100_003) for n in range(150_000)]

    def collector() -> None:
        while not stopping.is_set():
            try:
                message = theirs.recv(65536)
            except OSError:
                return
            if not message:
                return
            sorted(history)  # the aggregation: percentiles over the run so far
            if message.startswith(b"wait"):
                theirs.sendall(b"ok")

    threading.Thread(target=collector, daemon=True, name="metrics_collector").start()

    def push_metrics(step: int, wait: bool) -> None:
        ours.sendall((b"wait " if wait else b"push ") + str(step).encode())
        if wait:
            ours.recv(16)

    def loop(wait: bool):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = train_step(state["params"], x, y)
            value.block_until_ready()
            with clock.part("push_metrics"):
                push_metrics(i, wait)

        return iteration

    def stop() -> None:
        stopping.set()
        ours.close()
        theirs.close()

    return Workload(loop(True), ablations={"no_ack": loop(False)}, stop=stop)


def int8_weights_dequantised(big: bool) -> Workload:
    """Weight-only int8 inference: a chain of four 8192 x 8192 layers whose weights are stored as int8 with a scale
    per output column and dequantised to bf16 inside the jit (``w.astype(bf16) * scale``) before each matmul,
    batch 256. Ablation: the same chain on bf16 weights."""
    import jax
    import jax.numpy as jnp

    n, links, batch = (8192, 4, 256) if big else (256, 4, 16)
    keys = jax.random.split(jax.random.key(290), links + 1)
    weights = [jax.random.randint(k, (n, n), -127, 128, dtype=jnp.int8) for k in keys[1:]]
    scales = [jnp.full((n,), 1.0 / (127 * n ** 0.5), "bfloat16") for _ in keys[1:]]
    x = jax.random.normal(keys[0], (batch, n)).astype("bfloat16")
    dense = [w.astype("bfloat16") * s for w, s in zip(weights, scales)]

    @jax.jit
    def quantised(x, weights, scales):
        for w, s in zip(weights, scales):
            x = jnp.tanh(x @ (w.astype("bfloat16") * s))
        return x

    @jax.jit
    def plain(x, weights):
        for w in weights:
            x = jnp.tanh(x @ w)
        return x

    return Workload(lambda i, clock: quantised(x, weights, scales).block_until_ready(),
                    ablations={"bf16_weights": lambda i, clock: plain(x, dense).block_until_ready()})


def two_hop_propagation_order(big: bool) -> Workload:
    """A two-hop graph layer trained on fixed node features (8192 nodes, 128 features, bf16 on the chip): each step
    propagates over a dense adjacency matrix as ``(adj @ adj) @ (h @ w)``, an n x n x n product, where
    ``adj @ (adj @ (h @ w))`` needs two n x n x 128 ones. Ablation: the reassociated product."""
    import jax
    import jax.numpy as jnp

    nodes, features = (8192, 128) if big else (1024, 32)
    keys = jax.random.split(jax.random.key(300), 3)
    adjacency = (jax.random.uniform(keys[0], (nodes, nodes)) < 0.01).astype("bfloat16") / (0.01 * nodes)
    h = jax.random.normal(keys[1], (nodes, features)).astype("bfloat16")
    params = [_normal(keys[2], (features, features), "bfloat16")]
    y = jnp.zeros((nodes, features), "float32")

    def make_step(propagate):
        def loss(params, adjacency, h, y):
            return jnp.mean((propagate(adjacency, h @ params[0]).astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    squared_first = make_step(lambda a, x: (a @ a) @ x)
    reassociated = make_step(lambda a, x: a @ (a @ x))
    return Workload(_training(state, squared_first, adjacency, h, y),
                    ablations={"reassociated": _training(state, reassociated, adjacency, h, y)})


def memmap_random_rows(big: bool) -> Workload:
    """Each step reads a batch of 128 random uint8 images from a memory-mapped file of 4096 (``read_batch``: fancy
    indexing of an ``np.memmap`` and scaling to float32 on the training thread), puts it on the device and trains a
    patch-embedding MLP on it (bf16). Python tracer on; ablation: the batch's rows read by a background thread two
    batches ahead."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rows, batch, side, patch, width = (4096, 128, 224, 16, 768) if big else (1024, 64, 128, 16, 128)
    grid = side // patch
    folder = Path(tempfile.mkdtemp(prefix="images-"))
    path = folder / "images.u8"
    images = np.memmap(path, dtype=np.uint8, mode="w+", shape=(rows, side, side, 3))
    for start in range(0, rows, 256):
        images[start:start + 256] = np.random.default_rng(start).integers(0, 256, images[start:start + 256].shape,
                                                                          dtype=np.uint8)
    images.flush()
    del images
    dataset = np.memmap(path, dtype=np.uint8, mode="r", shape=(rows, side, side, 3))
    keys = jax.random.split(jax.random.key(310), 3)
    params = {"embed": _normal(keys[0], (patch * patch * 3, width), "bfloat16"),
              "up": _normal(keys[1], (width, 4 * width), "bfloat16"),
              "down": _normal(keys[2], (4 * width, width), "bfloat16")}
    y = jnp.zeros((batch, grid * grid, width), "float32")

    def loss(params, images, y):
        patches = images.reshape(batch, grid, patch, grid, patch, 3).transpose(0, 1, 3, 2, 4, 5)
        h = patches.reshape(batch, grid * grid, patch * patch * 3).astype("bfloat16") @ params["embed"]
        h = h + jax.nn.gelu(h @ params["up"]) @ params["down"]
        return jnp.mean((h.astype("float32") - y) ** 2)

    train_step = sgd(loss)
    state = {"params": params}

    def read_batch(step: int) -> np.ndarray:
        chosen = np.sort(np.random.default_rng(step % 1000 + 1000).choice(rows, batch, replace=False))
        return dataset[chosen].astype(np.float32) / 255.0

    readers = _read_ahead(read_batch, every=1, ahead=2, name="reader")

    def inline(i: int, clock: Clock) -> None:
        with clock.part("read_batch"):
            batch_images = read_batch(i)
        state["params"], value = train_step(state["params"], jax.device_put(batch_images), y)
        value.block_until_ready()

    def ahead(i: int, clock: Clock) -> None:
        batch_images = readers.queue(True).get()
        state["params"], value = train_step(state["params"], jax.device_put(batch_images), y)
        value.block_until_ready()

    def stop() -> None:
        readers.stop()
        shutil.rmtree(folder, ignore_errors=True)

    return Workload(inline, ablations={"read_ahead": ahead}, stop=stop)


def grouped_query_repeat_kv(big: bool) -> Workload:
    """Grouped-query attention prefill in bf16 (batch 4, 2048 tokens, 32 query heads sharing 4 key/value heads of
    128, two layers, causal, on the chip), the key/value heads widened to 32 with ``jnp.repeat`` before the score
    and value einsums. Ablation: the query heads grouped under their key/value head instead (no repeat)."""
    import jax
    import jax.numpy as jnp

    batch, seq, heads, kv_heads, head_dim, layers = (4, 2048, 32, 4, 128, 2) if big else (2, 256, 8, 2, 32, 2)
    width, group = heads * head_dim, heads // kv_heads
    keys = jax.random.split(jax.random.key(320), 4 * layers + 1)
    params = [{"q": _normal(keys[4 * l], (width, width), "bfloat16"),
               "k": _normal(keys[4 * l + 1], (width, kv_heads * head_dim), "bfloat16"),
               "v": _normal(keys[4 * l + 2], (width, kv_heads * head_dim), "bfloat16"),
               "out": _normal(keys[4 * l + 3], (width, width), "bfloat16")} for l in range(layers)]
    x = jax.random.normal(keys[-1], (batch, seq, width)).astype("bfloat16")
    causal = jnp.tril(jnp.ones((seq, seq), bool))

    def repeated(q, k, v):
        k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / head_dim ** 0.5
        weights = jax.nn.softmax(jnp.where(causal, scores.astype("float32"), -1e30), -1).astype("bfloat16")
        return jnp.einsum("bhqk,bhkd->bhqd", weights, v)

    def grouped(q, k, v):
        q = q.reshape(batch, kv_heads, group, seq, head_dim)
        scores = jnp.einsum("bgmqd,bgkd->bgmqk", q, k) / head_dim ** 0.5
        weights = jax.nn.softmax(jnp.where(causal, scores.astype("float32"), -1e30), -1).astype("bfloat16")
        return jnp.einsum("bgmqk,bgkd->bgmqd", weights, v).reshape(batch, heads, seq, head_dim)

    def make_prefill(attend):
        @jax.jit
        def prefill(params, x):
            for layer in params:
                q = (x @ layer["q"]).reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)
                k = (x @ layer["k"]).reshape(batch, seq, kv_heads, head_dim).transpose(0, 2, 1, 3)
                v = (x @ layer["v"]).reshape(batch, seq, kv_heads, head_dim).transpose(0, 2, 1, 3)
                x = x + attend(q, k, v).transpose(0, 2, 1, 3).reshape(batch, seq, width) @ layer["out"]
            return x

        return lambda i, clock: prefill(params, x).block_until_ready()

    return Workload(make_prefill(repeated), ablations={"grouped": make_prefill(grouped)})


def periodic_weight_reload(big: bool) -> Workload:
    """bf16 MLP train steps; every 8th step evaluates a reference model whose f32 weights (4 x 4096 x 4096, 256 MiB)
    ``load_reference`` reads from an .npz on disk and puts on the device each time. Python tracer on; ablation: the
    reference weights loaded once and kept on the device."""
    import jax
    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    widths = [4096] * 5 if big else [2048] * 5
    folder = Path(tempfile.mkdtemp(prefix="reference-"))
    reference = [np.asarray(w) for w in _mlp_params(widths, "float32", seed=330)]
    np.savez(folder / "reference.npz", *reference)
    probe = jax.random.normal(jax.random.key(331), (256, widths[0]))
    state = {"params": params}

    @jax.jit
    def evaluate(weights, probe):
        for w in weights:
            probe = jax.nn.relu(probe @ w)
        return probe.mean()

    def load_reference() -> list:
        with np.load(folder / "reference.npz") as saved:
            return [jax.device_put(saved[name]) for name in saved.files]

    resident = load_reference()

    def loop(reload: bool):
        def iteration(i: int, clock: Clock) -> None:
            state["params"], value = train_step(state["params"], x, y)
            value.block_until_ready()
            if i % 8 == 7:
                with clock.part("load_reference"):
                    weights = load_reference() if reload else resident
                evaluate(weights, probe).block_until_ready()

        return iteration

    return Workload(loop(True), ablations={"kept_on_device": loop(False)},
                    stop=lambda: shutil.rmtree(folder, ignore_errors=True))


@dataclass
class _Decoder:
    """A 4-layer bf16 transformer decoding into a fixed-length token buffer, one token per call: ``full`` runs the
    whole causal forward over the buffer (no key/value cache), ``cached`` one token against a key/value cache."""

    full: Callable
    cached: Callable
    state: dict
    length: int
    params: dict
    logits_at: Callable  # (params, tokens, t) -> the logits at position t, from the whole forward over the buffer


def _decoder(big: bool, batch: int, choose: Callable) -> _Decoder:
    """The decoder of width 1024 with a 1024-token buffer on the chip; ``choose(logits, t)`` picks each next
    token on the device."""
    import jax
    import jax.numpy as jnp

    d, layers, heads, length, vocab = (1024, 4, 8, 1024, 8192) if big else (128, 2, 4, 128, 256)
    head_dim = d // heads
    keys = iter(jax.random.split(jax.random.key(340), 4 * layers + 1))
    params = {"embed": _normal(next(keys), (vocab, d), "bfloat16") * 16,
              "layers": [{"qkv": _normal(next(keys), (d, 3 * d), "bfloat16"),
                          "out": _normal(next(keys), (d, d), "bfloat16"),
                          "up": _normal(next(keys), (d, 4 * d), "bfloat16"),
                          "down": _normal(next(keys), (4 * d, d), "bfloat16")} for _ in range(layers)]}

    def norm(x):
        x32 = x.astype("float32")
        return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype("bfloat16")

    def mlp(layer, x):
        return x + jax.nn.gelu(norm(x) @ layer["up"]) @ layer["down"]

    def next_token(params, x, tokens, t):
        logits = norm(x) @ params["embed"].T
        return tokens.at[:, t + 1].set(choose(logits, t).astype(tokens.dtype))

    def hidden_at(params, tokens, t):
        x = params["embed"][tokens]
        causal = jnp.tril(jnp.ones((length, length), bool))
        for layer in params["layers"]:
            q, k, v = jnp.split((norm(x) @ layer["qkv"]).reshape(batch, length, 3 * heads, head_dim), 3, axis=2)
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype("float32") / head_dim ** 0.5
            weights = jax.nn.softmax(jnp.where(causal, scores, -1e30), -1).astype("bfloat16")
            x = x + jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, length, d) @ layer["out"]
            x = mlp(layer, x)
        return jax.lax.dynamic_index_in_dim(x, t, axis=1, keepdims=False)

    def logits_at(params, tokens, t):
        return norm(hidden_at(params, tokens, t)) @ params["embed"].T

    @jax.jit
    def full_forward(params, tokens, t):
        return next_token(params, hidden_at(params, tokens, t), tokens, t)

    def decode_cached(params, cache, tokens, t):
        x = params["embed"][jax.lax.dynamic_index_in_dim(tokens, t, axis=1, keepdims=False)]
        visible = jnp.arange(length) <= t
        updated = []
        for layer, (keys_cache, values_cache) in zip(params["layers"], cache):
            q, k, v = jnp.split((norm(x) @ layer["qkv"]).reshape(batch, 3 * heads, head_dim), 3, axis=1)
            keys_cache = jax.lax.dynamic_update_index_in_dim(keys_cache, k, t, axis=1)
            values_cache = jax.lax.dynamic_update_index_in_dim(values_cache, v, t, axis=1)
            scores = jnp.einsum("bhd,bkhd->bhk", q, keys_cache).astype("float32") / head_dim ** 0.5
            weights = jax.nn.softmax(jnp.where(visible, scores, -1e30), -1).astype("bfloat16")
            x = x + jnp.einsum("bhk,bkhd->bhd", weights, values_cache).reshape(batch, d) @ layer["out"]
            x = mlp(layer, x)
            updated.append((keys_cache, values_cache))
        return next_token(params, x, tokens, t), updated

    cached = jax.jit(decode_cached, donate_argnums=1)
    state = {"tokens": jnp.zeros((batch, length), "int32"),
             "cache": [tuple(jnp.zeros((batch, length, heads, head_dim), "bfloat16") for _ in "kv")
                       for _ in range(layers)]}

    def full(i: int, clock: Clock) -> None:
        state["tokens"] = full_forward(params, state["tokens"], i % (length - 1)).block_until_ready()

    def with_cache(i: int, clock: Clock) -> None:
        state["tokens"], state["cache"] = cached(params, state["cache"], state["tokens"], i % (length - 1))
        state["tokens"].block_until_ready()

    return _Decoder(full, with_cache, state, length, params, logits_at)


def _greedy(logits, t):
    import jax.numpy as jnp

    return jnp.argmax(logits, -1)


def _top_k_sample(logits, t, k: int = 40):
    import jax
    import jax.numpy as jnp

    top, indices = jax.lax.top_k(logits.astype("float32"), k)
    chosen = jax.random.categorical(jax.random.fold_in(jax.random.key(341), t), top)
    return jnp.take_along_axis(indices, chosen[:, None], axis=1)[:, 0]


def decode_without_kv_cache(big: bool) -> Workload:
    """Greedy decoding from a 4-layer bf16 transformer (d 1024, batch 8, a 1024-token buffer on the chip), one
    token per step, each step running the whole causal forward over the buffer and reading the logits at the current
    position: no key/value cache. Ablation: the same model decoding with a key/value cache (one token's projections
    per step, attention over the cache)."""
    decoder = _decoder(big, 8 if big else 4, _greedy)
    return Workload(decoder.full, ablations={"kv_cache": decoder.cached})


def cached_decode_top_k(big: bool) -> Workload:
    """Top-k sampling (k 40, on the device) from the same 4-layer bf16 transformer with a key/value cache, batch 8:
    each step runs one token through the model and attends over the cache, the next step waiting on it. Ablation:
    batch 32 (4x), which a loop bound by reading the weights and the cache runs in nearly the same time."""
    decoder, wide = _decoder(big, 8 if big else 4, _top_k_sample), _decoder(big, 32 if big else 16, _top_k_sample)
    return Workload(decoder.cached, ablations={"batch_x4": wide.cached})


def cross_attention_recomputed(big: bool) -> Workload:
    """Decoding against an encoder's output (batch 8, 2048 encoder positions of 1024, four bf16 layers of
    cross-attention and MLP on the chip), one token per step: each step projects the encoder's output to each
    layer's keys and values again, though the encoder's output does not change while decoding. Ablation: the keys
    and values projected once, before the loop, and passed to each step."""
    import jax
    import jax.numpy as jnp

    batch, memory_length, d, layers, heads = (8, 2048, 1024, 4, 8) if big else (4, 256, 128, 2, 4)
    head_dim = d // heads
    keys = jax.random.split(jax.random.key(360), 5 * layers + 1)
    params = [{name: _normal(keys[5 * l + n], shape, "bfloat16") for n, (name, shape) in enumerate(
        [("q", (d, d)), ("kv", (d, 2 * d)), ("out", (d, d)), ("up", (d, 4 * d)), ("down", (4 * d, d))])}
        for l in range(layers)]
    memory = jax.random.normal(keys[-1], (batch, memory_length, d)).astype("bfloat16")

    def project(layer, memory):
        return jnp.split((memory @ layer["kv"]).reshape(batch, memory_length, 2 * heads, head_dim), 2, axis=2)

    def attend(params, x, projected):
        for layer, (k, v) in zip(params, projected):
            q = (x @ layer["q"]).reshape(batch, heads, head_dim)
            scores = jnp.einsum("bhd,bkhd->bhk", q, k).astype("float32") / head_dim ** 0.5
            weights = jax.nn.softmax(scores, -1).astype("bfloat16")
            x = x + jnp.einsum("bhk,bkhd->bhd", weights, v).reshape(batch, d) @ layer["out"]
            x = x + jax.nn.gelu(x @ layer["up"]) @ layer["down"]
        return x / jnp.linalg.norm(x.astype("float32"), axis=-1, keepdims=True).astype(x.dtype)

    @jax.jit
    def step_projecting(params, x, memory):
        return attend(params, x, [project(layer, memory) for layer in params])

    @jax.jit
    def step_cached(params, x, projected):
        return attend(params, x, projected)

    projected = jax.jit(lambda params, memory: [project(layer, memory) for layer in params])(params, memory)
    state = {"x": jnp.ones((batch, d), "bfloat16"), "y": jnp.ones((batch, d), "bfloat16")}

    def iteration(i: int, clock: Clock) -> None:
        state["x"] = step_projecting(params, state["x"], memory).block_until_ready()

    def once(i: int, clock: Clock) -> None:
        state["y"] = step_cached(params, state["y"], projected).block_until_ready()

    return Workload(iteration, ablations={"projected_once": once})


def contrastive_similarity_loss(big: bool) -> Workload:
    """A CLIP-style contrastive step in bf16 (batch 8192 image and text embeddings from two 2-layer towers of 1024,
    a 512-wide joint space on the chip): the loss is the cross-entropy of the batch x batch similarity matrix both
    ways, trained, data resident. Ablation: the similarity matrix's softmax in bf16 instead of float32."""
    import jax
    import jax.numpy as jnp

    batch, width, joint = (8192, 1024, 512) if big else (512, 128, 64)
    keys = jax.random.split(jax.random.key(370), 6)
    params = {tower: [_normal(k, shape, "bfloat16") for k, shape in zip(tower_keys, [(width, width), (width, joint)])]
              for tower, tower_keys in (("image", keys[:2]), ("text", keys[2:4]))}
    images = jax.random.normal(keys[4], (batch, width)).astype("bfloat16")
    texts = jax.random.normal(keys[5], (batch, width)).astype("bfloat16")

    def make_step(logits_dtype: str):
        def embed(tower, x):
            x = jax.nn.gelu(x @ tower[0]) @ tower[1]
            return x / jnp.linalg.norm(x.astype("float32"), axis=-1, keepdims=True).astype(x.dtype)

        def loss(params, images, texts):
            logits = (embed(params["image"], images) @ embed(params["text"], texts).T).astype(logits_dtype) * 20
            diagonal = jnp.arange(batch)
            image_to_text = jax.nn.log_softmax(logits, -1)[diagonal, diagonal]
            text_to_image = jax.nn.log_softmax(logits, 0)[diagonal, diagonal]
            return -(image_to_text.astype("float32").mean() + text_to_image.astype("float32").mean()) / 2

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step("float32"), images, texts),
                    ablations={"bf16_logits": _training(state, make_step("bfloat16"), images, texts)})


def masked_lm_all_positions(big: bool) -> Workload:
    """A masked-language-model step in bf16 (batch 32 x 512 tokens, two encoder MLP blocks of 768, a 30,522-token
    vocabulary on the chip): the vocabulary logits are computed for every position and the 76 masked positions of
    each sequence then gathered for the loss, trained, data resident. Ablation: the masked positions' hidden states
    gathered first and only those multiplied by the vocabulary."""
    import jax
    import jax.numpy as jnp

    batch, length, width, vocab, masked = (32, 512, 768, 30522, 76) if big else (8, 128, 128, 2048, 19)
    keys = jax.random.split(jax.random.key(380), 7)
    params = {"embed": _normal(keys[0], (vocab, width), "bfloat16") * 16,
              "blocks": [_normal(k, shape, "bfloat16") for k, shape in zip(
                  keys[1:5], [(width, 4 * width), (4 * width, width)] * 2)]}
    tokens = jax.random.randint(keys[5], (batch, length), 0, vocab)
    positions = jnp.sort(jax.random.permutation(keys[6], length)[:masked])[None, :].repeat(batch, 0)
    labels = jnp.take_along_axis(tokens, positions, axis=1)

    def encode(params, tokens):
        h = params["embed"][tokens]
        for up, down in zip(params["blocks"][::2], params["blocks"][1::2]):
            h = h + jax.nn.gelu(h @ up) @ down
        return h

    def cross_entropy(logits, labels):
        logits = logits.astype("float32")
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits, -1), labels[..., None], -1))

    def every_position(params, tokens, positions, labels):
        logits = encode(params, tokens) @ params["embed"].T
        return cross_entropy(jnp.take_along_axis(logits, positions[..., None], axis=1), labels)

    def masked_first(params, tokens, positions, labels):
        h = jnp.take_along_axis(encode(params, tokens), positions[..., None], axis=1)
        return cross_entropy(h @ params["embed"].T, labels)

    state = {"params": params}
    return Workload(_training(state, sgd(every_position), tokens, positions, labels),
                    ablations={"masked_first": _training(state, sgd(masked_first), tokens, positions, labels)})


def gram_matrix_first(big: bool) -> Workload:
    """A least-squares fit by gradient steps in bf16 on the chip: each step forms the Gram matrix of the 65,536 x
    512 design matrix and multiplies it by the 512 x 8 coefficients, ``(x.T @ x) @ w - x.T @ y``, where
    ``x.T @ (x @ w)`` needs two thin products. Ablation: the reassociated product."""
    import jax
    import jax.numpy as jnp

    rows, features, targets = (65536, 512, 8) if big else (8192, 128, 8)
    keys = jax.random.split(jax.random.key(390), 3)
    x = (jax.random.normal(keys[0], (rows, features)) / rows ** 0.5).astype("bfloat16")
    y = (jax.random.normal(keys[1], (rows, targets)) / rows ** 0.5).astype("bfloat16")

    def make_step(gram_first: bool):
        @jax.jit
        def step(w, x, y):
            fitted = (x.T @ x) @ w if gram_first else x.T @ (x @ w)
            return w - 0.1 * (fitted - x.T @ y)

        return step

    state = {"w": jnp.zeros((features, targets), "bfloat16"), "v": jnp.zeros((features, targets), "bfloat16")}
    first, reassociated = make_step(True), make_step(False)

    def iteration(i: int, clock: Clock) -> None:
        state["w"] = first(state["w"], x, y).block_until_ready()

    def ablation(i: int, clock: Clock) -> None:
        state["v"] = reassociated(state["v"], x, y).block_until_ready()

    return Workload(iteration, ablations={"reassociated": ablation})


def decode_logits_to_host(big: bool) -> Workload:
    """Greedy decoding from the 4-layer bf16 transformer without a key/value cache, the host keeping the tokens:
    each step runs the whole causal forward over the 1024-token buffer, returns the current position's logits,
    and the host picks the argmax with numpy and writes it into its buffer. Ablation: the same steps with a
    key/value cache on the device."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    decoder = _decoder(big, 8 if big else 4, _greedy)
    tokens = np.zeros(decoder.state["tokens"].shape, np.int32)

    position_logits = jax.jit(decoder.logits_at)

    def iteration(i: int, clock: Clock) -> None:
        t = i % (decoder.length - 1)
        logits = np.asarray(position_logits(decoder.params, jnp.asarray(tokens), t))
        tokens[:, t + 1] = logits.argmax(-1)

    return Workload(iteration, ablations={"kv_cache": decoder.cached})


def shard_reload_every_n(big: bool) -> Workload:
    """bf16 MLP train steps on batches cut from a data shard on disk: every 10th step ``next_shard`` reads the
    next 192 MiB shard (np.load of an .npy) and puts it on the device. Python tracer on; ablation: the shards
    read ahead by a background thread and put on the device there."""
    import jax
    import numpy as np

    params, train_step, x, y = _mlp_step(big)
    batch, width = x.shape
    shard_rows = 12 * batch if big else 40 * batch
    folder = Path(tempfile.mkdtemp(prefix="shards-"))
    for n in range(3):
        np.save(folder / f"shard-{n}.npy", np.random.default_rng(n).standard_normal((shard_rows, width),
                                                                                 dtype=np.float32))
    state = {"params": params, "shard": None}

    def next_shard(step: int):
        return jax.device_put(np.load(folder / f"shard-{(step // 10) % 3}.npy"))

    readers = _read_ahead(next_shard, every=10, ahead=1, name="shard_reader")

    def loop(ahead: bool):
        def iteration(i: int, clock: Clock) -> None:
            if i % 10 == 0 or state["shard"] is None:
                with clock.part("next_shard"):
                    state["shard"] = readers.queue(True).get() if ahead else next_shard(i)
            rows = state["shard"][(i % 10) * batch:(i % 10 + 1) * batch]
            state["params"], value = train_step(state["params"], rows, y)
            value.block_until_ready()

        return iteration

    def stop() -> None:
        readers.stop()
        shutil.rmtree(folder, ignore_errors=True)

    return Workload(loop(False), ablations={"read_ahead": loop(True)}, stop=stop)


def outer_product_then_sum(big: bool) -> Workload:
    """A bilinear layer in bf16 on the chip (batch 256, 256 x 256 features, 64 outputs), written with broadcasting:
    ``(x[:, :, None] * z[:, None, :])`` materialises each example's 256 x 256 outer product, multiplied by the
    weights and summed. Trained, data resident. Ablation: the same layer as ``jnp.einsum("bi,bj,ijo->bo")``."""
    import jax
    import jax.numpy as jnp

    batch, width, outputs = (256, 256, 64) if big else (64, 64, 16)
    keys = jax.random.split(jax.random.key(400), 3)
    x = jax.random.normal(keys[0], (batch, width)).astype("bfloat16")
    z = jax.random.normal(keys[1], (batch, width)).astype("bfloat16")
    params = [_normal(keys[2], (width * width, outputs), "bfloat16")]
    y = jnp.zeros((batch, outputs), "float32")

    def broadcast(w, x, z):
        return (x[:, :, None] * z[:, None, :]).reshape(batch, width * width) @ w

    def einsum(w, x, z):
        return jnp.einsum("bi,bj,ijo->bo", x, z, w.reshape(width, width, outputs))

    def make_step(bilinear):
        def loss(params, x, z, y):
            return jnp.mean((bilinear(params[0], x, z).astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(broadcast), x, z, y),
                    ablations={"einsum": _training(state, make_step(einsum), x, z, y)})


def sequence_classifier_dynamic_position(big: bool) -> Workload:
    """A sequence classifier's train step in bf16 (batch 32 x 512 positions, two MLP blocks of 768, 16 classes on
    the chip) that pools the hidden state at a position passed in as an array (the same for the batch), trained,
    data resident: one position read by a dynamic slice, its gradient written back into zeros. Ablation: the pooled
    position fixed at 0 (a static slice)."""
    import jax
    import jax.numpy as jnp

    batch, length, width, classes = (32, 512, 768, 16) if big else (8, 128, 128, 4)
    keys = jax.random.split(jax.random.key(500), 6)
    params = {"blocks": [_normal(k, shape, "bfloat16") for k, shape in zip(
                  keys[:4], [(width, 4 * width), (4 * width, width)] * 2)],
              "head": _normal(keys[4], (width, classes), "bfloat16")}
    x = jax.random.normal(keys[5], (batch, length, width)).astype("bfloat16")
    labels = jnp.arange(batch) % classes

    def make_step(dynamic: bool):
        def loss(params, x, labels, t):
            h = x
            for up, down in zip(params["blocks"][::2], params["blocks"][1::2]):
                h = h + jax.nn.gelu(h @ up) @ down
            pooled = jax.lax.dynamic_index_in_dim(h, t, axis=1, keepdims=False) if dynamic else h[:, 0]
            logits = (pooled @ params["head"]).astype("float32")
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))

        return sgd(loss)

    state, position = {"params": params}, jnp.int32(length - 1)
    return Workload(_training(state, make_step(True), x, labels, position),
                    ablations={"static_position": _training(state, make_step(False), x, labels, position)})


def video_conv3d_bf16(big: bool) -> Workload:
    """A 3-D conv net on video clips in bf16 (batch 8, 16 frames of 112 x 112 RGB on the chip; three 3 x 3 x 3
    convolutions of 64, 128 and 256 channels, strided, then a linear head), trained, data resident. Ablation: the
    clips' 3 channels zero-padded to 8, the stem's weights with them."""
    import jax
    import jax.numpy as jnp

    batch, frames, side, widths = (8, 16, 112, (64, 128, 256)) if big else (2, 8, 32, (16, 32, 64))
    keys = jax.random.split(jax.random.key(350), 5)
    clips = jax.random.normal(keys[0], (batch, frames, side, side, 3)).astype("bfloat16")
    y = jnp.zeros((batch, 16), "float32")

    def make(channels: int):
        stem = jnp.pad(_normal(keys[1], (3, 3, 3, 3, widths[0]), "bfloat16"),
                       ((0, 0),) * 3 + ((0, channels - 3), (0, 0)))
        params = [stem, _normal(keys[2], (3, 3, 3, widths[0], widths[1]), "bfloat16"),
                  _normal(keys[3], (3, 3, 3, widths[1], widths[2]), "bfloat16"),
                  _normal(keys[4], (widths[2], 16), "bfloat16")]
        inputs = jnp.pad(clips, ((0, 0),) * 4 + ((0, channels - 3),))

        def loss(params, clips, y):
            h = clips
            for kernel, strides in zip(params[:3], [(1, 2, 2), (2, 2, 2), (2, 2, 2)]):
                h = jax.nn.relu(jax.lax.conv_general_dilated(h, kernel, strides, "SAME",
                                                             dimension_numbers=("NDHWC", "DHWIO", "NDHWC")))
            return jnp.mean(((h.mean(axis=(1, 2, 3)) @ params[3]).astype("float32") - y) ** 2)

        return {"params": params}, sgd(loss), inputs

    state, step, inputs = make(3)
    padded_state, padded_step, padded_inputs = make(8)
    return Workload(_training(state, step, inputs, y),
                    ablations={"stem_padded_to_8": _training(padded_state, padded_step, padded_inputs, y)})



def lax_map_training_loss(big: bool) -> Workload:
    """A bf16 MLP (1024-4096-1024 on the chip, batch 256) trained with its loss computed one example at a time by
    ``jax.lax.map`` over the batch (a device loop of vector-matrix products), data resident. Ablation: the same
    per-example loss under ``jax.vmap``."""
    import jax
    import jax.numpy as jnp

    batch, width, hidden = (256, 1024, 4096) if big else (64, 128, 512)
    keys = jax.random.split(jax.random.key(600), 4)
    params = [_normal(keys[0], (width, hidden), "bfloat16"), _normal(keys[1], (hidden, width), "bfloat16")]
    x = jax.random.normal(keys[2], (batch, width)).astype("bfloat16")
    y = jax.random.normal(keys[3], (batch, width))

    def example_loss(params, x, y):
        return jnp.mean(((jax.nn.gelu(x @ params[0]) @ params[1]).astype("float32") - y) ** 2)

    def mapped(params, x, y):
        return jnp.mean(jax.lax.map(lambda xy: example_loss(params, *xy), (x, y)))

    def vmapped(params, x, y):
        return jnp.mean(jax.vmap(example_loss, in_axes=(None, 0, 0))(params, x, y))

    state = {"params": params}
    return Workload(_training(state, sgd(mapped), x, y), ablations={"vmap": _training(state, sgd(vmapped), x, y)})


def vmap_cond_both_branches(big: bool) -> Workload:
    """Two bf16 MLP experts (1024-4096-1024 on the chip, batch 2048), each example choosing its expert by
    ``lax.cond`` under ``vmap``: with a batched predicate both experts run on every example and a select keeps one.
    7 in 8 examples choose the first. Trained, data resident. Ablation: the examples grouped by expert (the counts
    are fixed), each expert run on its own group."""
    import jax
    import jax.numpy as jnp

    batch, width, hidden = (2048, 1024, 4096) if big else (256, 128, 512)
    first = batch * 7 // 8
    keys = jax.random.split(jax.random.key(610), 6)
    params = {"a": [_normal(keys[0], (width, hidden), "bfloat16"), _normal(keys[1], (hidden, width), "bfloat16")],
              "b": [_normal(keys[2], (width, hidden), "bfloat16"), _normal(keys[3], (hidden, width), "bfloat16")]}
    x = jax.random.normal(keys[4], (batch, width)).astype("bfloat16")
    y = jax.random.normal(keys[5], (batch, width))
    choice = jnp.arange(batch) >= first

    def expert(w, x):
        return jax.nn.gelu(x @ w[0]) @ w[1]

    def by_cond(params, x, y, choice):
        def one(x, pick):
            return jax.lax.cond(pick, lambda x: expert(params["b"], x), lambda x: expert(params["a"], x), x)

        out = jax.vmap(one)(x, choice)
        return jnp.mean((out.astype("float32") - y) ** 2)

    def grouped(params, x, y, choice):
        out = jnp.concatenate([expert(params["a"], x[:first]), expert(params["b"], x[first:])])
        return jnp.mean((out.astype("float32") - y) ** 2)

    state = {"params": params}
    return Workload(_training(state, sgd(by_cond), x, y, choice),
                    ablations={"grouped_by_expert": _training(state, sgd(grouped), x, y, choice)})


def linear_rnn_sequential_scan(big: bool) -> Workload:
    """A diagonal linear recurrence ``h_t = a * h_(t-1) + x_t @ w`` over 2048 positions (batch 8 x 1024 channels on
    the chip, f32 state), trained, data resident: the inputs projected by one bf16 matmul, then a ``lax.scan`` of one
    elementwise update per position (and its gradient's reverse scan). Ablation: the same recurrence by
    ``jax.lax.associative_scan``."""
    import jax
    import jax.numpy as jnp

    length, batch, width = (2048, 8, 1024) if big else (256, 4, 128)
    keys = jax.random.split(jax.random.key(620), 3)
    params = {"w": _normal(keys[0], (width, width), "bfloat16"), "a": jnp.full((width,), 2.0, "float32")}
    x = jax.random.normal(keys[1], (length, batch, width)).astype("bfloat16")
    y = jnp.zeros((length, batch, width), "float32")

    def inputs(params, x):
        return (x @ params["w"]).astype("float32"), jax.nn.sigmoid(params["a"])

    def sequential(params, x, y, unroll: int = 1):
        u, a = inputs(params, x)

        def cell(h, u_t):
            h = a * h + u_t
            return h, h

        _, states = jax.lax.scan(cell, jnp.zeros((batch, width), "float32"), u, unroll=unroll)
        return jnp.mean((states - y) ** 2)

    def associative(params, x, y):
        u, a = inputs(params, x)

        def combine(left, right):
            return left[0] * right[0], right[0] * left[1] + right[1]

        _, states = jax.lax.associative_scan(combine, (jnp.broadcast_to(a, u.shape), u))
        return jnp.mean((states - y) ** 2)

    state = {"params": params}
    return Workload(_training(state, sgd(sequential), x, y),
                    ablations={"associative_scan": _training(state, sgd(associative), x, y),
                               "unrolled_8": _training(state, sgd(functools.partial(sequential, unroll=8)), x, y)})


def frozen_backbone_masked_grads(big: bool) -> Workload:
    """Fine-tuning a classifier head on a frozen bf16 MLP backbone (three residual blocks 2048-8192-2048 on the chip,
    batch 1024): the step takes the gradient of every parameter and multiplies the backbone's by trainable masks of
    0.0 passed in beside them (the head's is 1.0). Data resident. Ablation: the backbone under ``stop_gradient``."""
    import jax
    import jax.numpy as jnp

    batch, width, hidden, classes = (1024, 2048, 8192, 128) if big else (128, 256, 1024, 16)
    keys = jax.random.split(jax.random.key(630), 8)
    params = {"backbone": [(_normal(keys[2 * i], (width, hidden), "bfloat16"),
                            _normal(keys[2 * i + 1], (hidden, width), "bfloat16")) for i in range(3)],
              "head": _normal(keys[6], (width, classes), "bfloat16")}
    masks = jax.tree.map(lambda p: jnp.zeros((), "float32"), params)
    masks["head"] = jnp.ones((), "float32")
    x = jax.random.normal(keys[7], (batch, width)).astype("bfloat16")
    labels = jnp.arange(batch) % classes

    def loss(params, x, labels, frozen: bool):
        backbone = jax.lax.stop_gradient(params["backbone"]) if frozen else params["backbone"]
        h = x
        for up, down in backbone:
            h = h + jax.nn.gelu(h @ up) @ down
        logits = (h @ params["head"]).astype("float32")
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1))

    def make_step(frozen: bool):
        def step(params, masks, x, labels):
            value, grads = jax.value_and_grad(loss)(params, x, labels, frozen)
            return jax.tree.map(lambda p, g, m: (p - 1e-3 * g * m).astype(p.dtype), params, grads, masks), value

        return jax.jit(step, donate_argnums=0)

    state = {"params": params}
    return Workload(_training(state, make_step(False), masks, x, labels),
                    ablations={"stop_gradient": _training(state, make_step(True), masks, x, labels)})


def tril_matmul_prefix_sum(big: bool) -> Workload:
    """Running means over 8192 positions (batch 8 x 256 channels on the chip, bf16) computed as a lower-triangular
    matrix of ones times the sequence, an n x n x channels product, in each of four layers, trained with data
    resident. Ablation: the running sums by ``jnp.cumsum``."""
    import jax
    import jax.numpy as jnp

    length, batch, width = (8192, 8, 256) if big else (1024, 4, 64)
    keys = jax.random.split(jax.random.key(640), 5)
    params = [_normal(k, (width, width), "bfloat16") for k in keys[:4]]
    x = jax.random.normal(keys[4], (batch, length, width)).astype("bfloat16")
    y = jnp.zeros((batch, length, width), "float32")
    counts = jnp.arange(1, length + 1, dtype="float32")[:, None]

    def by_triangle(h):
        return (jnp.tril(jnp.ones((length, length), h.dtype)) @ h / counts).astype(h.dtype)

    def by_cumsum(h):
        return (jnp.cumsum(h.astype("float32"), axis=1) / counts).astype(h.dtype)

    def by_chunks(h):
        chunk = 256 if big else 64
        blocks = h.reshape(batch, length // chunk, chunk, width)
        within = jnp.einsum("ij,bkjc->bkic", jnp.tril(jnp.ones((chunk, chunk), h.dtype)), blocks).astype("float32")
        totals = within[:, :, -1, :]
        before = jnp.cumsum(totals, axis=1) - totals
        return ((within + before[:, :, None, :]).reshape(batch, length, width) / counts).astype(h.dtype)

    def make_step(running_mean):
        def loss(params, x, y):
            h = x
            for w in params:
                h = h + running_mean(jax.nn.gelu(h @ w))
            return jnp.mean((h.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_triangle), x, y),
                    ablations={"cumsum": _training(state, make_step(by_cumsum), x, y),
                               "chunked": _training(state, make_step(by_chunks), x, y)})


def pairwise_distances_broadcast(big: bool) -> Workload:
    """A metric-learning loss over all pairs of 2048 projected queries and 2048 keys (128 features, bf16 on the
    chip), the squared distances written with broadcasting, ``((q[:, None, :] - k[None, :, :]) ** 2).sum(-1)``,
    trained, data resident. Ablation: the same distances as ``|q|^2 + |k|^2 - 2 q @ k.T``."""
    import jax
    import jax.numpy as jnp

    count, features = (2048, 128) if big else (512, 32)
    keys = jax.random.split(jax.random.key(700), 3)
    params = [_normal(keys[0], (features, features), "bfloat16")]
    queries = jax.random.normal(keys[1], (count, features)).astype("bfloat16")
    targets = jax.random.normal(keys[2], (count, features)).astype("bfloat16")

    def broadcast(q, k):
        return ((q[:, None, :].astype("float32") - k[None, :, :].astype("float32")) ** 2).sum(-1)

    def expanded(q, k):
        q, k = q.astype("float32"), k.astype("float32")
        return (q ** 2).sum(-1)[:, None] + (k ** 2).sum(-1)[None, :] - 2 * q @ k.T

    def make_step(distances):
        def loss(params, queries, targets):
            d = distances(queries @ params[0], targets)
            return -jnp.mean(jnp.diagonal(jax.nn.log_softmax(-d / features, axis=1)))

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(broadcast), queries, targets),
                    ablations={"expanded": _training(state, make_step(expanded), queries, targets)})


def segment_mean_one_hot(big: bool) -> Workload:
    """Per-segment means of 65,536 projected rows over 2,048 segments (256 features, bf16 on the chip) computed as
    ``one_hot(ids, 2048).T @ h / counts``, trained, data resident. Ablation: ``jax.ops.segment_sum``."""
    import jax
    import jax.numpy as jnp

    rows, segments, features = (65536, 2048, 256) if big else (8192, 256, 64)
    keys = jax.random.split(jax.random.key(710), 4)
    params = [_normal(keys[0], (features, features), "bfloat16")]
    x = jax.random.normal(keys[1], (rows, features)).astype("bfloat16")
    ids = jax.random.randint(keys[2], (rows,), 0, segments)
    y = jax.random.normal(keys[3], (segments, features))
    counts = jnp.maximum(jnp.bincount(ids, length=segments), 1).astype("float32")[:, None]

    def by_one_hot(h, ids):
        return (jax.nn.one_hot(ids, segments, dtype=h.dtype).T @ h).astype("float32") / counts

    def by_segment_sum(h, ids):
        return jax.ops.segment_sum(h.astype("float32"), ids, num_segments=segments) / counts

    def make_step(means):
        def loss(params, x, ids, y):
            return jnp.mean((means(jax.nn.gelu(x @ params[0]), ids) - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_one_hot), x, ids, y),
                    ablations={"segment_sum": _training(state, make_step(by_segment_sum), x, ids, y)})


def per_example_clipped_grads(big: bool) -> Workload:
    """DP-SGD on a bf16 MLP (1024-4096-1024 on the chip, batch 256): each example's gradient by ``jax.vmap(jax.grad)``
    with the weights unbatched, clipped to norm 1, averaged and applied; data resident. Ablation: the batch's mean
    gradient without per-example clipping (a different method: what the privacy costs)."""
    import jax
    import jax.numpy as jnp

    batch, width, hidden = (256, 1024, 4096) if big else (64, 128, 512)
    keys = jax.random.split(jax.random.key(720), 4)
    params = [_normal(keys[0], (width, hidden), "bfloat16"), _normal(keys[1], (hidden, width), "bfloat16")]
    x = jax.random.normal(keys[2], (batch, width)).astype("bfloat16")
    y = jax.random.normal(keys[3], (batch, width))

    def example_loss(params, x, y):
        return jnp.mean(((jax.nn.gelu(x @ params[0]) @ params[1]).astype("float32") - y) ** 2)

    @functools.partial(jax.jit, donate_argnums=0)
    def private_step(params, x, y):
        grads = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(params, x, y)
        norms = jnp.sqrt(sum(jnp.sum(g.astype("float32") ** 2, axis=tuple(range(1, g.ndim))) for g in grads))
        scale = jnp.minimum(1.0, 1.0 / (norms + 1e-6))
        mean = [jnp.mean(g * scale.reshape((-1,) + (1,) * (g.ndim - 1)).astype(g.dtype), axis=0) for g in grads]
        return [(p - 1e-3 * g).astype(p.dtype) for p, g in zip(params, mean)], jnp.mean(norms)

    def plain(params, x, y):
        return jnp.mean(jax.vmap(example_loss, in_axes=(None, 0, 0))(params, x, y))

    state = {"params": params}
    return Workload(_training(state, private_step, x, y), ablations={"batch_gradient": _training(state, sgd(plain),
                                                                                                  x, y)})


def switch_experts_vmap(big: bool) -> Workload:
    """Four bf16 MLP experts (1024-2048-1024 on the chip, batch 2048), each example choosing one by ``lax.switch``
    under ``vmap``, a quarter of the batch each. Trained, data resident. Ablation: the examples grouped by expert
    (the counts are fixed), each expert run on its own group."""
    import jax
    import jax.numpy as jnp

    batch, width, hidden, experts = (2048, 1024, 2048, 4) if big else (256, 128, 256, 4)
    keys = jax.random.split(jax.random.key(730), 2 * experts + 2)
    params = [[_normal(keys[2 * e], (width, hidden), "bfloat16"), _normal(keys[2 * e + 1], (hidden, width), "bfloat16")]
              for e in range(experts)]
    x = jax.random.normal(keys[-2], (batch, width)).astype("bfloat16")
    y = jax.random.normal(keys[-1], (batch, width))
    choice = jnp.arange(batch) * experts // batch
    group = batch // experts

    def expert(w, x):
        return jax.nn.gelu(x @ w[0]) @ w[1]

    def by_switch(params, x, y, choice):
        def one(x, pick):
            return jax.lax.switch(pick, [functools.partial(expert, w) for w in params], x)

        return jnp.mean((jax.vmap(one)(x, choice).astype("float32") - y) ** 2)

    def grouped(params, x, y, choice):
        out = jnp.concatenate([expert(w, x[e * group:(e + 1) * group]) for e, w in enumerate(params)])
        return jnp.mean((out.astype("float32") - y) ** 2)

    state = {"params": params}
    return Workload(_training(state, sgd(by_switch), x, y, choice),
                    ablations={"grouped_by_expert": _training(state, sgd(grouped), x, y, choice)})


def kron_materialised_weights(big: bool) -> Workload:
    """A Kronecker-factored bf16 layer (two 64 x 64 factors, a 4096-wide layer on the chip, batch 2048) applied as
    ``x @ jnp.kron(a, b)``: the 4096 x 4096 product made every step and multiplied, trained, data resident.
    Ablation: the factors applied one after the other to x reshaped to [batch, 64, 64]."""
    import jax
    import jax.numpy as jnp

    batch, factor = (2048, 64) if big else (256, 16)
    keys = jax.random.split(jax.random.key(800), 4)
    params = [_normal(keys[0], (factor, factor), "bfloat16"), _normal(keys[1], (factor, factor), "bfloat16")]
    x = jax.random.normal(keys[2], (batch, factor * factor)).astype("bfloat16")
    y = jax.random.normal(keys[3], (batch, factor * factor))

    def materialised(params, x):
        return x @ jnp.kron(params[0], params[1])

    def factored(params, x):
        return jnp.einsum("nij,ik,jl->nkl", x.reshape(batch, factor, factor), params[0],
                          params[1]).reshape(batch, factor * factor)

    def make_step(layer):
        def loss(params, x, y):
            h = x
            for _ in range(4):
                h = jax.nn.gelu(layer(params, h))
            return jnp.mean((h.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(materialised), x, y),
                    ablations={"factored": _training(state, make_step(factored), x, y)})


def diag_of_full_product(big: bool) -> Workload:
    """A per-example score ``jnp.diagonal(q @ k.T)`` over a batch of 8192 pairs of 512 features (bf16 on the chip):
    the 8192 x 8192 product made to keep its diagonal, trained, data resident. Ablation: ``(q * k).sum(-1)``."""
    import jax
    import jax.numpy as jnp

    batch, features = (8192, 512) if big else (1024, 64)
    keys = jax.random.split(jax.random.key(810), 4)
    params = [_normal(keys[0], (features, features), "bfloat16")]
    q = jax.random.normal(keys[1], (batch, features)).astype("bfloat16")
    k = jax.random.normal(keys[2], (batch, features)).astype("bfloat16")
    y = jax.random.normal(keys[3], (batch,))

    def make_step(score):
        def loss(params, q, k, y):
            return jnp.mean((score(q @ params[0], k).astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(lambda a, b: jnp.diagonal(a @ b.T)), q, k, y),
                    ablations={"rowwise": _training(state, make_step(lambda a, b: (a * b).sum(-1)), q, k, y)})


def heads_in_a_python_loop(big: bool) -> Workload:
    """Attention scores and mixing per head in a Python loop inside the jitted step (16 heads of 64, 1024 tokens,
    batch 8, bf16 on the chip): 32 separate matmuls and softmaxes a layer, two layers, trained, data resident.
    Ablation: the same attention batched over the heads by einsum."""
    import jax
    import jax.numpy as jnp

    batch, tokens, heads, width = (8, 1024, 16, 64) if big else (2, 128, 4, 16)
    model = heads * width
    keys = jax.random.split(jax.random.key(820), 4)
    params = [_normal(k, (model, 3 * model), "bfloat16") for k in keys[:2]]
    x = jax.random.normal(keys[2], (batch, tokens, model)).astype("bfloat16")
    y = jax.random.normal(keys[3], (batch, tokens, model))

    def looped(q, k, v):
        outs = []
        for h in range(heads):
            scores = q[:, :, h] @ jnp.swapaxes(k[:, :, h], 1, 2) / jnp.sqrt(width).astype(q.dtype)
            outs.append(jax.nn.softmax(scores, axis=-1) @ v[:, :, h])
        return jnp.stack(outs, axis=2)

    def batched(q, k, v):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(width).astype(q.dtype)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)

    def make_step(attention):
        def loss(params, x, y):
            h = x
            for w in params:
                q, k, v = jnp.split((h @ w).reshape(batch, tokens, 3 * heads, width), 3, axis=2)
                h = h + attention(q, k, v).reshape(batch, tokens, model)
            return jnp.mean((h.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(looped), x, y),
                    ablations={"batched_heads": _training(state, make_step(batched), x, y)})


def _local_attention(big: bool, sizes: tuple[int, int, int, int, int], seed: int, apply_band) -> Workload:
    """Two trained layers of local attention (each query sees the ``window`` tokens up to it; ``sizes`` are batch,
    tokens, heads, width and window) computed as full attention, the band applied to the scores by
    ``apply_band(scores, band)``, data resident. Ablation: blocks of ``window`` queries against their block's and the
    previous block's keys."""
    import jax
    import jax.numpy as jnp

    batch, tokens, heads, width, window = sizes
    model, blocks = heads * width, tokens // window
    keys = jax.random.split(jax.random.key(seed), 4)
    params = [_normal(k, (model, 3 * model), "bfloat16") for k in keys[:2]]
    x = jax.random.normal(keys[2], (batch, tokens, model)).astype("bfloat16")
    y = jax.random.normal(keys[3], (batch, tokens, model))
    scale = 1.0 / float(width) ** 0.5

    def dense(q, k, v):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
        i, j = jnp.arange(tokens)[:, None], jnp.arange(tokens)[None, :]
        scores = apply_band(scores, (j <= i) & (j > i - window))
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)

    def blocked(q, k, v):
        def with_previous(a):
            a = a.reshape(batch, blocks, window, heads, width)
            return jnp.concatenate([jnp.concatenate([jnp.zeros_like(a[:, :1]), a[:, :-1]], axis=1), a], axis=2)

        scores = jnp.einsum("bnqhd,bnkhd->bnhqk", q.reshape(batch, blocks, window, heads, width),
                            with_previous(k)) * scale
        i, j = jnp.arange(window)[:, None] + window, jnp.arange(2 * window)[None, :]
        scores = jnp.where((j <= i) & (j > i - window), scores, jnp.asarray(-1e9, scores.dtype))
        out = jnp.einsum("bnhqk,bnkhd->bnqhd", jax.nn.softmax(scores, axis=-1), with_previous(v))
        return out.reshape(batch, tokens, heads, width)

    def make_step(attention):
        def loss(params, x, y):
            h = x
            for w in params:
                q, k, v = jnp.split((h @ w).reshape(batch, tokens, 3 * heads, width), 3, axis=2)
                h = h + attention(q, k, v).reshape(batch, tokens, model)
            return jnp.mean((h.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(dense), x, y),
                    ablations={"blocked": _training(state, make_step(blocked), x, y)})


def sliding_window_attention_dense(big: bool) -> Workload:
    """Sliding-window attention (a 512-token window over 8192 tokens, 8 heads of 128, bf16 on the chip) computed as
    full attention with a band mask (``jnp.where(band, scores, -1e9)``), two layers, trained, data resident.
    Ablation: the same windows by blocks of 512 queries against their block's and the previous block's keys."""
    import jax.numpy as jnp

    return _local_attention(big, (1, 8192, 8, 128, 512) if big else (1, 1024, 2, 32, 64), 900,
                            lambda scores, band: jnp.where(band, scores, jnp.asarray(-1e9, scores.dtype)))


def jacobian_then_product(big: bool) -> Workload:
    """Each example's vector-Jacobian product v^T J of a small network (1024 -> 2048 -> 1024, tanh, bf16 on the chip;
    batch 64) computed as the full Jacobian (``vmap(jax.jacrev)``) and then multiplied by v, inside a trained loss,
    data resident. Ablation: the same product by ``jax.vjp``."""
    import jax
    import jax.numpy as jnp

    batch, width, hidden = (64, 1024, 2048) if big else (16, 128, 256)
    keys = jax.random.split(jax.random.key(930), 5)
    params = [_normal(keys[0], (width, hidden), "bfloat16"), _normal(keys[1], (hidden, width), "bfloat16")]
    x = jax.random.normal(keys[2], (batch, width)).astype("bfloat16")
    v = jax.random.normal(keys[3], (batch, width)).astype("bfloat16")
    y = jax.random.normal(keys[4], (batch, width))

    def net(params, x):
        return jnp.tanh(x @ params[0]) @ params[1]

    def by_jacobian(params, x, v):
        jacobians = jax.vmap(jax.jacrev(lambda row: net(params, row)))(x)
        return jnp.einsum("bo,boi->bi", v, jacobians)

    def by_vjp(params, x, v):
        _, pull = jax.vjp(lambda rows: net(params, rows), x)
        return pull(v)[0]

    def make_step(product):
        def loss(params, x, v, y):
            return jnp.mean((product(params, x, v).astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_jacobian), x, v, y),
                    ablations={"vjp": _training(state, make_step(by_vjp), x, v, y)})


def inverse_then_matmul(big: bool) -> Workload:
    """A loss that solves a 2048 x 2048 f32 system each step, ``jnp.linalg.inv(A) @ b`` with 16 right-hand sides,
    where A = M + diag(exp(d)) changes with the trained vector d, data resident.
    Ablation: ``jnp.linalg.solve(A, b)``."""
    import jax
    import jax.numpy as jnp

    n, sides = (2048, 16) if big else (256, 8)
    keys = jax.random.split(jax.random.key(940), 3)
    params = [jnp.zeros((n,), "float32")]
    m = jax.random.normal(keys[0], (n, n)) / jnp.sqrt(n) + 2.0 * jnp.eye(n)
    b = jax.random.normal(keys[1], (n, sides))
    y = jax.random.normal(keys[2], (n, sides))

    def make_step(solve):
        def loss(params, m, b, y):
            a = m + jnp.diag(jnp.exp(params[0]))
            return jnp.mean((solve(a, b) - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(lambda a, b: jnp.linalg.inv(a) @ b), m, b, y),
                    ablations={"solve": _training(state, make_step(jnp.linalg.solve), m, b, y)})


def ensemble_members_in_a_python_loop(big: bool) -> Workload:
    """An ensemble of 16 small MLPs (256 -> 512 -> 256, bf16 on the chip, batch 128), each trained by its own call of
    one jitted step in a Python loop every iteration (16 small programs an iteration), data resident. Ablation: the
    members stacked and trained by one vmapped step."""
    import jax
    import jax.numpy as jnp

    members, width, hidden, batch = (16, 256, 512, 128) if big else (8, 64, 128, 32)
    keys = jax.random.split(jax.random.key(950), 2 * members + 2)
    ensemble = [[_normal(keys[2 * m], (width, hidden), "bfloat16"), _normal(keys[2 * m + 1], (hidden, width),
                                                                            "bfloat16")] for m in range(members)]
    x = jax.random.normal(keys[-2], (batch, width)).astype("bfloat16")
    y = jax.random.normal(keys[-1], (batch, width))

    def loss(params, x, y):
        return jnp.mean(((jnp.tanh(x @ params[0]) @ params[1]).astype("float32") - y) ** 2)

    def update(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: (p - 1e-3 * g).astype(p.dtype), params, grads), value

    one = jax.jit(update, donate_argnums=0)
    every = jax.jit(jax.vmap(update, in_axes=(0, None, None)), donate_argnums=0)
    state = {"members": ensemble, "stacked": jax.tree.map(lambda *a: jnp.stack(a), *ensemble)}

    def iteration(i: int, clock: Clock) -> None:
        values = []
        for m in range(members):
            state["members"][m], value = one(state["members"][m], x, y)
            values.append(value)
        jax.block_until_ready(values)

    def vmapped(i: int, clock: Clock) -> None:
        state["stacked"], values = every(state["stacked"], x, y)
        values.block_until_ready()

    return Workload(iteration, ablations={"vmapped_members": vmapped})


def upsample_by_selection_matmul(big: bool) -> Workload:
    """A decoder block's nearest-neighbour 2x upsampling of feature maps (batch 8, 256 x 256, 64 channels, bf16 on the
    chip) written as two einsums by a 0/1 selection matrix made from iotas (``j // 2 == i``), then a 1x1 convolution,
    trained, data resident. Ablation: ``jnp.repeat`` along both axes."""
    import jax
    import jax.numpy as jnp

    batch, side, channels = (8, 256, 64) if big else (2, 64, 16)
    keys = jax.random.split(jax.random.key(960), 3)
    params = [_normal(keys[0], (channels, channels), "bfloat16")]
    x = jax.random.normal(keys[1], (batch, side, side, channels)).astype("bfloat16")
    y = jax.random.normal(keys[2], (batch, 2 * side, 2 * side, channels))

    def by_selection(h):
        select = (jnp.arange(2 * side)[None, :] // 2 == jnp.arange(side)[:, None]).astype(h.dtype)
        h = jnp.einsum("bhwc,hH->bHwc", h, select)
        return jnp.einsum("bhwc,wW->bhWc", h, select)

    def by_repeat(h):
        return jnp.repeat(jnp.repeat(h, 2, axis=1), 2, axis=2)

    def make_step(upsample):
        def loss(params, x, y):
            h = upsample(x @ params[0])
            return jnp.mean(((h @ params[0]).astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_selection), x, y),
                    ablations={"repeat": _training(state, make_step(by_repeat), x, y)})


def full_hessian_newton_step(big: bool) -> Workload:
    """A Newton step on a logistic regression's 2048 weights (8192 examples, f32): each step the full Hessian by
    ``jax.hessian`` (2048 x 2048), then 8 conjugate-gradient iterations by products with it, data resident.
    Ablation: the same 8 iterations by Hessian-vector products (``jax.jvp`` of ``jax.grad``), no Hessian made."""
    import jax
    import jax.numpy as jnp

    examples, features, iterations = (8192, 2048, 8) if big else (1024, 256, 8)
    keys = jax.random.split(jax.random.key(970), 3)
    x = jax.random.normal(keys[0], (examples, features)) / jnp.sqrt(features)
    y = (jax.random.uniform(keys[1], (examples,)) > 0.5).astype("float32")
    w = jnp.zeros((features,), "float32")

    def loss(w):
        logits = x @ w
        return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits) + 1e-3 * jnp.sum(w * w)

    def conjugate_gradient(product, g):
        def body(_, state):
            u, r, p = state
            hp = product(p)
            alpha = (r @ r) / (p @ hp)
            u, r_new = u + alpha * p, r - alpha * hp
            return u, r_new, r_new + (r_new @ r_new) / (r @ r) * p

        u, _, _ = jax.lax.fori_loop(0, iterations, body, (jnp.zeros_like(g), g, g))
        return u

    @functools.partial(jax.jit, donate_argnums=0)
    def by_hessian(w):
        h = jax.hessian(loss)(w)
        return w - conjugate_gradient(lambda p: h @ p, jax.grad(loss)(w))

    @functools.partial(jax.jit, donate_argnums=0)
    def by_products(w):
        return w - conjugate_gradient(lambda p: jax.jvp(jax.grad(loss), (w,), (p,))[1], jax.grad(loss)(w))

    state = {"w": w}

    def stepping(step):
        def iteration(i: int, clock: Clock) -> None:
            state["w"] = step(state["w"])
            state["w"].block_until_ready()

        return iteration

    return Workload(stepping(by_hessian), ablations={"hessian_vector_products": stepping(by_products)})


def auxiliary_loss_weighted_zero(big: bool) -> Workload:
    """A bf16 MLP regressor (1024 -> 4096 -> 1024, batch 4096) trained with an auxiliary head as large as the trunk
    (1024 -> 4096 -> 1024) whose loss weight is a constant 0.0 left in the config: the head's forward and backward
    computed every step and multiplied by zero. Ablation: the auxiliary head left out of the loss."""
    import jax
    import jax.numpy as jnp

    batch, width, hidden = (4096, 1024, 4096) if big else (256, 128, 512)
    keys = jax.random.split(jax.random.key(980), 6)
    params = {"trunk": [_normal(keys[0], (width, hidden), "bfloat16"), _normal(keys[1], (hidden, width), "bfloat16")],
              "aux": [_normal(keys[2], (width, hidden), "bfloat16"), _normal(keys[3], (hidden, width), "bfloat16")]}
    x = jax.random.normal(keys[4], (batch, width)).astype("bfloat16")
    y = jax.random.normal(keys[5], (batch, width))
    aux_weight = 0.0

    def mlp(layers, h):
        return jax.nn.relu(h @ layers[0]) @ layers[1]

    def make_step(with_aux):
        def loss(params, x, y):
            h = mlp(params["trunk"], x)
            main = jnp.mean((h.astype("float32") - y) ** 2)
            if not with_aux:
                return main
            reconstruction = mlp(params["aux"], h)
            return main + aux_weight * jnp.mean((reconstruction.astype("float32") - x.astype("float32")) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(True), x, y),
                    ablations={"no_aux_head": _training(state, make_step(False), x, y)})


def grouped_conv_by_python_loop(big: bool) -> Workload:
    """A ResNeXt-style grouped 3x3 convolution (32 groups of 8 channels, 256 channels, 28 x 28, batch 32, bf16 on the
    chip) written as a Python loop of 32 convolutions over channel slices, concatenated, 4 layers, trained, data
    resident. Ablation: one convolution per layer with ``feature_group_count=32``."""
    import jax
    import jax.numpy as jnp

    batch, side, channels, groups, layers = (32, 28, 256, 32, 4) if big else (4, 14, 64, 8, 2)
    width = channels // groups
    keys = jax.random.split(jax.random.key(990), layers + 2)
    params = [_normal(k, (3, 3, width, channels), "bfloat16") for k in keys[:layers]]
    x = jax.random.normal(keys[-2], (batch, side, side, channels)).astype("bfloat16")
    y = jax.random.normal(keys[-1], (batch, side, side, channels))
    numbers = ("NHWC", "HWIO", "NHWC")

    def looped(h, kernel):
        return jnp.concatenate([jax.lax.conv_general_dilated(
            h[..., g * width:(g + 1) * width], kernel[..., g * width:(g + 1) * width], (1, 1), "SAME",
            dimension_numbers=numbers) for g in range(groups)], axis=-1)

    def grouped(h, kernel):
        return jax.lax.conv_general_dilated(h, kernel, (1, 1), "SAME", dimension_numbers=numbers,
                                            feature_group_count=groups)

    def make_step(conv):
        def loss(params, x, y):
            h = x
            for kernel in params:
                h = jax.nn.relu(conv(h, kernel)) + h
            return jnp.mean((h.astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(looped), x, y),
                    ablations={"feature_groups": _training(state, make_step(grouped), x, y)})


def per_timestep_projection_loop(big: bool) -> Workload:
    """A projection applied to each of 128 time steps by a Python loop inside the jitted step (``x[:, t] @ w``,
    stacked), batch 64, 1024 wide, bf16 on the chip, trained, data resident. Ablation: one matmul over every time
    step."""
    import jax
    import jax.numpy as jnp

    batch, steps, width = (64, 128, 1024) if big else (8, 32, 128)
    keys = jax.random.split(jax.random.key(1000), 3)
    params = [_normal(keys[0], (width, width), "bfloat16")]
    x = jax.random.normal(keys[1], (batch, steps, width)).astype("bfloat16")
    y = jax.random.normal(keys[2], (batch, steps, width))

    def make_step(project):
        def loss(params, x, y):
            return jnp.mean((project(x, params[0]).astype("float32") - y) ** 2)

        return sgd(loss)

    def looped(x, w):
        return jnp.stack([jnp.tanh(x[:, t] @ w) for t in range(steps)], axis=1)

    state = {"params": params}
    return Workload(_training(state, make_step(looped), x, y),
                    ablations={"one_matmul": _training(state, make_step(lambda x, w: jnp.tanh(x @ w)), x, y)})


def toeplitz_conv1d_matmul(big: bool) -> Workload:
    """A causal 1-D convolution (one 64-tap filter applied to each of 256 channels over 4096 steps, batch 16, bf16 on
    the chip) written as a matmul by a Toeplitz matrix made from the filter: ``t[i, j] = w[i - j]`` where
    ``0 <= i - j < 64``, else 0, a 4096 x 4096 matrix, trained, data resident. Ablation: the same convolution by
    ``jax.lax.conv_general_dilated``, one group per channel."""
    import jax
    import jax.numpy as jnp

    batch, steps, channels, taps = (16, 4096, 256, 64) if big else (2, 512, 16, 16)
    keys = jax.random.split(jax.random.key(1010), 3)
    params = [(jax.random.normal(keys[0], (taps,)) / taps).astype("bfloat16")]
    x = jax.random.normal(keys[1], (batch, steps, channels)).astype("bfloat16")
    y = jax.random.normal(keys[2], (batch, steps, channels))

    def by_toeplitz(x, w):
        lag = jnp.arange(steps)[:, None] - jnp.arange(steps)[None, :]
        toeplitz = jnp.where((lag >= 0) & (lag < taps), w[jnp.clip(lag, 0, taps - 1)], jnp.zeros((), w.dtype))
        return jnp.einsum("ij,bjc->bic", toeplitz, x)

    def by_convolution(x, w):
        kernel = jnp.broadcast_to(w[::-1][:, None, None], (taps, 1, channels))  # HIO, one input channel a group
        padded = jnp.pad(x, ((0, 0), (taps - 1, 0), (0, 0)))
        return jax.lax.conv_general_dilated(padded, kernel, (1,), "VALID", dimension_numbers=("NHC", "HIO", "NHC"),
                                            feature_group_count=channels)

    def make_step(conv):
        def loss(params, x, y):
            return jnp.mean((conv(x, params[0]).astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_toeplitz), x, y),
                    ablations={"convolution": _training(state, make_step(by_convolution), x, y)})


def softmax_then_argmax_decode(big: bool) -> Workload:
    """Greedy decoding of 32 tokens a call (batch 64, a 2048-wide bf16 model of 4 layers, vocabulary 32768) that
    picks each token as ``jnp.argmax(jax.nn.softmax(logits))`` over f32 logits, inside one jitted ``lax.scan``.
    Ablation: ``jnp.argmax(logits)``, the same token without the softmax."""
    import jax
    import jax.numpy as jnp

    batch, width, layers, vocab, tokens = (64, 2048, 4, 32768, 32) if big else (8, 128, 2, 2048, 16)
    keys = jax.random.split(jax.random.key(1020), layers + 3)
    params = {"layers": [_normal(k, (width, width), "bfloat16") for k in keys[:layers]],
              "embed": _normal(keys[-3], (vocab, width), "bfloat16"),
              "out": _normal(keys[-2], (width, vocab), "bfloat16")}
    first = jax.random.randint(keys[-1], (batch,), 0, vocab)

    def make_decode(pick):
        @jax.jit
        def decode(params, token):
            def step(token, _):
                h = params["embed"][token]
                for w in params["layers"]:
                    h = h + jnp.tanh(h @ w)
                token = pick((h @ params["out"]).astype("float32"))
                return token, token

            return jax.lax.scan(step, token, None, length=tokens)[1]

        def iteration(i: int, clock: Clock) -> None:
            decode(params, first).block_until_ready()

        return iteration

    return Workload(make_decode(lambda logits: jnp.argmax(jax.nn.softmax(logits, axis=-1), axis=-1)),
                    ablations={"argmax_of_logits": make_decode(lambda logits: jnp.argmax(logits, axis=-1))})


def polynomial_features_by_powers(big: bool) -> Workload:
    """Polynomial features of degree 16 computed as ``sum(c[k] * x ** k)`` over a [4096, 4096] f32 input each step,
    then a bf16 matmul layer, trained, data resident. Ablation: the same polynomial by Horner's rule."""
    import jax
    import jax.numpy as jnp

    rows, width, degree = (4096, 4096, 16) if big else (256, 256, 16)
    keys = jax.random.split(jax.random.key(1030), 4)
    params = [jax.random.normal(keys[0], (degree + 1,)) / degree, _normal(keys[1], (width, width), "bfloat16")]
    x = jax.random.uniform(keys[2], (rows, width), minval=-1.0, maxval=1.0)
    y = jax.random.normal(keys[3], (rows, width))

    def by_powers(c, x):
        return sum(c[k] * x ** k for k in range(degree + 1))

    def by_horner(c, x):
        value = jnp.full_like(x, c[degree])
        for k in range(degree - 1, -1, -1):
            value = value * x + c[k]
        return value

    def make_step(polynomial):
        def loss(params, x, y):
            features = polynomial(params[0], x).astype("bfloat16")
            return jnp.mean(((features @ params[1]).astype("float32") - y) ** 2)

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(by_powers), x, y),
                    ablations={"horner": _training(state, make_step(by_horner), x, y)})


def sliding_window_by_multiplied_mask(big: bool) -> Workload:
    """Local attention (a 256-token window over 4096 tokens, 8 heads of 128, bf16 on the chip) written as full
    attention whose band is applied by multiplying: ``scores * band + (1 - band) * -1e9`` with a float band made from
    positions, two layers, trained, data resident. Ablation: blocks of 256 queries against their block's and the
    previous block's keys."""
    import jax.numpy as jnp

    def multiplied(scores, band):
        band = band.astype(scores.dtype)
        return scores * band + (1 - band) * jnp.asarray(-1e9, scores.dtype)

    return _local_attention(big, (1, 4096, 8, 128, 256) if big else (1, 512, 2, 32, 32), 1040, multiplied)


def sinkhorn_transport_plan(big: bool) -> Workload:
    """Entropic optimal transport between two point clouds (4096 and 4096 points of 64 features, f32): the cost
    matrix by the norm expansion, then 50 Sinkhorn iterations in log space (``logsumexp`` over the 4096 x 4096
    matrix) in one jitted ``fori_loop`` per call, points resident. Ablation: the same iterations on a bf16 cost
    matrix."""
    import jax
    import jax.numpy as jnp

    n, m, features, iterations = (4096, 4096, 64, 50) if big else (256, 256, 16, 50)
    keys = jax.random.split(jax.random.key(1050), 2)
    a = jax.random.normal(keys[0], (n, features))
    b = jax.random.normal(keys[1], (m, features)) + 0.5

    def make_plan(dtype):
        @jax.jit
        def plan(a, b):
            cost = ((a * a).sum(-1)[:, None] + (b * b).sum(-1)[None, :] - 2 * a @ b.T).astype(dtype) / features

            def body(_, potentials):
                f, g = potentials
                f = -jax.nn.logsumexp((g[None, :] - cost).astype("float32"), axis=1)
                g = -jax.nn.logsumexp((f[:, None] - cost).astype("float32"), axis=0)
                return f, g

            return jax.lax.fori_loop(0, iterations, body, (jnp.zeros(n), jnp.zeros(m)))

        def iteration(i: int, clock: Clock) -> None:
            jax.block_until_ready(plan(a, b))

        return iteration

    return Workload(make_plan("float32"), ablations={"bf16_cost": make_plan("bfloat16")})


def distances_by_norm_expansion(big: bool) -> Workload:
    """A contrastive loss on squared distances between two batches of embeddings (8192 x 8192 pairs of 512 features,
    bf16 on the chip), computed the efficient way: ``|a|^2 + |b|^2 - 2 a @ b.T``, trained, data resident. Ablation:
    the same loss on a quarter of the pairs (the matmul's share)."""
    import jax
    import jax.numpy as jnp

    batch, features = (8192, 512) if big else (1024, 64)
    keys = jax.random.split(jax.random.key(1060), 3)
    params = [_normal(keys[0], (features, features), "bfloat16")]
    x = jax.random.normal(keys[1], (batch, features)).astype("bfloat16")
    z = jax.random.normal(keys[2], (batch, features)).astype("bfloat16")

    def make_step(rows):
        def loss(params, x, z):
            a, b = x[:rows] @ params[0], z[:rows]
            distances = ((a * a).sum(-1)[:, None] + (b * b).sum(-1)[None, :] - 2 * a @ b.T).astype("float32")
            positives = jnp.diagonal(distances)
            return jnp.mean(positives) + jnp.mean(jax.nn.relu(1.0 - distances))

        return sgd(loss)

    state = {"params": params}
    return Workload(_training(state, make_step(batch), x, z),
                    ablations={"quarter_of_the_pairs": _training(state, make_step(batch // 2), x, z)})

SHAPES: dict[str, Shape] = {
    "lm_train_bf16": Shape(lm_train_bf16, 10, "decoder-only transformer LM train step in bf16 (d 1024, 4 layers, "
                           "seq 512, batch 8, vocab 16384 on the chip), tokens resident, nothing else in the loop",
                           cause="none: healthy compute-bound training"),
    "f32_highest_matmul": Shape(f32_highest_matmul, 20, "chain of four 4096x4096 f32 matmuls at "
                                "precision=HIGHEST (tanh between), data resident",
                                cause="f32 matmuls at HIGHEST precision instead of the chip's bf16 fast path"),
    "decode_memory_bound": Shape(decode_memory_bound, 40, "token-by-token decode: batch 8 through 16 layers of "
                                 "bf16 4096x8192 weights (2 GiB), each step waiting on the last, no step markers",
                                 annotate=False, cause="none: healthy, memory-bound (HBM reads of the weights)"),
    "numpy_batch_in_step": Shape(numpy_batch_in_step, 15, "numpy batch-making (make_batch) inside each annotated "
                                 "step before a bf16 MLP train step; Python tracer on", python_tracer=True,
                                 cause="make_batch (numpy on the training thread)"),
    "sync_checkpoint": Shape(sync_checkpoint, 30, "f32 MLP train steps (4x 4096x4096) with a synchronous "
                             "checkpoint (device_get + np.savez) every 10th step, no step markers; Python tracer on",
                             annotate=False, python_tracer=True, cause="save_checkpoint (synchronous save)"),
    "sync_every_step": Shape(sync_every_step, 30, "numpy batch-making as long as the device's bf16 MLP step, which could "
                             "overlap it, but float(loss) syncs every step for logging (log_loss); Python tracer on",
                             python_tracer=True, cause="log_loss: a device sync every step",
                             one_cpu_compute_thread=True),
    "loader_thread": Shape(loader_thread, 20, "a 'loader' thread reads each batch (30 ms latency + np.fromfile) "
                           "into a queue; the annotated step waits on queue.get; Python tracer on",
                           python_tracer=True, cause="the loader thread's read_batch"),
    "host_roundtrip": Shape(host_roundtrip, 15, "a 256 MiB f32 array copied device -> host -> device every "
                            "annotated step before a small elementwise step", cause="host<->device transfers"),
    "warmup_compile": Shape(warmup_compile, 20, "bf16 MLP train step whose first call compiles inside the trace, "
                            "then steady steps; no step markers", annotate=False, warm=False,
                            cause="warm-up: one compilation in the first call, then healthy"),
    "recompile_every_step": Shape(recompile_every_step, 12, "bf16 MLP train step whose batch grows by 8 rows "
                                  "every annotated step, so every step compiles", cause="recompilation every step"),
    "train_eval_alternating": Shape(train_eval_alternating, 20, "each iteration a bf16 MLP train step then an "
                                    "eval step on a batch twice as large: two programs, no step markers",
                                    annotate=False, cause="none: two programs per iteration"),
    "grad_accumulation": Shape(grad_accumulation, 10, "four f32 micro-batch gradient programs accumulate into a "
                               "buffer, then an Adam apply program (4x 4096x4096 params); no step markers",
                               annotate=False, cause="none: five programs per iteration, apply the largest"),
    "op_by_op_eager": Shape(op_by_op_eager, 20, "45 small eager jnp calls on a 512x512 array per annotated step, "
                            "each its own program", cause="op-by-op dispatch (no jit)"),
    "conv_net_bf16": Shape(conv_net_bf16, 15, "NHWC conv net train step in bf16 (six 3x3 convolutions of 128 channels "
                           "over 32 64x64 images on the chip), images resident", cause="none: healthy compute-bound "
                           "convolutions"),
    "long_attention": Shape(long_attention, 10, "two transformer blocks trained in bf16 over a 4096-token sequence "
                            "(d 512, 8 heads, batch 2 on the chip), data resident",
                            cause="heads of 64 on a 128-wide matrix unit in the attention that takes most of the "
                            "step (a fused flash attention saves 0.04)"),
    "embedding_gather": Shape(embedding_gather, 20, "sparse embedding step: gathers 16384 bags of 16 rows from a "
                              "2^20 x 256 bf16 table, a small head, scatter-add of the rows' gradients into the "
                              "donated table; no step markers", annotate=False,
                              cause="none: healthy gather/scatter (memory-bound, almost no matmul)"),
    "host_callback": Shape(host_callback, 20, "bf16 MLP train step that calls jax.pure_callback (host_statistics: "
                           "numpy sort of 64 rows of the activations) mid-step, the rest of the step needing it",
                           cause="host_statistics: a host callback the device waits on every step"),
    "python_tokenizer": Shape(python_tokenizer, 15, "a Python generator tokenises 256 documents of 512 words for "
                              "each batch on the training thread (split, dict look-ups, padding) before a bf16 "
                              "embedding + MLP step (d 512); no step markers, no Python tracer", annotate=False,
                              cause="tokenize: Python host work on the training thread, untraced"),
    "recompile_every_nth": Shape(recompile_every_nth, 20, "bf16 MLP train step whose learning rate is a static jit "
                                 "argument decaying every 5th step: three recompilations in the traced loop",
                                 cause="recompilation on every 5th step (a static argument changes)"),
    "scan_layers": Shape(scan_layers, 10, "16-layer residual MLP (d 2048, hidden 8192, batch 4096 on the chip) as "
                         "one lax.scan over stacked bf16 weights, trained; data resident",
                         cause="none: healthy compute-bound training in a scanned loop"),
    "device_put_each_step": Shape(device_put_each_step, 15, "a producer thread that keeps up hands over a fresh "
                                  "256 MiB f32 host batch; each annotated step device_puts it before a short bf16 "
                                  "step", cause="host-to-device transfer of the batch every step"),
    "tiny_step_dispatch": Shape(tiny_step_dispatch, 20, "f32 train step of a 48-layer 128-wide MLP (batch 8) whose "
                                "parameters are 96 arrays, synced every annotated step: shorter on the device than "
                                "its launch", cause="per-step launch and sync overhead of a tiny program"),
    "prefetch_overlapped": Shape(prefetch_overlapped, 15, "a 'prefetch' thread makes each f32 batch with numpy and "
                                 "device_puts it, up to two steps ahead, for a bf16 MLP train step "
                                 "(1024-8192-8192-1024, batch 8192) that waits on it; Python tracer on", python_tracer=True,
                                 cause="the prefetch thread's make_batch and copy are slower than the step"),
    "elementwise_memory_bound": Shape(elementwise_memory_bound, 15, "train step of eight rounds of layer norm + gelu "
                                      "+ residual over a 16384x2048 bf16 activation, one small matmul",
                                      cause="none: healthy, memory-bound elementwise work"),
    "f32_default_precision": Shape(f32_default_precision, 15, "f32 MLP train step (2048-8192-8192-2048, batch 4096) "
                                   "at the default matmul precision; data resident",
                                   cause="none: healthy f32 at default precision"),
    "host_sampling_decode": Shape(host_sampling_decode, 20, "token-by-token decode (4 bf16 blocks d 2048, vocab "
                                  "32768, batch 32) whose tokens are sampled on the host with numpy "
                                  "(sample_on_host) from logits copied off the device every step; no step markers; "
                                  "Python tracer on", annotate=False, python_tracer=True,
                                  cause="sample_on_host: the host samples every token from copied logits"),
    "periodic_eval": Shape(periodic_eval, 20, "bf16 MLP train step; every 5th annotated step also evaluates 8 "
                           "held-out batches (evaluate: a jit program each, float() of each loss); Python tracer on",
                           python_tracer=True, cause="evaluate: an evaluation pass every 5th step"),
    "eager_optimizer": Shape(eager_optimizer, 8, "jit gradients of an 8-layer f32 MLP, then an Adam update run "
                             "eagerly (adam_update: 8 jnp calls per parameter array, 16 arrays) in each annotated "
                             "step; Python tracer on", python_tracer=True,
                             cause="adam_update: the optimizer's update dispatched op by op"),
    "async_checkpoint": Shape(async_checkpoint, 30, "f32 MLP train steps (4x 4096x4096) whose every 10th step hands a "
                              "copy of the parameters to a 'checkpointer' thread that saves them (device_get + "
                              "np.savez) while the steps go on; no step markers; Python tracer on", annotate=False,
                              python_tracer=True, cause="the checkpointer thread's saves slow the steps they overlap"),
    "device_put_ahead": Shape(device_put_ahead, 15, "each annotated step device_puts the next f32 batch (not waited "
                              "on) before launching a bf16 MLP train step (1024-8192-8192-1024, batch 8192) on the "
                              "current one", cause="none: the copy overlaps the step"),
    "jitted_stages": Shape(jitted_stages, 15, "a bf16 forward pass of twelve separately jitted dense stages (d 4096, "
                           "batch 2048) launched back to back, synced once per annotated step",
                           cause="none: twelve launches a step, queued ahead of the device"),
    "unaligned_matmuls": Shape(unaligned_matmuls, 20, "a chain of four bf16 1000x1000 matmuls over 16000 rows, sizes "
                               "not multiples of 128; annotated steps, synced every step",
                               cause="the launch and sync of a short program every step (padding to 1024 gains 6 %)"),
    "fori_loop_steps": Shape(fori_loop_steps, 10, "ten SGD steps of a bf16 MLP (1024-4096-4096-1024, batch 4096) "
                             "inside one jitted lax.fori_loop per annotated call, data resident",
                             cause="none: healthy, the training loop runs on the device"),
    "bucketed_shapes": Shape(bucketed_shapes, 20, "bf16 MLP train step on batches padded to two bucket sizes (2048 "
                             "and 4096 rows) taking turns, both compiled before the trace; annotated steps",
                             cause="none: two programs of one step, nothing compiles in the loop"),
    "loader_pool": Shape(loader_pool, 20, "four 'reader' pool threads read batches (120 ms latency + np.fromfile) "
                         "into futures the annotated step waits on, one batch every ~30 ms; Python tracer on",
                         python_tracer=True, cause="the reader threads' read_batch"),
    "gc_collect_each_step": Shape(gc_collect_each_step, 15, "gc.collect() on the training thread after each "
                                  "annotated bf16 MLP train step, 400,000 small Python objects alive; Python "
                                  "tracer on", python_tracer=True,
                                  cause="collect: a full garbage collection every step"),
    "transpose_heavy": Shape(transpose_heavy, 15, "four swapaxes of an 8192x8192 bf16 activation around cheap "
                             "elementwise work, then a small matmul; annotated steps",
                             cause="layout copies (transposes) of a large activation"),
    "per_example_calls": Shape(per_example_calls, 15, "inference one example at a time: 64 calls per annotated step "
                               "of a jitted bf16 MLP (512-2048-2048-512) on single rows",
                               cause="64 tiny launches per step instead of one batched call"),
    "debug_print_every_step": Shape(debug_print_every_step, 20, "bf16 MLP train step with a jax.debug.callback "
                                    "printing its loss every annotated step",
                                    cause="a host callback in every step (jax.debug print)"),
    "implicit_host_input": Shape(implicit_host_input, 15, "each annotated step hands a fresh f32 numpy batch "
                                 "(8192x4096, 128 MiB) straight to a bf16 MLP train step, which copies it to the "
                                 "device itself", cause="the implicit host-to-device copy of the batch every step"),
    "eval_last_batch_recompile": Shape(eval_last_batch_recompile, 20, "an evaluation loop of a jitted bf16 MLP over "
                                       "batches of 4096 rows whose last batch has 1000: its program compiles again in "
                                       "the last annotated step", cause="one recompilation for the short last batch"),
    "harmless_sync_every_step": Shape(harmless_sync_every_step, 15, "float(loss) after every annotated step of a long "
                                      "bf16 MLP train step (2048-8192-8192-2048, batch 16384), nothing else on the "
                                      "host", cause="none: the sync every step costs nothing here"),
    "jit_in_loop": Shape(jit_in_loop, 10, "jax.jit of a fresh lambda around the bf16 MLP train step inside the loop, "
                         "so every annotated step traces and compiles it again",
                         cause="a new jit every step: tracing and compiling every step"),
    "metrics_device_get": Shape(metrics_device_get, 20, "each annotated bf16 MLP train step returns 48 scalar "
                                "metrics that log_metrics reads back with jax.device_get and float() every step; "
                                "Python tracer on", python_tracer=True,
                                cause="log_metrics: reading 48 metrics back every step"),
    "remat_layers": Shape(remat_layers, 10, "a 9-layer bf16 MLP (d 2048, batch 8192) trained with every layer under "
                          "jax.checkpoint, far from the memory limit; annotated steps",
                          cause="remat recomputes the activations with memory to spare"),
    "float64_matmuls": Shape(float64_matmuls, 10, "a chain of four 2048x2048 float64 matmuls (jax_enable_x64) with "
                             "tanh between, data resident; annotated steps",
                             cause="float64, which the chip emulates, where float32 (or bf16) would do"),
    "python_scalar_lr": Shape(python_scalar_lr, 20, "bf16 MLP train step whose learning rate, a Python float decayed "
                              "every annotated step, is an ordinary (traced) argument",
                              cause="none: a traced scalar compiles nothing again"),
    "while_loop_convergence": Shape(while_loop_convergence, 15, "each annotated step solves a fixed point with a "
                                    "lax.while_loop on the device (tens of 1024x1024 f32 matmuls until it "
                                    "converges), then a bf16 MLP train step on the result",
                                    cause="none: device work of a data-dependent length"),
    "int8_matmuls": Shape(int8_matmuls, 10, "a chain of four 8192x8192 int8 matmuls accumulating in int32, "
                          "requantised between links; annotated steps", cause="none: int8 at the chip's integer rate"),
    "many_small_device_puts": Shape(many_small_device_puts, 15, "200 jax.device_put calls of small f32 columns per "
                                    "annotated step before a bf16 MLP train step on them",
                                    cause="200 small host-to-device copies every step"),
    "scan_microbatches": Shape(scan_microbatches, 10, "gradient accumulation over 8 micro-batches in one jitted "
                               "lax.scan, then the update: one bf16 MLP program per annotated step",
                               cause="none: one program does the accumulation"),
    "sleep_in_loop": Shape(sleep_in_loop, 15, "time.sleep(0.02) after each annotated bf16 MLP train step; Python "
                           "tracer on", python_tracer=True, cause="sleep: the loop paces itself"),
    "json_logging_each_step": Shape(json_logging_each_step, 15, "after each annotated bf16 MLP train step, "
                                    "write_log_record writes a JSON record of 48,000 host floats to a file; Python "
                                    "tracer on", python_tracer=True,
                                    cause="write_log_record: JSON encoding on the training thread every step"),
    "shard_boundary_stall": Shape(shard_boundary_stall, 24, "a 'loader' thread feeds a two-batch queue from memory, "
                                  "but every 8th batch opens a new shard (open_shard: 250 ms of storage latency + "
                                  "an index read); annotated bf16 MLP steps; Python tracer on", python_tracer=True,
                                  cause="open_shard on the loader thread: every 8th step stalls"),
    "python_list_features": Shape(python_list_features, 15, "make_features turns a nested Python list of floats "
                                  "(2048x256 on the chip) into a device array with jnp.asarray before each annotated "
                                  "bf16 MLP train step (no Python tracer: the conversion is millions of Python calls)",
                                  cause="make_features: converting a Python list every step"),
    "sort_heavy": Shape(sort_heavy, 15, "a ranking step: a full jnp.sort of a 4096x32768 f32 score matrix (on the "
                        "chip) to take each row's top 16, after a small bf16 matmul; annotated steps",
                        cause="a full sort where a top-k would do"),
    "cond_heavy_every_nth": Shape(cond_heavy_every_nth, 30, "a bf16 MLP train step whose lax.cond takes a heavy "
                                  "regulariser branch (32 more matmul pairs) every 10th annotated step; one "
                                  "program, nothing compiles", cause="none: the slow steps are the model's own work"),
    "host_offloaded_optimizer": Shape(host_offloaded_optimizer, 15, "an f32 MLP whose Adam update runs in numpy on "
                                      "the host (numpy_adam: gradients copied off, parameters copied back every "
                                      "annotated step); Python tracer on", python_tracer=True,
                                      cause="numpy_adam: the optimizer on the host, with copies both ways"),
    "near_memory_limit": Shape(near_memory_limit, 6, "a bf16 MLP train step (2048-8192-8192-8192-2048 on the chip) "
                               "at the largest batch XLA's memory analysis fits in 92 % of the chip's memory; "
                               "annotated steps", cause="none: healthy compute with the memory nearly full"),
    "threefry_dropout": Shape(threefry_dropout, 10, "a bf16 MLP train step (1024-8192-8192-8192-1024 on the chip) "
                              "with dropout after every layer, its masks from JAX's default threefry random bits; "
                              "annotated steps", cause="threefry random bits for the dropout masks"),
    "tiny_scan_rnn": Shape(tiny_scan_rnn, 6, "an RNN trained over 256 time steps as a lax.scan of tiny steps "
                           "(batch 8, hidden 128 on the chip); annotated steps",
                           cause="hundreds of tiny sequential steps inside one program"),
    "eval_preds_to_host": Shape(eval_preds_to_host, 15, "an evaluation loop whose accuracy copies each step's f32 "
                                "logits (8192x4096 on the chip) to the host for a numpy argmax; Python tracer on",
                                python_tracer=True, cause="accuracy: the logits copied to the host every step"),
    "slow_consumer_thread": Shape(slow_consumer_thread, 20, "after each annotated bf16 MLP train step the training "
                                  "thread puts its metrics on a queue of two for a 'writer' thread whose sink takes "
                                  "40 ms a record; Python tracer on", python_tracer=True,
                                  cause="the training thread blocks handing records to a slower writer thread"),
    "debug_nans_enabled": Shape(debug_nans_enabled, 15, "a bf16 MLP train step run under jax.debug_nans(True), a "
                                "debugging flag left on; annotated steps",
                                cause="jax_debug_nans: every call's outputs copied to the host and checked"),
    "worker_process_loader": Shape(worker_process_loader, 15, "two worker processes make 64 MiB f32 batches (on the "
                                   "chip) that reach each annotated bf16 MLP step pickled through multiprocessing's "
                                   "imap; Python tracer on", python_tracer=True,
                                   cause="next_batch: receiving and unpickling each batch from the worker processes"),
    "host_histograms": Shape(host_histograms, 15, "after each annotated bf16 MLP train step param_histograms copies "
                             "the parameters to the host for 64-bin numpy histograms; Python tracer on",
                             python_tracer=True, cause="param_histograms: the parameters copied off and binned on "
                                                       "the host every step"),
    "f32_params_bf16_compute": Shape(f32_params_bf16_compute, 15, "f32 master parameters cast to bf16 inside every "
                                     "annotated train step of an MLP (2048-8192-8192-2048, batch 512 on the chip)",
                                     cause="the casts of the f32 parameters every step"),
    "deepcopy_state_each_step": Shape(deepcopy_state_each_step, 15, "a copy.deepcopy of 20,000 entries of Python "
                                      "bookkeeping before each annotated bf16 MLP train step (no Python tracer: the "
                                      "copy is millions of Python calls)",
                                      cause="deepcopy of the host-side state every step"),
    "async_save_waited": Shape(async_save_waited, 20, "every 5th annotated f32 MLP step hands the parameters to a "
                               "saver thread (device_get + np.savez) and waits for it right away; Python tracer on",
                               python_tracer=True, cause="a background save waited on at once: a synchronous save"),
    "scatter_add_pooling": Shape(scatter_add_pooling, 15, "a bf16 projection of 262,144 rows (on the chip) summed "
                                 "per segment by .at[ids].add over 1,024 unsorted segment ids; annotated steps",
                                 cause="a scatter-add the chip serialises, where a one-hot matmul would do"),
    "many_param_leaves": Shape(many_param_leaves, 20, "a jitted SGD step over 500 small f32 parameter arrays "
                               "passed as a list; annotated steps",
                               cause="500 buffers handed over each way per call around microseconds of work"),
    "python_thread_beside_training": Shape(python_thread_beside_training, 20, "bf16 MLP train steps on resident "
                                           "data while a 'tokenizer' thread runs pure Python continuously; Python "
                                           "tracer on", python_tracer=True,
                                           cause="the GIL: the training thread waits for a busy Python thread"),
    "undonated_kv_cache": Shape(undonated_kv_cache, 20, "token-by-token decode into a 2 GiB bf16 KV cache (on the "
                                "chip) under a jit that does not donate it; annotated steps",
                                cause="a copy of the whole cache every step, for want of donate_argnums"),
    "iterate_device_array": Shape(iterate_device_array, 10, "after each annotated bf16 MLP train step, sum_losses "
                                  "reads 256 per-example losses one float() at a time; Python tracer on",
                                  python_tracer=True, cause="sum_losses: one slice and one copy back per element"),
    "boolean_mask_selection": Shape(boolean_mask_selection, 10, "each annotated step keeps the hard examples with a "
                                    "boolean mask (x[losses > threshold]) whose count changes every step, then "
                                    "trains a jitted bf16 MLP step on them",
                                    cause="a data-dependent shape: a sync and a compile every step"),
    "python_augment_loader": Shape(python_augment_loader, 15, "a 'loader' thread augments each batch in pure Python "
                                   "(a loop over the rows) and hands it over a queue of two to a bf16 MLP train "
                                   "step; Python tracer on", python_tracer=True,
                                   cause="augment: pure Python on a loader thread slower than the step"),
    "eager_metrics_each_step": Shape(eager_metrics_each_step, 20, "after each annotated bf16 MLP train step, five "
                                     "metrics updated with eager jnp calls outside the jit, not read back",
                                     cause="none worth a change: a few eager launches beside a step of milliseconds"),
    "uint8_prefetch_healthy": Shape(uint8_prefetch_healthy, 20, "a 'prefetch' thread copies uint8 image batches to "
                                    "the device two steps ahead of a bf16 MLP train step that casts them on the "
                                    "device", cause="none: the copies overlap the steps"),
    "clip_decided_on_host": Shape(clip_decided_on_host, 15, "each annotated step: a jitted gradient, its global norm "
                                  "by eager jnp calls and float(), the clipping scale in Python, then a jitted "
                                  "update", cause="the norm read back and the clipping decided on the host: two "
                                  "launches, eager calls and a sync per step"),
    "float64_batch_promotes": Shape(float64_batch_promotes, 10, "jax_enable_x64 on and a numpy float64 batch handed "
                                    "to an f32 MLP train step each annotated step",
                                    cause="a float64 batch that promotes every matmul to float64, emulated"),
    "callback_in_loop_body": Shape(callback_in_loop_body, 10, "a jitted fori_loop of 32 iterations, each calling "
                                   "back to the host (jax.pure_callback) for a numpy bound; annotated steps",
                                   cause="32 host callbacks per step inside the loop body"),
    "grad_accumulation_in_python": Shape(grad_accumulation_in_python, 10, "8 micro-batches a step in a Python loop: "
                                         "a jitted gradient each, eager tree_map adds and a float(loss) each, then "
                                         "a jitted update", cause="8 launches, 8 syncs and eager adds per step "
                                         "where one scanned program would do"),
    "python_convergence_loop": Shape(python_convergence_loop, 10, "each annotated step iterates a small jitted update "
                                     "from Python until float(change) falls below a tolerance (about 40 launches "
                                     "and reads a step)", cause="a sync per iteration of a loop the device could "
                                     "run: one launch and one read back each"),
    "closed_over_table": Shape(closed_over_table, 15, "a bf16 MLP train step closing over a 64 MiB numpy table, "
                               "embedded in the program as a constant; annotated steps",
                               cause="none in the steady state: the constant costs the first compile only"),
    "eager_row_writes": Shape(eager_row_writes, 10, "each annotated step writes 32 encoded rows into a 256 MiB "
                              "f32 buffer (on the chip) one eager buffer.at[i].set(row) at a time, then trains a bf16 "
                              "MLP step on it", cause="each eager .at[i].set makes a new copy of the whole buffer: "
                              "32 copies of 256 MiB a step"),
    "params_on_cpu_backend": Shape(params_on_cpu_backend, 10, "parameters and batch placed on jax.devices('cpu')[0], "
                                   "so the jitted f32 MLP train step runs on the host's CPU; annotated steps",
                                   cause="the step runs on the CPU backend while the accelerator idles"),
    "history_stack_each_step": Shape(history_stack_each_step, 20, "after each annotated bf16 MLP train step, "
                                     "jnp.mean(jnp.stack(history)) over a Python list of every loss so far",
                                     cause="a stack of a growing number of arrays, compiled anew every step"),
    "eigh_each_step": Shape(eigh_each_step, 10, "a bf16 MLP train step whose first layer's gradient is whitened by "
                            "jnp.linalg.eigh of its 1024x1024 f32 covariance every step, inside the jit",
                            cause="an eigendecomposition every step, where a preconditioner reused for 10 steps "
                            "would do"),
    "one_hot_embedding_lookup": Shape(one_hot_embedding_lookup, 10, "a bf16 train step whose embedding lookup is "
                                      "one_hot(ids, 32768) @ table for 8192 tokens (on the chip), then an MLP",
                                      cause="a one-hot matmul where a gather would do: FLOPs spent multiplying "
                                      "by zero"),
    "static_config_object": Shape(static_config_object, 10, "a fresh TrainConfig object (hashed by identity) passed "
                                  "as a static argument to a bf16 MLP train step each annotated step",
                                  cause="a static argument that is a new object every call: a trace and a compile "
                                  "each step"),
    "healthy_bf16_inference": Shape(healthy_bf16_inference, 15, "batched bf16 inference of a 6-layer MLP (d 4096, "
                                    "batch 8192 on the chip) on resident inputs; annotated steps",
                                    cause="none: healthy, compute-bound"),
    "eager_random_augment": Shape(eager_random_augment, 15, "each annotated step augments a resident bf16 image batch "
                                  "by eager jax.random and jnp calls (flip, brightness, crop) before a jitted bf16 "
                                  "MLP train step", cause="the augmentation's eager launches and their small "
                                  "programs, outside the jit"),
    "json_loader_thread": Shape(json_loader_thread, 15, "a 'loader' thread parses each batch from JSON lines "
                                "(json.loads per row) and hands it over a queue of two to a bf16 MLP train step; "
                                "Python tracer on", python_tracer=True,
                                cause="parse_batch: json.loads on a loader thread slower than the step"),
    "unique_ids_each_step": Shape(unique_ids_each_step, 12, "each annotated step deduplicates 16384 token ids with an "
                                  "eager jnp.unique, gathers those embedding rows and trains a bf16 MLP step on "
                                  "their mean", cause="jnp.unique without size=: a sync and a compile for every "
                                  "new count"),
    "float16_on_tpu": Shape(float16_on_tpu, 10, "a float16 MLP train step (1024-4096-4096-1024, batch 4096 on the "
                            "chip); annotated steps", cause="none: float16 runs as fast as bfloat16 on the chip"),
    "numpy_scalar_promotes_bf16": Shape(numpy_scalar_promotes_bf16, 15, "a bf16 MLP train step whose hidden "
                                        "activations are divided by np.sqrt(width), a numpy float64 scalar; "
                                        "annotated steps", cause="none: the float32 promotion costs nothing "
                                        "measurable on the chip"),
    "activation_offload_to_host": Shape(activation_offload_to_host, 8, "a 9-layer bf16 MLP (d 4096, batch 8192 on "
                                        "the chip) whose checkpointed activations are offloaded to pinned host "
                                        "memory; annotated steps", cause="none: the copies to host memory and back "
                                        "overlap the compute"),
    "int64_index_math": Shape(int64_index_math, 10, "jax_enable_x64 on: int64 ids hashed with int64 arithmetic into a "
                              "bf16 embedding table, 64 rows per bag, then a bf16 MLP train step; annotated steps",
                              cause="none: the int64 arithmetic is small beside the gathers"),
    "one_hot_labels_loss": Shape(one_hot_labels_loss, 10, "a bf16 LM-head train step (8192 tokens, vocab 32768 on "
                                 "the chip) whose cross-entropy sums one_hot(labels) * log_softmax; annotated steps",
                                 cause="none: the one-hot only selects inside a fused reduction"),
    "small_vocab_one_hot_lookup": Shape(small_vocab_one_hot_lookup, 10, "a bf16 train step whose lookup of 8192 "
                                        "tokens is one_hot(ids, 1024) @ table, then an MLP; annotated steps",
                                        cause="none: a one-hot matmul of 1,024 classes costs the matrix unit "
                                        "little"),
    "donated_row_writes": Shape(donated_row_writes, 10, "each annotated step writes 32 rows into a donated 256 MiB "
                                "f32 buffer inside one jit (dynamic_update_slice in a fori_loop), then trains a bf16 "
                                "MLP step on it", cause="a loop of one-row writes, each rewriting the "
                                "buffer's 8-row tiles, where one stacked write would do"),
    "scan_stacked_rows": Shape(scan_stacked_rows, 10, "each annotated step builds 32 rows (256 MiB of f32 on the "
                               "chip) as a lax.scan's stacked outputs, then trains a bf16 MLP step on them",
                               cause="a scan writing its stacked outputs one row at a time, each rewriting "
                               "8-row tiles, where one vectorised op would do"),
    "lax_map_per_example": Shape(lax_map_per_example, 5, "inference scoring 512 examples with jax.lax.map over a "
                                 "per-example bf16 MLP (d 2048 on the chip); annotated steps",
                                 cause="lax.map runs the examples one after another where jax.vmap would batch "
                                 "them"),
    "kv_cache_layout": Shape(kv_cache_layout, 20, "token-by-token decode through 16 bf16 layers into a donated KV "
                             "cache laid out [layers, 2, batch, positions, d]; annotated steps",
                             cause="the cache stored batch-major, copied whole into the positions-major layout "
                             "the program reads and back every token"),
    "clear_caches_each_step": Shape(clear_caches_each_step, 12, "jax.clear_caches() after each annotated bf16 "
                                    "MLP train step", cause="the step traced and compiled again after every "
                                    "clearing, with the same shapes"),
    "narrow_heads_attention": Shape(narrow_heads_attention, 10, "two bf16 transformer blocks (d 1024, 2048 tokens "
                                    "on the chip) whose attention has 16 heads of 64; annotated steps",
                                    cause="heads of 64 on a 128-wide matrix unit: each head's matmuls fill half of "
                                    "it, and twice the heads make twice the score matrices"),
    "full_shuffle_each_step": Shape(full_shuffle_each_step, 10, "next_batch shuffles the whole 512 MiB host "
                                    "dataset each annotated step to take one batch of a bf16 MLP step",
                                    python_tracer=True, cause="next_batch copies the whole dataset in a new order "
                                    "every step to take 4096 rows of it"),
    "growing_kv_concat_decode": Shape(growing_kv_concat_decode, 8, "token-by-token decode through 4 bf16 layers "
                                      "whose KV cache grows by jnp.concatenate inside the jitted step; annotated "
                                      "steps", cause="a cache one position longer every token, so the step "
                                      "compiles again every token"),
    "nchw_conv_net": Shape(nchw_conv_net, 15, "a bf16 conv net train step (six 3x3 convolutions of 128 channels on "
                           "the chip) written NCHW/OIHW; annotated steps",
                           cause="none: the compiler lays the convolutions out for the chip whatever layout the "
                           "code names"),
    "python_sum_of_losses": Shape(python_sum_of_losses, 30, "each annotated bf16 MLP train step logs "
                                  "sum(losses) / len(losses) over a Python list of device scalars",
                                  python_tracer=True, cause="Python's sum adds the device scalars with one eager add "
                                  "each, one more every step"),
    "host_dropout_masks": Shape(host_dropout_masks, 15, "make_dropout_masks draws a bf16 MLP's dropout masks with "
                                "numpy each annotated step and hands them to the jitted step", python_tracer=True,
                                cause="masks drawn on the host and copied in every step, where the jit could draw "
                                "them"),
    "host_ema_each_step": Shape(host_ema_each_step, 15, "after each annotated f32 MLP train step update_ema "
                                "copies the parameters to the host and averages them with numpy",
                                python_tracer=True, cause="update_ema: the parameters copied off the device and "
                                "averaged on the host every step"),
    "pickle_snapshot_every_5": Shape(pickle_snapshot_every_5, 20, "every 5th annotated f32 MLP train step "
                                     "snapshot_state pickles the parameters to a file", python_tracer=True,
                                     cause="snapshot_state: a synchronous save every 5th step"),
    "replay_buffer_concat": Shape(replay_buffer_concat, 20, "add_to_buffer grows a host replay buffer by one "
                                  "batch each annotated step with np.concatenate, then a bf16 MLP step trains on a "
                                  "sample of it", python_tracer=True, cause="add_to_buffer copies the whole "
                                  "buffer, one batch longer, every step"),
    "python_row_loop_preprocess": Shape(python_row_loop_preprocess, 10, "normalize_rows standardises a host batch "
                                        "row by row in a Python loop each annotated step before a bf16 MLP step",
                                        python_tracer=True, cause="normalize_rows: a Python loop of numpy calls per "
                                        "row where one vectorised expression would do"),
    "eager_param_cast": Shape(eager_param_cast, 15, "f32 master parameters cast to bf16 by eager astype calls before "
                              "each annotated step's jitted train step and master update",
                              cause="none: the eager casts cost what the same casts inside the jit do"),
    "variable_length_requests": Shape(variable_length_requests, 20, "inference on requests of random lengths "
                                      "(128 to 1024 tokens) through a jitted bf16 transformer block at each "
                                      "request's own length; annotated steps", warm=False,
                                      cause="a compilation for every new request length"),
    "unannotated_inference": Shape(unannotated_inference, 30, "batched bf16 inference of a 6-layer MLP (d 4096) "
                                   "called 30 times, each result read, no step markers", annotate=False,
                                   cause="none: one program, back to back on the device"),
    "split_jit_forward": Shape(split_jit_forward, 15, "each annotated step jits the bf16 MLP's forward for the "
                               "loss, its gradient and the update separately", cause="none on the chip: the "
                               "forward computed again for the logged loss costs it little"),
    "fft_long_filter_conv": Shape(fft_long_filter_conv, 10, "four layers of f32 1-D convolutions with 1024-tap "
                                  "filters by FFT (batch 16, 32 channels, 16384 samples on the chip), trained",
                                  cause="none: the FFT is the fast way to these convolutions (a direct "
                                  "depthwise convolution takes 7x as long)"),
    "exact_top_k_retrieval": Shape(exact_top_k_retrieval, 15, "256 queries scored against a million 128-wide bf16 "
                                   "items, then the exact top 100 of each with lax.top_k",
                                   cause="an exact top-k over a million scores a query"),
    "log_grad_norms_each_leaf": Shape(log_grad_norms_each_leaf, 20, "a 12-layer bf16 MLP's step reads each "
                                      "gradient leaf's norm to the host with float() for the log",
                                      cause="log_grad_norms: a device read per gradient "
                                      "leaf, each after eager launches of its own"),
    "labels_from_python_list": Shape(labels_from_python_list, 15, "each step's labels converted from a Python list "
                                     "of lists (4096 x 32 ints on the chip) with jnp.asarray",
                                     cause="jnp.asarray of a nested Python list, untraced "
                                     "host work on the training thread"),
    "gan_unannotated": Shape(gan_unannotated, 12, "a GAN's iteration (two discriminator steps, one generator step, "
                             "bf16 MLPs 4096 wide on the chip) without step markers", annotate=False,
                             cause="none: device-bound, three programs an iteration"),
    "dense_embedding_update": Shape(dense_embedding_update, 15, "a bf16 embedding table (262144 x 512 on the chip) "
                                    "updated whole each step by SGD on a dense gradient",
                                    cause="the dense gradient of a lookup: the whole table zeroed, scattered into and "
                                    "rewritten every step"),
    "large_vocab_loss": Shape(large_vocab_loss, 10, "an LM head's train step (4096 tokens and a 1024 x 65536 "
                              "bf16 output matrix on the chip): f32 logits, log-softmax and cross-entropy",
                              cause="none: a compute-bound step at 0.69 of the chip's bf16 peak (a vocabulary "
                              "chunked in a scan is slower)"),
    "static_lr_schedule": Shape(static_lr_schedule, 10, "a bf16 MLP train step whose decayed learning rate is a "
                                "static argument", cause="a static argument that changes every step: a compile each"),
    "stem_conv_rgb": Shape(stem_conv_rgb, 10, "a bf16 NHWC conv net on 224 x 224 RGB images (batch 64 on the chip) "
                           "whose 7x7 stride-2 stem reads 3 channels",
                           cause="none: the 3-channel stem costs little (a space-to-depth stem saves 0.02)"),
    "top_p_sort_decode": Shape(top_p_sort_decode, 20, "token-by-token nucleus sampling over a 262144-token "
                               "vocabulary after a full jnp.sort of the probabilities",
                               cause="a full sort of the vocabulary's probabilities each token"),
    "params_numpy_each_step": Shape(params_numpy_each_step, 15, "a bf16 MLP's parameters kept in numpy on the host "
                                    "and copied to the device and back every step",
                                    cause="the parameters' copies to the device and back every step"),
    "cumsum_long_sequence": Shape(cumsum_long_sequence, 10, "four layers of jnp.cumsum over 32768 positions (f32, "
                                  "256 channels on the chip) and a bf16 matmul each, trained",
                                  cause="none: cumsum is the fast way to these running sums on the chip (an "
                                  "associative scan takes 2.6x as long)"),
    "host_causal_mask_each_step": Shape(host_causal_mask_each_step, 10, "each step's causal attention mask built "
                                        "with numpy on the host (8 x 2048 x 2048 on the chip); Python tracer on",
                                        python_tracer=True, cause="make_attention_mask: a mask the jit could make, "
                                        "built and copied to the device every step"),
    "per_example_grads_dp": Shape(per_example_grads_dp, 15, "a DP-SGD step: per-example gradients of a bf16 MLP "
                                  "by vmap, clipped, summed and noised", cause="none: per-example gradients are "
                                  "the algorithm"),
    "rolling_history_scan": Shape(rolling_history_scan, 8, "a scan over 256 steps whose carry, a 256 x 4096 f32 "
                                  "history on the chip, is rolled by one each step",
                                  cause="none: XLA turns the roll into no more work than a write in place"),
    "preconditioner_inverse_each_step": Shape(preconditioner_inverse_each_step, 20, "a Shampoo-like update whose "
                                              "2048 x 2048 f32 preconditioner is inverted with jnp.linalg.inv every "
                                              "step", cause="a 2048 x 2048 matrix inverted (an LU) every step"),
    "im2col_by_hand": Shape(im2col_by_hand, 10, "three bf16 1-D convolutions (batch 32, 8192 positions, 512 channels "
                            "on the chip) written as an im2col: shifted slices concatenated, then a matmul",
                            cause="the im2col's 9x copies of each layer's input, built and read every step"),
    "vit_patch_embedding": Shape(vit_patch_embedding, 10, "a ViT's patch embedding by reshape and transpose (224 x "
                                 "224 images in 16 x 16 patches on the chip) and two MLP blocks in bf16",
                                 cause="none: patches by reshape are the fast way (a stride-16 convolution is "
                                 "slower)"),
    "conv_patches_matmul": Shape(conv_patches_matmul, 10, "three bf16 3 x 3 convolutions as "
                                 "lax.conv_general_dilated_patches and a matmul (batch 32, 64 x 64, 128 channels "
                                 "on the chip)", cause="patches extracted as 9x copies of each layer's input, "
                                 "relaid and read every step"),
    "linear_attention_quadratic": Shape(
        linear_attention_quadratic, 10, "four layers of linear attention computed as phi(q) @ phi(k).T, normalised, "
        "@ v (batch 2, 8 heads of 128, 4096 tokens on the chip), bf16, trained",
        cause="the n x n product phi(q) @ phi(k).T, made and read in every layer and its gradient, where phi(q) @ "
        "(phi(k).T @ v) makes none"),
    "moe_dense_dispatch": Shape(
        moe_dense_dispatch, 10, "two top-1 mixture-of-experts layers (8 experts, 4096 tokens of 1024 on the chip) "
        "dispatched and combined by one-hot einsums, bf16, trained",
        cause="the one-hot dispatch and combine einsums over [tokens, experts, capacity]"),
    "int32_count_matmul": Shape(
        int32_count_matmul, 10, "co-occurrence counts counts.T @ counts of an int32 8192 x 8192 count matrix on the "
        "chip, then a log normalisation in f32",
        cause="int32 matmuls, which no matrix unit takes (bf16 counts with an f32 accumulator are exact)"),
    "strided_conv_by_slicing": Shape(
        strided_conv_by_slicing, 10, "four bf16 3 x 3 convolutions (batch 32, 128 x 128, 128 channels on the chip), "
        "three of them downsampling by y[:, ::2, ::2] after a full-resolution convolution, trained",
        cause="convolutions at full resolution then subsampled by y[:, ::2, ::2], and their gradients at full "
        "resolution over zeros"),
    "subprocess_each_step": Shape(
        subprocess_each_step, 15, "a bf16 MLP train step, then report_usage starts a Python subprocess and waits for "
        "its output, every step; Python tracer on", python_tracer=True,
        cause="report_usage (waiting for a subprocess every step)"),
    "attention_heads_python_loop": Shape(
        attention_heads_python_loop, 10, "four self-attention layers (batch 8, 1024 tokens, 16 heads of 64 on the "
        "chip) whose heads are a Python loop of small matmuls inside the jit, bf16, trained",
        cause="none: XLA merges the per-head matmuls (a batched einsum saves nothing)"),
    "logits_for_every_position": Shape(
        logits_for_every_position, 10, "a prefill computing the 32768-word vocabulary's logits for all 1024 positions "
        "of 8 prompts and keeping the last position's (two bf16 MLP blocks of 1024 on the chip)",
        cause="none of the logits' cost: XLA slices before the matmul itself; the loop is launch-bound, a 0.2 ms "
        "program launched and waited for each step"),
    "strided_conv_downsampling": Shape(
        strided_conv_downsampling, 10, "four bf16 3 x 3 convolutions (batch 32, 128 x 128, 128 channels on the "
        "chip), the last three of stride 2, trained",
        cause="none in the convolutions (full resolution is slower); the loop waits for each step's launch"),
    "conv_transpose_decoder": Shape(
        conv_transpose_decoder, 10, "three bf16 4 x 4 transposed convolutions of stride 2 (batch 32, 16 x 16 up to "
        "128 x 128, 128 channels on the chip), trained",
        cause="none in the convolutions (resize then convolve saves nothing); the loop waits for each step's launch"),
    "depthwise_separable_net": Shape(
        depthwise_separable_net, 10, "six MobileNet-like blocks of a 3 x 3 depthwise and a 1 x 1 pointwise bf16 "
        "convolution (batch 64, 56 x 56, 256 channels on the chip), trained",
        cause="none: healthy, memory-bound depthwise convolutions"),
    "metrics_push_waits_for_ack": Shape(
        metrics_push_waits_for_ack, 15, "a bf16 MLP train step, then push_metrics sends statistics over a socket "
        "pair to a collector thread and waits for its acknowledgement; Python tracer on", python_tracer=True,
        cause="push_metrics (a socket send, then a wait for the collector's acknowledgement)"),
    "int8_weights_dequantised": Shape(
        int8_weights_dequantised, 10, "weight-only int8 inference: four 8192 x 8192 int8 layers dequantised to bf16 "
        "in the jit before each matmul, batch 256",
        cause="none in the dequantisation (fused into the matmuls); the loop is launch-bound, a 0.7 ms program "
        "launched and waited for each step"),
    "two_hop_propagation_order": Shape(
        two_hop_propagation_order, 20, "two-hop graph layer over a dense 8192-node adjacency computed as "
        "(adj @ adj) @ (h @ w), bf16, trained, data resident",
        cause="adj @ adj materialised: an n x n x n product where adj @ (adj @ x) needs two n x n x 128 ones "
        "(reassociated saves 0.66 on the chip, 0.86 on a CPU)"),
    "memmap_random_rows": Shape(
        memmap_random_rows, 20, "read_batch: 128 random uint8 images fancy-indexed from an np.memmap and scaled to "
        "f32 on the training thread before a bf16 patch-MLP train step; Python tracer on", python_tracer=True,
        cause="read_batch on the training thread (memmap fancy indexing and f32 scaling, 0.29 of the loop under the "
        "Python tracer) and the f32 batch's transfer; reading ahead saves 0.70 on the chip; healthy on a CPU "
        "(read_batch 0.08)"),
    "grouped_query_repeat_kv": Shape(
        grouped_query_repeat_kv, 20, "grouped-query attention prefill (32 query heads, 4 key/value heads widened "
        "by jnp.repeat), bf16, two layers, 2048 tokens",
        cause="none on the chip: the repeat is fused into the attention's dot operands (grouping the query heads "
        "saves 0); on a CPU the widened keys and values cost 0.22"),
    "periodic_weight_reload": Shape(
        periodic_weight_reload, 32, "bf16 MLP train steps; every 8th step load_reference reads 256 MiB of f32 "
        "weights from an .npz and puts them on the device for an evaluation; Python tracer on",
        python_tracer=True, cause="load_reference: 256 MiB read from disk and put on the device every 8th step, "
        "0.93 of the loop (keeping it on the device saves 0.95); on a CPU 0.15"),
    "decode_without_kv_cache": Shape(
        decode_without_kv_cache, 30, "greedy decoding, one token per step, each step the full causal forward over "
        "a 1024-token buffer (no key/value cache), 4 bf16 layers of 1024, batch 8", annotate=False,
        cause="no key/value cache: each token recomputes the whole 1024-token forward (a KV cache saves 0.87 on the "
        "chip, 0.92 on a CPU)"),
    "video_conv3d_bf16": Shape(
        video_conv3d_bf16, 15, "3-D conv net on 16-frame 112 x 112 RGB clips (three strided 3 x 3 x 3 convs of "
        "64/128/256 channels), bf16, trained, data resident",
        cause="none in the convolutions (padding the stem to 8 channels saves 0); on the chip a 2.2 ms program "
        "launched and waited for each step (busy 0.69)"),
    "cached_decode_top_k": Shape(
        cached_decode_top_k, 30, "top-k sampling on the device from a 4-layer bf16 transformer with a key/value "
        "cache, batch 8, one token per step", annotate=False,
        cause="none in the program: a 0.5 ms decoding step launched and waited for each token (launch-bound, busy "
        "0.36); 4x the batch takes 1.5x the time"),
    "cross_attention_recomputed": Shape(
        cross_attention_recomputed, 30, "decoding against a 2048-position encoder output, four bf16 layers of "
        "cross-attention and MLP, each step projecting the encoder output to keys and values again",
        annotate=False, cause="the encoder output's keys and values projected again at each step (projecting once "
        "saves 0.22 on the chip, 0.85 on a CPU); on the chip also a 1.6 ms program launched and waited for each "
        "step (busy 0.68)"),
    "contrastive_similarity_loss": Shape(
        contrastive_similarity_loss, 15, "CLIP-style contrastive step: batch 8192, the 8192 x 8192 similarity "
        "matrix's cross-entropy both ways, bf16 towers, trained, data resident",
        cause="none: the similarity matrix's float32 softmax both ways is the loss (bf16 logits save 0.25 on the "
        "chip at a precision cost, nothing on a CPU)"),
    "masked_lm_all_positions": Shape(
        masked_lm_all_positions, 15, "masked-LM step: vocabulary logits (30,522) for all 32 x 512 positions, the 76 "
        "masked positions per sequence gathered after, bf16, trained, data resident",
        cause="vocabulary logits for every position, 76 of 512 kept: gathering the masked positions first saves "
        "0.70 on the chip, 0.51 on a CPU"),
    "gram_matrix_first": Shape(
        gram_matrix_first, 20, "least squares by gradient steps: (x.T @ x) @ w over a 65,536 x 512 design matrix "
        "and 8 targets, bf16, data resident",
        cause="none in the product order on the chip (x.T @ (x @ w) is 1.4x slower there: its thin products fill "
        "a sixteenth of the matrix unit); a 0.2 ms program launched and waited for each step (busy 0.23); on a CPU "
        "reassociating saves 0.66"),
    "decode_logits_to_host": Shape(
        decode_logits_to_host, 20, "greedy decoding without a key/value cache, the full forward over a "
        "1024-token buffer each step returning the current logits, argmax and the token buffer on the host",
        annotate=False, cause="no key/value cache: each token recomputes the whole 1024-token forward (a KV cache "
        "saves 0.87 on the chip, 0.95 on a CPU), the tokens kept on the host"),
    "shard_reload_every_n": Shape(
        shard_reload_every_n, 30, "bf16 MLP train steps on batches cut from a shard; every 10th step next_shard "
        "np.loads a 192 MiB .npy and puts it on the device; Python tracer on", python_tracer=True,
        cause="next_shard: a 192 MiB .npy read and put on the device every 10th step, 0.67 of the "
        "loop; reading it ahead on a thread saves only 0.05 (a read takes 5x the ten steps' device work)"),
    "outer_product_then_sum": Shape(
        outer_product_then_sum, 20, "bilinear layer written as (x[:, :, None] * z[:, None, :]) @ w over 256 x 256 "
        "outer products, batch 256, bf16, trained, data resident",
        cause="a 0.17 ms program launched and waited for each step (launch-bound, busy 0.15); the einsum saves "
        "0.23"),
    "sequence_classifier_dynamic_position": Shape(
        sequence_classifier_dynamic_position, 15, "sequence classifier pooling the hidden state at a position "
        "passed in as an array, two bf16 MLP blocks of 768 over 32 x 512 positions, trained, data resident",
        cause="none: healthy (a static pooled position saves 0); a 4.6 ms program launched and waited for each "
        "step (busy 0.82)"),
    "lax_map_training_loss": Shape(lax_map_training_loss, 5, "a bf16 MLP (1024-4096-1024, batch 256 on the chip) "
                                 "trained with its loss computed one example at a time by jax.lax.map; annotated "
                                 "steps", cause="jax.lax.map runs the 256 examples one after another, a device loop "
                                 "of vector-matrix products (busy 0.91); jax.vmap saves 0.94 (on a CPU 0.88)"),
    "vmap_cond_both_branches": Shape(vmap_cond_both_branches, 15, "two bf16 MLP experts chosen per example by "
                                     "lax.cond under vmap (both run, a select keeps one); annotated steps",
                                     cause="both experts run on every example, each against its own copy of the "
                                     "weights (vmap batches every operand of a per-example lax.cond); the examples "
                                     "grouped by expert save 0.98 (on a CPU 0.99)"),
    "linear_rnn_sequential_scan": Shape(linear_rnn_sequential_scan, 5, "a diagonal linear recurrence over 2048 "
                                        "positions by lax.scan, trained; annotated steps",
                                        cause="a scan of 2048 elementwise steps of 0.2 us (0.72 of device time) and a "
                                        "launch each step (0.33 of the loop); unroll=8 saves 0.32 (on a CPU 0.71), "
                                        "an associative scan takes 1.9x as long on the chip"),
    "frozen_backbone_masked_grads": Shape(frozen_backbone_masked_grads, 15, "a head fine-tuned on a frozen bf16 "
                                          "backbone whose gradients are computed and multiplied by masks of 0.0; "
                                          "annotated steps", cause="the frozen backbone's gradients computed and "
                                          "multiplied by 0.0, masks the compiled program only sees as values passed "
                                          "in; stop_gradient saves 0.43 (on a CPU 0.68)"),
    "tril_matmul_prefix_sum": Shape(tril_matmul_prefix_sum, 10, "running means as a lower-triangular matrix of ones "
                                    "times the sequence, four layers, trained; annotated steps",
                                    cause="running sums as 8192 x 8192 triangular matmuls (0.93 of device time); "
                                    "summing in chunks of 256 saves 0.65, jnp.cumsum 0.29 (on a CPU, at 1024 "
                                    "positions, 0.67 and 0.61)"),
    "pairwise_distances_broadcast": Shape(pairwise_distances_broadcast, 10, "all-pairs squared distances by "
                                          "broadcasting, trained; annotated steps",
                                          cause="an [n, n, d] array of differences by broadcasting, element-wise on "
                                          "the vector units; |q|^2 + |k|^2 - 2 q @ k.T saves 0.68 (on a CPU "
                                          "0.94)"),
    "segment_mean_one_hot": Shape(segment_mean_one_hot, 10, "segment means as one_hot(ids).T @ h, trained; "
                                  "annotated steps",
                                  cause="a 0.84 ms program launched and waited for each step (busy 0.48); "
                                  "jax.ops.segment_sum is no faster on the chip (saves 0; on a CPU 0.74)"),
    "per_example_clipped_grads": Shape(per_example_clipped_grads, 10, "DP-SGD: per-example gradients by "
                                       "vmap(grad), clipped and averaged; annotated steps",
                                       cause="the method's per-example weight gradients, made and clipped: a plain "
                                       "batch gradient (another method) takes 0.13 of the time"),
    "switch_experts_vmap": Shape(switch_experts_vmap, 10, "four bf16 MLP experts chosen per example by lax.switch "
                                 "under vmap; annotated steps",
                                 cause="every expert runs on every example against its own copy of the weights (vmap "
                                 "batches every operand of a per-example lax.switch); the examples grouped by "
                                 "expert save 0.98 (on a CPU 0.99)"),
    "kron_materialised_weights": Shape(kron_materialised_weights, 10, "a Kronecker-factored layer applied as "
                                       "x @ jnp.kron(a, b), trained; annotated steps",
                                       cause="the 4096 x 4096 Kronecker product made every step and multiplied; "
                                       "the factors applied in turn save 0.64 (on a CPU 0.50)"),
    "diag_of_full_product": Shape(diag_of_full_product, 10, "per-example scores as jnp.diagonal(q @ k.T), "
                                  "trained; annotated steps",
                                  cause="an 8192 x 8192 product made to keep its diagonal; (q * k).sum(-1) saves "
                                  "0.72 (on a CPU 0.90)"),
    "heads_in_a_python_loop": Shape(heads_in_a_python_loop, 10, "attention heads in a Python loop inside the jit, "
                                    "trained; annotated steps",
                                    cause="none on the chip: XLA batches the heads' matmuls itself (einsum saves "
                                    "0.00; on a CPU 0.27)"),
    "sliding_window_attention_dense": Shape(sliding_window_attention_dense, 10, "sliding-window attention as "
                                            "full attention with a band mask, trained; annotated steps",
                                            cause="the full n x n scores, softmax and gradients computed and all "
                                            "but a 512-key band masked; blocks of queries against two blocks of "
                                            "keys save 0.79 (on a CPU 0.85)"),
    "jacobian_then_product": Shape(jacobian_then_product, 10, "per-example vector-Jacobian products by the full "
                                   "Jacobian (vmap(jax.jacrev)) then a product with v, in a trained loss",
                                   cause="each example's full Jacobian built (its derivatives seeded by an identity, "
                                   "one backward pass per output) to be multiplied by one vector; jax.vjp saves 0.86 "
                                   "(on a CPU 0.97)"),
    "inverse_then_matmul": Shape(inverse_then_matmul, 10, "jnp.linalg.inv(A) @ b (2048 x 2048 f32, 16 right-hand "
                                 "sides) in a trained loss, A changing every step",
                                 cause="the inverse computed (its triangular solves against the n x n identity, its "
                                 "gradient's n x n products) where only its product with 16 columns is used; "
                                 "jnp.linalg.solve saves 0.31 (on a CPU 0.61-0.79, unstable: not kept)"),
    "ensemble_members_in_a_python_loop": Shape(ensemble_members_in_a_python_loop, 20, "16 small MLPs each trained by "
                                               "its own jitted step call in a Python loop every iteration",
                                               cause="16 small programs launched one after another each iteration; "
                                               "one vmapped step over the stacked members saves 0.79 (on a CPU "
                                               "0.54)"),
    "upsample_by_selection_matmul": Shape(upsample_by_selection_matmul, 10, "nearest-neighbour 2x upsampling by "
                                          "einsums with a 0/1 selection matrix made from iotas, trained",
                                          cause="none on the chip: the matmuls by a 0/1 selection matrix run "
                                          "as fast as jnp.repeat there (it saves 0.00; on a CPU 0.09-0.57 from run "
                                          "to run: not kept)"),
    "full_hessian_newton_step": Shape(full_hessian_newton_step, 10, "a Newton step by the full Hessian "
                                      "(jax.hessian) and 8 conjugate-gradient products with it",
                                      cause="none on the chip: the Hessian, one large matmul, costs less than the "
                                      "8 Hessian-vector products that replace it (they save 0.00); on a CPU they "
                                      "save 0.88"),
    "auxiliary_loss_weighted_zero": Shape(auxiliary_loss_weighted_zero, 10, "an auxiliary head as large as the "
                                          "trunk whose loss weight is a constant 0.0, trained",
                                          cause="the auxiliary head's forward and backward computed every step and "
                                          "multiplied by a constant 0.0; leaving it out saves 0.39 (on a CPU 0.65)"),
    "grouped_conv_by_python_loop": Shape(grouped_conv_by_python_loop, 10, "a grouped 3x3 convolution as a Python "
                                         "loop of 32 convolutions over channel slices, trained",
                                         cause="32 small convolutions a layer where one grouped convolution "
                                         "(feature_group_count) saves 0.24; on a CPU the grouped form is far slower "
                                         "(not kept)"),
    "per_timestep_projection_loop": Shape(per_timestep_projection_loop, 10, "a projection applied to each of 128 "
                                          "time steps by a Python loop inside the jitted step, trained",
                                          cause="a 0.96 ms launch gap a step around 0.42 ms of device work, and 128 "
                                          "small matmuls where one over every time step saves 0.22 (on a CPU 0.83, "
                                          "its bf16 converts in the way: not kept)"),
    "toeplitz_conv1d_matmul": Shape(toeplitz_conv1d_matmul, 10, "a causal 64-tap 1-D convolution as a matmul by "
                                    "a Toeplitz matrix made from the filter, trained",
                                    cause="a 1-D convolution as a matmul by a 4096-square Toeplitz matrix, all but a "
                                    "64-wide band zeros; its gradient's scatter of the band into the 64 taps holds "
                                    "0.99 of the device time; conv_general_dilated saves 0.99 (on a CPU 0.70)"),
    "softmax_then_argmax_decode": Shape(softmax_then_argmax_decode, 10, "greedy decoding of 32 tokens a call that "
                                        "picks each by argmax(softmax(logits)), in one jitted scan",
                                        cause="none: the softmax before the argmax costs 0.05 of the loop on the "
                                        "chip (0.15 on a CPU, not kept)"),
    "polynomial_features_by_powers": Shape(polynomial_features_by_powers, 10, "degree-16 polynomial features as "
                                           "sum(c[k] * x ** k), then a matmul layer, trained",
                                           cause="none that matters on the chip: the powers fuse into memory-bound "
                                           "elementwise work, and Horner's rule saves 0.10 (the launch gap takes 0.24 "
                                           "of the loop); on a CPU, where the powers' multiplies are the cost, Horner "
                                           "saves 0.45"),
    "sliding_window_by_multiplied_mask": Shape(sliding_window_by_multiplied_mask, 10, "sliding-window attention as "
                                               "full attention whose band is applied by multiplying a float mask, "
                                               "trained",
                                               cause="the full 4096-square scores, softmax and gradients computed and "
                                               "all but a 256-key band multiplied by zero (a float band made from "
                                               "positions); blocks of queries against two blocks of keys save 0.72 "
                                               "(on a CPU 0.75)"),
    "sinkhorn_transport_plan": Shape(sinkhorn_transport_plan, 10, "50 Sinkhorn iterations in log space over a "
                                     "4096-square cost matrix in one jitted fori_loop",
                                     cause="none: 50 log-space iterations over the cost matrix, the algorithm's own "
                                     "work; a bf16 cost matrix saves nothing on the chip (0.16 on a CPU, not "
                                     "kept)"),
    "distances_by_norm_expansion": Shape(distances_by_norm_expansion, 10, "a contrastive loss on squared distances "
                                         "by the norm expansion, trained",
                                         cause="none: the pairs' matmul and elementwise work is the loss's own (a "
                                         "quarter of the pairs takes 0.30 of the time); no pairwise differences by "
                                         "broadcasting"),
}


# --- tracing one shape and its truth ----------------------------------------------------------


def _options(name: str, shape: Shape):
    import jax.profiler

    options = jax.profiler.ProfileOptions()
    options.session_id = name
    options.host_tracer_level = 2
    options.python_tracer_level = 1 if shape.python_tracer else 0
    return options


def _time(iteration: Callable[[int, Clock], None], steps: int) -> Clock:
    """``steps`` untraced iterations after one to warm up."""
    iteration(-1, Clock())
    clock = Clock()
    for i in range(steps):
        clock.run(i, iteration, annotate=False)
    return clock


def loop_truth(clock: Clock, ablations: dict[str, Clock], compiles: CompileClock) -> dict:
    """The truth every shape has: iterations, the named parts, the ablations and the compilations."""
    loop_ms = sum(clock.iterations)
    mean = statistics.mean(clock.iterations)
    truth = {
        "steps": _number(len(clock.iterations), "iterations the traced loop ran", abs=0),
        "iteration_ms": _number(mean, f"mean iteration, {CLOCK}", rel=0.1),
        "iteration_median_ms": _number(statistics.median(clock.iterations), f"median iteration, {CLOCK}", rel=0.1),
        "loop_ms": _number(loop_ms, f"sum of the iterations, {CLOCK}", rel=0.1),
        "compiles_in_trace": _number(compiles.count, "XLA backend compilations while tracing (jax.monitoring "
                                                     "/jax/core/compile/backend_compile_duration)", abs=0),
        "compile_ms_in_trace": _number(compiles.ms, "sum of those compilations' durations", rel=0.25, abs=5.0),
    }
    for name, values in clock.parts.items():
        ran = [v for v in values if v > 0]
        truth[f"{name}_ms"] = _number(statistics.mean(ran), f"mean of {name} where it ran, {CLOCK}", rel=0.15)
        truth[f"{name}_calls"] = _number(len(ran), f"iterations that ran {name}", abs=0)
        truth[f"{name}_share"] = _number(sum(values) / loop_ms, f"{name}'s total / loop_ms", abs=0.05)
    for name, values in clock.calls.items():
        truth[f"{name}_ms"] = _number(statistics.mean(values), f"mean of {name} on its own thread, {CLOCK}",
                                      rel=0.15)
        truth[f"{name}_calls"] = _number(len(values), f"{name} calls during the traced loop", abs=0)
    for name, ablation in ablations.items():
        ablated = statistics.mean(ablation.iterations)
        truth[f"{name}_iteration_ms"] = _number(
            ablated, f"ablation '{name}': mean iteration of the same loop, untraced, after the trace, {CLOCK}",
            rel=0.2)
        truth[f"{name}_saved_share"] = _number(max(0.0, 1 - ablated / mean),
                                               f"1 - {name}_iteration_ms / iteration_ms", abs=0.1)
    return truth


def device_truth(xplane: Path, clock: Clock) -> dict:
    """The device's op time per iteration and busy fraction, by hand from the trace (JAX's own reader); sets
    ``clock.device_op_ms``. Empty without a device plane (a CPU's trace has none)."""
    planes, _ = measure(str(xplane), {})
    if not planes:
        return {}
    (plane,) = planes
    clock.device_op_ms = plane.op_ns / 1e6 / len(clock.iterations)
    how = "by hand from the trace: scripts/measure_device_trace.py, the TPU's XLA Ops events"
    return {"device_op_ms": _number(clock.device_op_ms, f"{how}, summed, per iteration", rel=0.1),
            "device_busy_fraction": _number(plane.busy, f"{how}, their union over the first op's start to the "
                                                        "last op's end", abs=0.05),
            "device_busy_over_loop": _number(clock.device_op_ms * len(clock.iterations) / sum(clock.iterations),
                                             f"{how}, summed, over loop_ms: the workload's own loop, with what runs "
                                             "after the last op", abs=0.05)}


def trace(name: str, out: Path) -> tuple[Path, dict]:
    """Trace shape ``name`` into ``out``, run its ablations, and return the xplane and its truth record."""
    import jax
    import jax.profiler

    shape = SHAPES[name]
    compiles = CompileClock()
    work = shape.build(jax.default_backend() == "tpu")
    if shape.warm:
        work.iteration(-1, Clock())
    logdir = out / name
    shutil.rmtree(logdir, ignore_errors=True)
    clock = Clock()
    with jax.profiler.trace(str(logdir), profiler_options=_options(name, shape)):
        compiles.counting = True
        for i in range(shape.steps):
            clock.run(i, work.iteration, shape.annotate)
        compiles.counting = False
    session = logdir / "plugins" / "profile" / name
    for extra in session.glob("*.trace.json.gz"):
        extra.unlink()
    (written,) = session.glob("*.xplane.pb")
    xplane = written.rename(session / f"{HOST}.xplane.pb")
    ablations = {ablation: _time(iteration, shape.steps) for ablation, iteration in work.ablations.items()}
    truth = loop_truth(clock, ablations, compiles) | device_truth(xplane, clock)
    if work.extra:
        truth.update(work.extra(clock, ablations))
    if work.stop:
        work.stop()
    meta = {"description": shape.description, "cause": shape.cause, "annotated": shape.annotate,
            "python_tracer": shape.python_tracer, "device_kind": jax.devices()[0].device_kind,
            "platform": jax.default_backend(), "jax": jax.__version__, "xplane_bytes": xplane.stat().st_size,
            "iterations_ms": [round(ms, 3) for ms in clock.iterations]}
    return xplane, {"meta": meta, "truth": truth}


# --- driver -----------------------------------------------------------------------------------


def _pack(folder: Path, profiles: Path, truth: Path, groups: list[list[str]]) -> None:
    """Archive the shapes done so far into ``folder``: a new archive whenever the last one grows past PACK_BYTES."""
    def write(index: int, names: list[str]) -> Path:
        path = folder / f"fixtures-{index}.tar.gz"
        with tarfile.open(path, "w:gz") as archive:
            archive.add(truth, arcname="truth.json")
            for name in names:
                archive.add(profiles / name, arcname=f"profiles/{name}")
        return path

    if write(len(groups), groups[-1]).stat().st_size > PACK_BYTES and len(groups[-1]) > 1:
        write(len(groups), groups[-1][:-1])
        groups.append(groups[-1][-1:])
        groups[-2].pop()
        write(len(groups), groups[-1])


def write_expectations(truth_file: Path, profiles: Path, folder: Path, prefix: str) -> None:
    """Put each shape's truth into ``<folder>/<prefix><shape>.yaml``, keeping what is written above it."""
    import yaml

    for name, record in json.loads(truth_file.read_text()).items():
        path = folder / f"{prefix}{name}.yaml"
        xplane = (profiles / name / "plugins" / "profile" / name / f"{HOST}.xplane.pb").resolve()
        meta = record["meta"]
        head = text_above_truth(path, TRUTH_MARKER)
        if head is None:
            head = yaml.safe_dump({"fixture": f"{prefix}{name}",
                                   "source": str(xplane.relative_to(REPO) if xplane.is_relative_to(REPO) else xplane),
                                   "description": f"{meta['description']} ({meta['device_kind']}, JAX {meta['jax']})"},
                                  sort_keys=False, width=110)
        path.write_text(head + TRUTH_MARKER + yaml.safe_dump({"truth": record["truth"]}, sort_keys=False, width=110))
        print(f"{path}: {len(record['truth'])} truths")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="where the profiles go, one folder per shape")
    parser.add_argument("--truth", type=Path, help="the JSON file the truths go into (merged with what it holds)")
    parser.add_argument("--only", default=",".join(SHAPES))
    parser.add_argument("--platform", choices=("auto", "cpu"), default="auto")
    parser.add_argument("--pack", type=Path, help="also archive the profiles and truths done so far here")
    parser.add_argument("--write-expectations", type=Path, metavar="TRUTH_JSON",
                        help="write the truths of TRUTH_JSON into the expectation files, and nothing else")
    parser.add_argument("--profiles", type=Path, help="with --write-expectations: where the profiles are")
    parser.add_argument("--expectations", type=Path, default=REPO / "tests" / "quality" / "expectations")
    parser.add_argument("--prefix", default="tpu_v5e_", help="with --write-expectations: the fixture names' prefix")
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_expectations:
        write_expectations(args.write_expectations, args.profiles, args.expectations, args.prefix)
        return
    if not (args.out and args.truth):
        parser.error("--out and --truth are needed")
    names = [n for n in args.only.split(",") if n]
    if unknown := set(names) - set(SHAPES):
        parser.error(f"unknown shapes: {', '.join(sorted(unknown))}")
    if args.in_process:
        (name,) = names
        xplane, record = trace(name, args.out)
        truths = json.loads(args.truth.read_text()) if args.truth.exists() else {}
        args.truth.write_text(json.dumps({**truths, name: record}, indent=1) + "\n")
        size = record["meta"]["xplane_bytes"]
        flag = "  OVER THE SIZE AIM" if size > MAX_XPLANE_BYTES else ""
        print(f"{name}: {xplane} ({size:,} bytes){flag}\n" + json.dumps(
            {key: number["value"] for key, number in record["truth"].items()}), flush=True)
        return
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if args.platform == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    groups: list[list[str]] = [[]]
    for name in names:
        started = time.perf_counter()
        shape_env = env
        if args.platform == "cpu" and SHAPES[name].one_cpu_compute_thread:
            shape_env = env | {"XLA_FLAGS": f"{env.get('XLA_FLAGS', '')} --xla_cpu_multi_thread_eigen=false "
                                            "intra_op_parallelism_threads=1".strip()}
        done = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--truth", str(args.truth),
                               "--only", name, "--in-process"], env=shape_env)
        print(f"{name}: exit {done.returncode} after {time.perf_counter() - started:.0f} s", flush=True)
        if done.returncode == 0 and args.pack:
            groups[-1].append(name)
            _pack(args.pack, args.out, args.truth, groups)


if __name__ == "__main__":
    main()
