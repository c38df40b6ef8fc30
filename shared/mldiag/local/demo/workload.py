"""The demo's training job: a small JAX model, the official SDK in self-hosted mode, a profiler server.

It runs as its own process (``python -m mldiag.local.demo.workload``), shaped like a
real job: ``machinelearning_run(...)`` registers the run with the control plane
at ``DIAGON_BASE_URL``, ``jax.profiler.start_server`` lets the control plane
capture it on demand, and the training loop never stops on its own. The demo
steers it with one command per line on stdin and follows it through one JSON
object per line on stdout:

* ``profile <session> <steps>`` — trace the next steps with the SDK's ``xprof()``
  (the programmatic capture); answers ``{"event": "profiled", ...}``.
* ``degrade <healthy steps>`` — start reporting every step time to the metrics
  ingest, and after that many healthy steps sleep 30 % longer per step;
  answers ``reporting`` and then ``slowed``.
* ``recover`` — back to the healthy pace; answers ``recovered``.
* ``stop`` (or the end of stdin) — leave; the SDK then marks the run COMPLETED.

Step times are reported only from ``degrade`` on, so the captures of the
earlier demo steps (which slow the steps they trace) do not open a degradation
of their own. Reports go out from a separate thread, in small batches, so the
HTTP calls never count in a step's time.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

PAUSE_S = 0.1  # a healthy step: a few ms of compute, then this wait (for the input pipeline, say)
SLOWDOWN = 1.3
REPORT_INTERVAL_S = 0.2


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def read_commands(commands: queue.Queue[list[str]]) -> None:
    for line in sys.stdin:
        if line.split():
            commands.put(line.split())
    commands.put(["stop"])


class MetricsReporter(threading.Thread):
    """Posts step times to ``:reportMetrics`` every :data:`REPORT_INTERVAL_S` (a daemon: dies with the job)."""

    def __init__(self, url: str, token: str):
        super().__init__(name="metrics-reporter", daemon=True)
        import requests

        self.url, self.session = url, requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.points: queue.Queue[dict[str, Any]] = queue.Queue()

    def record(self, step: int, seconds: float) -> None:
        self.points.put({"step": step, "stepTimeSeconds": seconds,
                         "time": datetime.now(UTC).isoformat().replace("+00:00", "Z")})

    def run(self) -> None:
        while True:
            time.sleep(REPORT_INTERVAL_S)
            batch = []
            while not self.points.empty():
                batch.append(self.points.get())
            if not batch:
                continue
            try:
                response = self.session.post(self.url, json={"points": batch}, timeout=10)
                response.raise_for_status()
            except Exception as error:  # a monitoring outage must never stop training
                print(f"metrics report failed: {error}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the run's display name")
    parser.add_argument("--gcs-path", required=True, help="where profiles go (the local bucket folder)")
    parser.add_argument("--profiler-port", type=int, required=True)
    parser.add_argument("--runs-url", required=True, help="the control plane's machineLearningRuns collection URL")
    parser.add_argument("--token", default="")
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    from google_cloud_mldiagnostics import machinelearning_run, xprof

    run = machinelearning_run(name=args.name, gcs_path=args.gcs_path, metrics_record_interval_sec=0)
    jax.profiler.start_server(args.profiler_port)

    @jax.jit
    def train_step(params: tuple[jax.Array, jax.Array], batch: jax.Array) -> tuple[jax.Array, jax.Array]:
        def loss(p: tuple[jax.Array, jax.Array]) -> jax.Array:
            hidden = jax.nn.relu(batch @ p[0])
            return jnp.mean((hidden @ p[1] - batch) ** 2)

        grads = jax.grad(loss)(params)
        return tuple(p - 1e-3 * g for p, g in zip(params, grads))

    first, second, data = jax.random.split(jax.random.key(0), 3)
    params = (jax.random.normal(first, (256, 512)) * 0.05, jax.random.normal(second, (512, 256)) * 0.05)
    batch = jax.random.normal(data, (128, 256))
    params = jax.block_until_ready(train_step(params, batch))  # compiled before anyone measures or captures
    emit("ready", run=run.name, port=args.profiler_port)

    commands: queue.Queue[list[str]] = queue.Queue()
    threading.Thread(target=read_commands, args=(commands,), name="commands", daemon=True).start()
    reporter = MetricsReporter(f"{args.runs_url}/{run.name}:reportMetrics", args.token)
    profiler = xprof()
    profiling: tuple[str, int] | None = None  # (session, last step)
    healthy_until: int | None = None  # report from here; slow down after
    slow = False
    step = 0
    while True:
        while not commands.empty():
            command, *rest = commands.get()
            if command == "stop":
                return
            if command == "profile":
                profiler.start(session_id=rest[0])
                profiling = (rest[0], step + int(rest[1]))
            elif command == "degrade":
                healthy_until = step + int(rest[0])
                if not reporter.is_alive():
                    reporter.start()
                emit("reporting", step=step)
            elif command == "recover":
                slow, healthy_until = False, None
                emit("recovered", step=step)
        started = time.perf_counter()
        params = jax.block_until_ready(train_step(params, batch))
        time.sleep(PAUSE_S * (SLOWDOWN if slow else 1.0))
        step += 1
        if reporter.is_alive():
            reporter.record(step, time.perf_counter() - started)
        if profiling and step >= profiling[1]:
            profiler.stop()
            emit("profiled", session=profiling[0], step=step)
            profiling = None
        if healthy_until is not None and step >= healthy_until and not slow:
            slow = True
            emit("slowed", step=step)


if __name__ == "__main__":
    main()
