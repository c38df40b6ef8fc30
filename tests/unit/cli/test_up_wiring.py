"""How ``mldiag up`` binds the functions to its in-process bus: as Terraform subscribes them, on every bucket."""

from __future__ import annotations

from mldiag.local.bucket_watcher import notification
from mldiag.config import ANALYSIS_REQUESTS, BUCKET_NOTIFICATIONS, CAPTURE_REQUESTS
from mldiag.config import TOPIC_SUBSCRIBERS
from mldiag.local.server import wire_functions


def test_every_topic_has_its_function_and_analyses_run_one_at_a_time(embedded):
    wire_functions(embedded, embedded.bus)
    for topic, function in TOPIC_SUBSCRIBERS.items():
        assert [s.name for s in embedded.bus.subscriptions(topic)] == [function]
    (analysis,) = embedded.bus.subscriptions(ANALYSIS_REQUESTS)
    assert analysis.max_in_flight == 1  # analyses share this machine's memory
    (capture,) = embedded.bus.subscriptions(CAPTURE_REQUESTS)
    assert capture.max_in_flight == 0


def test_files_finalized_in_any_bucket_register_their_session(embedded):
    wire_functions(embedded, embedded.bus)
    for bucket in ("profiles", "other"):
        info = embedded.blobs.write_bytes(f"gs://{bucket}/exp/run-1/plugins/profile/s1/host-0.xplane.pb", b"x")
        embedded.bus.publish(BUCKET_NOTIFICATIONS, *notification(info))
    embedded.bus.drain()
    runs = {run["artifacts"]["gcsPath"] for run in embedded.store.query("machineLearningRuns")}
    assert runs == {"gs://profiles/exp", "gs://other/exp"}
