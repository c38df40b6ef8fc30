#!/usr/bin/env python3
"""Benchmark: register_session throughput and latency against a bare write + publish.

Feeds N finalize events (a share of them redelivered duplicates, shuffled) to
the real handler and, in the same run, the floor: one document write plus one
publish per event on the same adapters. Prints events/s and p50/p99 latency
for both and their ratio. Runs on the embedded backend, and on the emulators
too when FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST are set.

    python scripts/bench_register.py --events 10000 --duplicates 0.3
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mldiag import bootstrap
from mldiag.config import ANALYSIS_REQUESTS, Settings
from mldiag.domain.envelopes import encode_json, storage_finalized_event
from mldiag.entrypoints import handlers


def _events(count: int, duplicates: float, hosts: int, seed: int = 7) -> list:
    unique = int(count * (1 - duplicates))
    events = [
        storage_finalized_event({
            "bucket": "bench-profiles", "generation": "1", "size": "123456",
            "name": f"exp/run{i // (hosts * 50)}/plugins/profile/s{i // hosts}/host{i % hosts}.xplane.pb",
        })
        for i in range(unique)
    ]
    rng = random.Random(seed)
    events += [rng.choice(events) for _ in range(count - unique)]
    rng.shuffle(events)
    return events


def _measure(label: str, events: list, work: Callable[[object], object]) -> dict[str, float]:
    latencies = []
    started = time.perf_counter()
    for event in events:
        begin = time.perf_counter()
        work(event)
        latencies.append(time.perf_counter() - begin)
    elapsed = time.perf_counter() - started
    quantiles = statistics.quantiles(latencies, n=100)
    result = {"events_per_s": len(events) / elapsed, "p50_ms": quantiles[49] * 1e3, "p99_ms": quantiles[98] * 1e3}
    print(f"  {label:<22} {result['events_per_s']:9.1f} events/s   p50 {result['p50_ms']:7.2f} ms   "
          f"p99 {result['p99_ms']:7.2f} ms")
    return result


def bench(settings: Settings, events: list) -> None:
    services = bootstrap.build(settings)
    print(f"{settings.backend} backend ({len(events)} events):")

    def floor(event) -> None:
        services.store.set("benchFloor", str(event["id"]).replace("/", ":"), dict(event.get_data()))
        services.bus.publish(ANALYSIS_REQUESTS, encode_json({"id": event["id"]}))

    base = _measure("floor (write+publish)", events, floor)
    handler = _measure("register_session", events, lambda e: handlers.register_session(services, e))
    print(f"  ratio: register_session runs at {handler['events_per_s'] / base['events_per_s']:.2f}x the floor's "
          f"throughput; p50 {handler['p50_ms'] / base['p50_ms']:.1f}x, p99 {handler['p99_ms'] / base['p99_ms']:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--duplicates", type=float, default=0.3)
    parser.add_argument("--hosts", type=int, default=4, help="host files per session")
    args = parser.parse_args()
    events = _events(args.events, args.duplicates, args.hosts)
    with tempfile.TemporaryDirectory() as data_dir:
        bench(Settings(data_dir=Path(data_dir), bucket="bench-profiles", log_format="json"), events)
    if os.environ.get("FIRESTORE_EMULATOR_HOST") and os.environ.get("PUBSUB_EMULATOR_HOST"):
        bench(Settings(backend="gcp", project=os.environ.get("MLDIAG_PROJECT", "mldiag-bench"),
                       bucket="bench-profiles"), events)
    else:
        print("emulators: skipped (set FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST, e.g. from scripts/devstack)")


if __name__ == "__main__":
    import logging

    from mldiag.logs import configure

    configure("json", level=logging.ERROR)
    main()
