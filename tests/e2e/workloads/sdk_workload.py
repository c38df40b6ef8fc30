"""A small JAX training loop instrumented with the official google-cloud-mldiagnostics SDK.

Registers a run through ``DIAGON_BASE_URL`` (the self-hosted control plane),
optionally profiles a few steps with the SDK's ``xprof()`` and optionally fails
the way a crashing job does (an unhandled exception).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from google_cloud_mldiagnostics import machinelearning_run, xprof


def train_step(weights: jax.Array, batch: jax.Array) -> jax.Array:
    loss_grad = jax.grad(lambda w: jnp.mean((batch @ w) ** 2))
    return weights - 0.01 * loss_grad(weights)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--gcs-path", required=True)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()

    run = machinelearning_run(name=args.name, gcs_path=args.gcs_path, metrics_record_interval_sec=0)
    print(f"registered run {run.name}", flush=True)
    step = jax.jit(train_step)
    weights = jnp.ones((128, 16))
    batch = jax.random.normal(jax.random.key(0), (64, 128))
    profiler = xprof() if args.profile else None
    for index in range(6):
        if profiler and index == 2:
            profiler.start(session_id="steps-2-4")
        weights = step(weights, batch).block_until_ready()
        if profiler and index == 4:
            profiler.stop()
    if args.fail:
        raise RuntimeError("simulated crash after 6 steps")


if __name__ == "__main__":
    main()
