"""A JAX training loop that records its step time with the official SDK, exported over OTLP, then slows down.

Registers a run through ``DIAGON_BASE_URL``; the SDK (with its OpenTelemetry
packages installed) exports what ``record_metrics`` records to
``OTEL_EXPORTER_OTLP_ENDPOINT``, and serves the XProf profiler on
``--profiler-port``. Once a line arrives on stdin it trains; after ``--healthy``
steps every step sleeps 30 % longer, the way a job does when its input pipeline
or a noisy neighbour starts to cost it.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
from google_cloud_mldiagnostics import machinelearning_run, metrics
from google_cloud_mldiagnostics.custom_types.metric_types import MetricType


def train_step(weights: jax.Array, batch: jax.Array) -> jax.Array:
    loss_grad = jax.grad(lambda w: jnp.mean((batch @ w) ** 2))
    return weights - 0.01 * loss_grad(weights)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--gcs-path", required=True)
    parser.add_argument("--healthy", type=int, required=True)
    parser.add_argument("--slow", type=int, required=True)
    parser.add_argument("--pace", type=float, required=True, help="seconds a healthy step takes")
    parser.add_argument("--profiler-port", type=int, required=True)
    args = parser.parse_args()

    run = machinelearning_run(name=args.name, gcs_path=args.gcs_path, metrics_record_interval_sec=0)
    jax.profiler.start_server(args.profiler_port)
    print(f"registered run {run.name}", flush=True)
    sys.stdin.readline()  # the test registers the profiler server as a target and turns automatic capture on
    step = jax.jit(train_step)
    weights = jnp.ones((128, 16))
    batch = jax.random.normal(jax.random.key(0), (64, 128))
    for index in range(args.healthy + args.slow):
        started = time.perf_counter()
        weights = step(weights, batch).block_until_ready()
        time.sleep(args.pace * (1.3 if index >= args.healthy else 1.0))
        metrics.record_metrics([{"metric_name": MetricType.STEP_TIME, "value": time.perf_counter() - started}],
                               step=index)
    print("done", flush=True)


if __name__ == "__main__":
    main()
