#!/usr/bin/env python3
"""Benchmark: the embedded bus's throughput, its queue in memory and in a SQLite file.

Publishes N messages (spread over ten ordering keys) to one subscription whose
handler does nothing, then delivers them all (``drain``), and prints messages/s
for each half. The file-backed queue is what ``mldiag up`` runs: every publish,
lease and acknowledgement is a committed write.

    python scripts/bench_bus.py --messages 5000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from mldiag.adapters.bus.inprocess import InProcessBus


def measure(messages: int, path: Path | str) -> tuple[float, float]:
    """Messages/s published and delivered."""
    bus = InProcessBus("bench", path=path)
    bus.subscribe("bench", lambda event: None, name="bench")
    started = time.perf_counter()
    for n in range(messages):
        bus.publish("bench", b'{"n": 1}', {"attribute": "value"}, ordering_key=f"key-{n % 10}")
    published = time.perf_counter() - started
    started = time.perf_counter()
    bus.drain(timeout=3600)
    return messages / published, messages / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for label, path in (("memory", ":memory:"), ("sqlite file", Path(folder) / "mldiag.sqlite3")):
            publish, deliver = measure(args.messages, path)
            print(f"{label:12} {args.messages} messages: published {publish:,.0f}/s, delivered {deliver:,.0f}/s")


if __name__ == "__main__":
    main()
