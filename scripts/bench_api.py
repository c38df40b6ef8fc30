#!/usr/bin/env python3
"""Benchmark: the API of ``mldiag up`` under many concurrent clients, against one client alone.

Starts ``mldiag up`` on 127.0.0.1 (a free port, a fresh data folder), then sends
the same mix of reads and writes twice: one client after another (the
baseline), then from ``--clients`` threads released at once, each on a new
connection per request, as independent clients would. Prints p50/p99 latency
and the error count (connection errors, 5xx, and any answer the mix does not
expect) for both, and the concurrent run's figures as ratios of the baseline's.
Every request has a timeout and the whole run a deadline.

    python scripts/bench_api.py --clients 200 --requests 3
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mldiag.config import Settings

BASE = "/v1alpha/projects/{project}/locations/{location}/machineLearningRuns"
REQUEST_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: dict | None = None
    expect: int = 200


@dataclass
class Outcome:
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, seconds: float, error: str) -> None:
        with self.lock:
            self.latencies.append(seconds)
            if error:
                self.errors[error] = self.errors.get(error, 0) + 1

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def quantile_ms(self, q: int) -> float:
        return statistics.quantiles(self.latencies, n=100)[q - 1] * 1e3 if len(self.latencies) > 1 else 0.0


def mix(runs: str, client: int, index: int) -> Call:
    """The ``index``-th call of ``client``: reads and writes in the proportions a busy deployment sees."""
    run_id = f"bench-{client}-{index}"
    calls = [
        Call("GET", f"{runs}?page_size=20"),
        Call("GET", f"{runs}/seed"),
        Call("GET", f"{runs}/seed/profilerSessions"),
        Call("POST", f"{runs}?machine_learning_run_id={run_id}",
             {"displayName": run_id, "artifacts": {"gcsPath": "gs://mldiag-profiles/bench"}}),
        Call("PATCH", "/v1/machineLearningRuns?update_mask=display_name,creator,workload.workload_id"
                      "&allow_missing=true",
             {"logicalId": run_id, "displayName": run_id, "creator": "CREATOR_MANUAL",
              "workload": {"workloadId": run_id}}),
        Call("POST", f"{runs}/seed:reportMetrics",
             {"points": [{"step": client * 1000 + index, "stepTimeSeconds": 0.2}]}),
    ]
    return calls[(client + index) % len(calls)]


def send(port: int, call: Call, outcome: Outcome) -> None:
    started = time.perf_counter()
    error = ""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    try:
        body = json.dumps(call.body) if call.body is not None else None
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(call.method, call.path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != call.expect:
            error = f"HTTP {response.status} for {call.method}"
    except OSError as failure:
        error = type(failure).__name__
    finally:
        connection.close()
    outcome.record(time.perf_counter() - started, error)


def sequential(port: int, runs: str, count: int) -> Outcome:
    outcome = Outcome()
    for index in range(count):
        send(port, mix(runs, 0, index), outcome)
    return outcome


def concurrent(port: int, runs: str, clients: int, requests: int, deadline_s: float) -> Outcome:
    outcome = Outcome()
    release = threading.Barrier(clients)
    stop_at = time.monotonic() + deadline_s

    def client(number: int) -> None:
        release.wait()
        for index in range(requests):
            if time.monotonic() > stop_at:
                outcome.record(0.0, "not sent before the deadline")
                continue
            send(port, mix(runs, number + 1, index), outcome)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(stop_at - time.monotonic(), 0) + REQUEST_TIMEOUT_S)
    return outcome


@contextmanager
def control_plane(data_dir: Path) -> Iterator[tuple[int, str]]:
    """``mldiag up`` on a free port; yields its port and its runs collection path."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MLDIAG_LOG_FORMAT": "json"}
    for variable in ("MLDIAG_BACKEND", "MLDIAG_API_TOKEN", "MLDIAG_AUTH_AUDIENCE"):  # the open local default
        env.pop(variable, None)
    command = [str(Path(sys.executable).parent / "mldiag"), "up", "--data", str(data_dir), "--port", "0"]
    with (data_dir.parent / "up.log").open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        banner, deadline = "", time.monotonic() + START_TIMEOUT_S
        while "Ctrl-C" not in banner:
            line = process.stdout.readline()
            if (not line and process.poll() is not None) or time.monotonic() > deadline:
                sys.exit(f"mldiag up did not start; see {data_dir.parent / 'up.log'}")
            banner += line
        port = int(re.search(r"DIAGON_BASE_URL=http://127\.0\.0\.1:(\d+)", banner)[1])
        settings = Settings.from_env(env)
        yield port, BASE.format(project=settings.project, location=settings.location)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _line(label: str, outcome: Outcome, seconds: float) -> str:
    return (f"  {label:<28} {len(outcome.latencies):5d} requests in {seconds:6.2f} s   "
            f"p50 {outcome.quantile_ms(50):8.2f} ms   p99 {outcome.quantile_ms(99):8.2f} ms   "
            f"errors {outcome.error_count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--requests", type=int, default=3, help="requests per concurrent client")
    parser.add_argument("--baseline", type=int, default=200, help="requests of the single client")
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds the concurrent run may take")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-api-") as scratch, \
            control_plane(Path(scratch) / "data") as (port, runs):
        seeded = Outcome()
        send(port, Call("POST", f"{runs}?machine_learning_run_id=seed", {}), seeded)
        if seeded.error_count:
            sys.exit(f"could not create the seed run: {seeded.errors}")
        print(f"mldiag up on 127.0.0.1:{port}; mix: list runs, get run, list sessions, create run, "
              "SDK upsert, report metrics")
        started = time.perf_counter()
        base = sequential(port, runs, args.baseline)
        print(_line("1 client (baseline)", base, time.perf_counter() - started))
        started = time.perf_counter()
        loaded = concurrent(port, runs, args.clients, args.requests, args.deadline)
        print(_line(f"{args.clients} concurrent clients", loaded, time.perf_counter() - started))
        print(f"  ratio to the baseline: p50 {loaded.quantile_ms(50) / base.quantile_ms(50):.1f}x, "
              f"p99 {loaded.quantile_ms(99) / base.quantile_ms(99):.1f}x; errors "
              f"{loaded.error_count}/{len(loaded.latencies)} "
              f"({100 * loaded.error_count / max(len(loaded.latencies), 1):.2f} %)")
        for error, count in sorted(loaded.errors.items()):
            print(f"    {count:5d} × {error}")


if __name__ == "__main__":
    main()
