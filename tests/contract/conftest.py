"""Every contract test runs against every adapter of its port.

The embedded adapters (SQLite, local directory, in-process bus) always run.
The Google Cloud adapters run against the devstack's emulators when their
variables are set (``eval "$(scripts/devstack)"``); with
``MLDIAG_REQUIRE_EMULATORS=1``, as in CI, a missing variable fails those tests
instead of quietly leaving them out.

Isolation: the emulator-backed tests use a project of their own; Firestore is
emptied before each test, each test gets its own bucket and its own topic.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from mldiag.adapters.bus.inprocess import InProcessBus
from mldiag.adapters.blobs.local import LocalBlobs
from mldiag.adapters.store.sqlite import SqliteStore
from mldiag.domain.envelopes import Message, message_from_cloud_event
from mldiag.ports import BlobStore, DocumentStore, MessageBus

PROJECT = "mldiag-contract-tests"
REQUIRE_EMULATORS = os.environ.get("MLDIAG_REQUIRE_EMULATORS") == "1"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def adapters(embedded: str | None, emulated: str, variable: str) -> list:
    """Fixture params: the embedded adapter, plus the emulated one when it can (or must) run."""
    params: list = [embedded] if embedded else []
    if os.environ.get(variable) or REQUIRE_EMULATORS:
        params.append(pytest.param(emulated, marks=pytest.mark.emulator))
    return params


def emulator_host(variable: str) -> str:
    host = os.environ.get(variable)
    if not host:
        pytest.fail(f"MLDIAG_REQUIRE_EMULATORS=1 but {variable} is not set: start the emulators with "
                    f"`eval \"$(scripts/devstack)\"` (CI: .ci/run does it)", pytrace=False)
    return host


# A file made before the embedded store's table had rowids (its documents in a WITHOUT ROWID table).
_WITHOUT_ROWID = """
CREATE TABLE documents (collection TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL,
                        PRIMARY KEY (collection, key)) WITHOUT ROWID;
"""


@pytest.fixture(params=["sqlite", "sqlite-without-rowid", *adapters(None, "firestore", "FIRESTORE_EMULATOR_HOST")])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> DocumentStore:
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "store.sqlite3")
    if request.param == "sqlite-without-rowid":
        with contextlib.closing(sqlite3.connect(tmp_path / "earlier.sqlite3")) as earlier:
            earlier.executescript(_WITHOUT_ROWID)
        return SqliteStore(tmp_path / "earlier.sqlite3")
    from mldiag.adapters.store.firestore import FirestoreStore

    host = emulator_host("FIRESTORE_EMULATOR_HOST")
    documents = f"http://{host}/emulator/v1/projects/{PROJECT}/databases/(default)/documents"
    requests.delete(documents, timeout=10).raise_for_status()
    return FirestoreStore(PROJECT)


@pytest.fixture
def bucket() -> str:
    """A fresh bucket URI for this test (``gs://...``, no trailing slash)."""
    return f"gs://{unique('contract')}"


@pytest.fixture(params=adapters("local", "gcs", "STORAGE_EMULATOR_HOST"))
def blobs(request: pytest.FixtureRequest, tmp_path: Path, bucket: str) -> Iterator[BlobStore]:
    if request.param == "local":
        yield LocalBlobs(tmp_path / "blobs")
        return
    from google.cloud import storage

    from mldiag.adapters.blobs.gcs import GcsBlobs

    emulator_host("STORAGE_EMULATOR_HOST")
    created = storage.Client(project=PROJECT).create_bucket(bucket.removeprefix("gs://"))
    yield GcsBlobs(PROJECT)
    created.delete(force=True)


@dataclass
class Subscribed:
    """A bus, a topic of its own, and what a subscription to that topic has received."""

    bus: MessageBus
    topic: str
    receive: Callable[[int], list[Message]]


@pytest.fixture(params=adapters("inprocess", "pubsub", "PUBSUB_EMULATOR_HOST"))
def subscribed(request: pytest.FixtureRequest) -> Iterator[Subscribed]:
    topic = unique("contract")
    if request.param == "inprocess":
        yield _inprocess_subscription(topic)
    else:
        emulator_host("PUBSUB_EMULATOR_HOST")
        yield from _pubsub_subscription(topic)


def _inprocess_subscription(topic: str) -> Subscribed:
    bus = InProcessBus(PROJECT)
    received: list[Message] = []
    bus.subscribe(topic, lambda event: received.append(message_from_cloud_event(event)))

    def receive(count: int) -> list[Message]:
        bus.drain()
        return list(received)

    return Subscribed(bus, topic, receive)


@pytest.fixture(params=adapters(None, "pubsub", "PUBSUB_EMULATOR_HOST"))
def pubsub_bus() -> MessageBus:
    """PubSubBus alone, for what only Pub/Sub does (topics must exist)."""
    from mldiag.adapters.bus.pubsub import PubSubBus

    emulator_host("PUBSUB_EMULATOR_HOST")
    return PubSubBus(PROJECT)


def _pubsub_subscription(topic: str) -> Iterator[Subscribed]:
    from google.cloud import pubsub_v1

    from mldiag.adapters.bus.pubsub import PubSubBus

    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic_path = publisher.create_topic(name=publisher.topic_path(PROJECT, topic)).name
    subscription = subscriber.create_subscription(
        request={"name": subscriber.subscription_path(PROJECT, topic), "topic": topic_path,
                 "enable_message_ordering": True}
    ).name

    def receive(count: int) -> list[Message]:
        """Pull until ``count`` messages came, or 10 s passed."""
        received: list[Message] = []
        deadline = time.monotonic() + 10
        while len(received) < count and time.monotonic() < deadline:
            response = subscriber.pull(subscription=subscription, max_messages=count, timeout=5)
            for pulled in response.received_messages:
                message = pulled.message
                received.append(Message(message.data, dict(message.attributes), message.message_id,
                                        ordering_key=message.ordering_key))
            if response.received_messages:
                subscriber.acknowledge(subscription=subscription,
                                       ack_ids=[pulled.ack_id for pulled in response.received_messages])
        return received

    yield Subscribed(PubSubBus(PROJECT), topic, receive)
    subscriber.delete_subscription(subscription=subscription)
    publisher.delete_topic(topic=topic_path)
