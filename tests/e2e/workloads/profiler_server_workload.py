"""A small JAX training loop serving the XProf profiler on ``--port``, for the capture tests.

Prints ``serving <port>`` once the profiler server listens, then trains until
killed (or ``--seconds`` pass), pausing a little between steps so that several
of these share two CPU cores with the rest of the test.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=600.0)
    args = parser.parse_args()

    jax.profiler.start_server(args.port)

    @jax.jit
    def train_step(weights: jax.Array, batch: jax.Array) -> jax.Array:
        loss = lambda w: jnp.mean(jnp.tanh(batch @ w) ** 2)  # noqa: E731
        return weights - 0.01 * jax.grad(loss)(weights)

    key = jax.random.PRNGKey(0)
    weights = jax.random.normal(key, (256, 256))
    batch = jax.random.normal(key, (64, 256))
    train_step(weights, batch).block_until_ready()  # compiled before anyone captures
    print(f"serving {args.port}", flush=True)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        weights = train_step(weights, batch)
        weights.block_until_ready()
        time.sleep(0.005)


if __name__ == "__main__":
    main()
