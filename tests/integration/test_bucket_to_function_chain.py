"""An object written to the bucket reaches a function as Eventarc's finalize CloudEvent.

The real chain, nothing called directly: fake-gcs-server publishes the
finalize notification to the Pub/Sub emulator, a push subscription (made the
way the devstack makes them for Terraform's triggers) posts it to the
functions host, whose Eventarc adapter hands the CloudEvent to a
functions-framework app. The function is test-only (functions/record_event
beside this file); it stores what it receives in Firestore.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from google.cloud import storage

from mldiag.bootstrap import build
from mldiag.domain.envelopes import STORAGE_FINALIZED
from mldiag.ports import Where

pytestmark = pytest.mark.emulator


@pytest.fixture
def bucket(devstack) -> Iterator[str]:
    """A bucket of this test's own, so that only its objects trigger the test function."""
    created = storage.Client(project=devstack["MLDIAG_PROJECT"]).create_bucket(f"chain-{uuid.uuid4().hex[:12]}")
    yield created.name
    created.delete(force=True)


def received_for(store, bucket: str, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        received = store.query("receivedEvents", where=[Where("data.bucket", "==", bucket)])
        if received:
            return received
        time.sleep(0.2)
    return []


def test_finalized_object_arrives_as_eventarc_cloud_event(devstack, bucket, host_test_function):
    host_test_function(devstack["MLDIAG_PROJECT"], "record_event", finalized_bucket=bucket)
    services = build()
    name = "run-1/plugins/profile/2026_01_01_00_00_00/host-0.xplane.pb"
    written = services.blobs.write_bytes(f"gs://{bucket}/{name}", b"\x0aprofile-bytes")

    received = received_for(services.store, bucket)

    assert len(received) == 1, f"expected one finalize event at the function, got {received}"
    attributes, data = received[0]["attributes"], received[0]["data"]
    assert attributes["type"] == STORAGE_FINALIZED
    assert attributes["source"] == f"//storage.googleapis.com/projects/_/buckets/{bucket}"
    assert attributes["subject"] == f"objects/{name}"
    assert attributes["specversion"] == "1.0" and attributes["id"] and attributes["time"]
    assert data["bucket"] == bucket and data["name"] == name
    assert data["generation"] == written.generation
    assert data["size"] == str(written.size)
