#!/usr/bin/env python3
"""Benchmark a multi-host session analysed by fan-out against the same session analysed in one process.

An 8-host session (``--hosts``; one profile copied under each host name) is
registered as a programmatic session on the embedded backend, in a fresh data
folder, and analysed twice by the real handlers on the embedded bus:

* **fan-out**: ``analyze_session`` fans the session out, ``analyze_host`` runs
  once per host (``--slots`` at once, the pool ``mldiag up`` sizes to the
  machine by default), the last host asks for the merge;
* **one process**: the fan-out threshold above the host count, so one worker
  analyses every host file, as a session below the threshold is.

Printed: each host analysis's wall time, the merge's (its overhead over the
hosts), the end-to-end wall of both ways, and the messages each topic carried.
In the cloud each host has an instance of its own, so the fan-out's end-to-end
wall is about the slowest host plus the merge; on one machine it is bounded by
the slots.

Usage::

    .venv/bin/python scripts/bench_fanout.py                      # 8 copies of tests/fixtures' input_bound
    .venv/bin/python scripts/bench_fanout.py --profile big.xplane.pb --hosts 8 --slots 4
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PROFILE = next((ROOT / "tests" / "fixtures" / "profiles" / "input_bound").rglob("*.xplane.pb"))


@dataclass
class Timings:
    """Wall seconds of each delivery, by function, and the messages each topic carried."""

    deliveries: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    messages: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, function: str, what: str, seconds: float) -> None:
        with self.lock:
            self.deliveries.setdefault(function, []).append((what, seconds))


def _timed(services, function: str, timings: Timings):
    from mldiag.domain.envelopes import message_from_cloud_event
    from mldiag.entrypoints import handlers

    handler = handlers.EVENT_HANDLERS[function]

    def deliver(event) -> object:
        payload = message_from_cloud_event(event).json()
        what = payload.get("host") or ("merge" if payload.get("merge") else "request")
        started = time.perf_counter()
        try:
            return handler(services, event)
        finally:
            timings.record(function, what, time.perf_counter() - started)

    return deliver


def _analyse(profile: Path, hosts: int, slots: int, fan_out: bool, data_dir: Path) -> tuple[float, Timings, str]:
    """Register and analyse one session of ``hosts`` copies of ``profile``; returns the wall seconds from the
    last file's registration to the session's analysis ending, the timings and the analysis state."""
    from mldiag import bootstrap
    from mldiag.config import TOPIC_SUBSCRIBERS, Settings
    from mldiag.domain import AnalysisState, Kind, MachineLearningRun, ProfilerSession
    from mldiag.domain.envelopes import storage_finalized_event
    from mldiag.domain.names import LocationName
    from mldiag.entrypoints import handlers

    settings = Settings(data_dir=data_dir, project="bench", location="local", bucket="profiles",
                        fan_out_min_hosts=2 if fan_out else hosts + 1)
    services, bus = bootstrap.build_hosted(settings)
    timings = Timings()
    for topic, function in TOPIC_SUBSCRIBERS.items():
        bus.subscribe(topic, _timed(services, function, timings), name=function,
                      max_in_flight=slots if function == "analyze_host" else 1 if function == "analyze_session" else 0)
    run = services.runs.create(MachineLearningRun(
        name=str(LocationName(settings.project, settings.location).run("bench")),
        artifacts={"gcsPath": settings.bucket_uri}))
    name = f"{run.name}/profilerSessions/s1"
    host_names = [f"host-{n}" for n in range(hosts)]
    services.sessions.create(ProfilerSession(name=name, kind=Kind.KIND_PROGRAMMATIC, profiler_targets=host_names))
    data = profile.read_bytes()
    # The files are registered by calling the bucket trigger's handler, as Eventarc would.
    bus.start(workers=slots + 4)
    try:
        for host in host_names:
            uri = f"{settings.bucket_uri}/bench/plugins/profile/s1/{host}.xplane.pb"
            written = services.blobs.write_bytes(uri, data)
            handlers.register_session(services, storage_finalized_event({
                "bucket": settings.bucket, "name": uri.removeprefix(f"{settings.bucket_uri}/"),
                "generation": written.generation, "size": str(written.size)}))
        started = time.perf_counter()
        while services.sessions.get(name).analysis.state not in (AnalysisState.DONE, AnalysisState.FAILED):
            time.sleep(0.05)
        seconds = time.perf_counter() - started
    finally:
        bus.stop()
    timings.messages.update({topic: len(messages) for topic, messages in bus.published.items()})
    return seconds, timings, services.sessions.get(name).analysis.state.value


def main() -> None:
    from mldiag import logs
    from mldiag.local.server import host_analysis_slots

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", type=Path, default=DEFAULT_PROFILE, help="the .xplane.pb each host gets")
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--slots", type=int, default=host_analysis_slots(), help="host analyses at once")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.hosts < 2:
        parser.error("--hosts: a fan-out needs at least 2 hosts")
    logs.configure("json", logging.WARNING)

    with tempfile.TemporaryDirectory(prefix="mldiag-bench-fanout-") as scratch:
        fan_wall, fan, fan_state = _analyse(args.profile, args.hosts, args.slots, True, Path(scratch) / "fan-out")
        one_wall, one, one_state = _analyse(args.profile, args.hosts, args.slots, False, Path(scratch) / "one")
    host_walls = [seconds for _, seconds in fan.deliveries.get("analyze_host", [])]
    merge = [seconds for what, seconds in fan.deliveries.get("analyze_session", []) if what == "merge"]
    figures = {
        "profile": str(args.profile), "profile_bytes": args.profile.stat().st_size, "hosts": args.hosts,
        "slots": args.slots,
        "fan_out": {"state": fan_state, "wall_s": round(fan_wall, 2),
                    "host_wall_s": {"median": round(statistics.median(host_walls), 2),
                                    "max": round(max(host_walls), 2)} if host_walls else None,
                    "merge_wall_s": round(sum(merge), 2), "merges": len(merge),
                    "messages": dict(sorted(fan.messages.items()))},
        "one_process": {"state": one_state, "wall_s": round(one_wall, 2),
                        "messages": dict(sorted(one.messages.items()))},
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{args.hosts} hosts x {args.profile.name} ({figures['profile_bytes'] / 1e6:.1f} MB), "
          f"{args.slots} host analyses at once")
    if host_walls:
        print(f"  per-host wall      median {statistics.median(host_walls):.2f} s, max {max(host_walls):.2f} s "
              f"({len(host_walls)} host analyses)")
    print(f"  merge              {sum(merge):.2f} s ({len(merge)} merge{'s' if len(merge) != 1 else ''})")
    print(f"  fan-out end to end {fan_wall:.2f} s ({fan_state})")
    print(f"  one process        {one_wall:.2f} s ({one_state})")
    print(f"  messages (fan-out) {json.dumps(figures['fan_out']['messages'])}")


if __name__ == "__main__":
    sys.exit(main())
