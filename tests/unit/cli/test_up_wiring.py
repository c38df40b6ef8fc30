"""How ``mldiag up`` binds the functions to its in-process bus: as Terraform subscribes them, on every bucket."""

from __future__ import annotations

from mldiag.local.bucket_watcher import notification
import os

from mldiag.config import ANALYSIS_REQUESTS, BUCKET_NOTIFICATIONS, CAPTURE_REQUESTS, HOST_ANALYSIS_REQUESTS
from mldiag.config import EMBEDDED_SUBSCRIBERS, TOPIC_SUBSCRIBERS
from mldiag.local.server import host_analysis_slots, wire_functions


def test_every_topic_has_its_function_and_analyses_run_one_at_a_time(embedded):
    wire_functions(embedded, embedded.bus)
    for topic, function in TOPIC_SUBSCRIBERS.items():
        also = [EMBEDDED_SUBSCRIBERS[topic]] if topic in EMBEDDED_SUBSCRIBERS else []
        assert [s.name for s in embedded.bus.subscriptions(topic)] == [function, *also]
    (analysis,) = embedded.bus.subscriptions(ANALYSIS_REQUESTS)
    assert analysis.max_in_flight == 1  # analyses share this machine's memory
    (capture,) = embedded.bus.subscriptions(CAPTURE_REQUESTS)
    assert capture.max_in_flight == 0
    (hosts,) = embedded.bus.subscriptions(HOST_ANALYSIS_REQUESTS)
    assert hosts.max_in_flight == host_analysis_slots()


def test_host_analyses_run_one_per_core_as_memory_allows(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 10 * 1024**3 // 4096}  # 10 GiB: two host analyses of 4 GiB
    monkeypatch.setattr(os, "sysconf", pages.__getitem__)
    assert host_analysis_slots() == 2
    pages["SC_PHYS_PAGES"] = 1024**3 // 4096
    assert host_analysis_slots() == 1
    pages["SC_PHYS_PAGES"] = 512 * 1024**3 // 4096
    assert host_analysis_slots() == 16


def test_files_finalized_in_any_bucket_register_their_session(embedded):
    wire_functions(embedded, embedded.bus)
    for bucket in ("profiles", "other"):
        info = embedded.blobs.write_bytes(f"gs://{bucket}/exp/run-1/plugins/profile/s1/host-0.xplane.pb", b"x")
        embedded.bus.publish(BUCKET_NOTIFICATIONS, *notification(info))
    embedded.bus.drain()
    runs = {run["artifacts"]["gcsPath"] for run in embedded.store.query("machineLearningRuns")}
    assert runs == {"gs://profiles/exp", "gs://other/exp"}
