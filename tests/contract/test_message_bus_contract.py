"""The MessageBus contract: what a subscriber receives from InProcessBus and from PubSubBus.

PubSubBus is checked through a pull subscription on the emulator; push delivery,
retries and dead-lettering on Pub/Sub are the emulator's own (see
tests/integration). InProcessBus plays Pub/Sub's part itself, so its retry and
dead-letter behaviour is checked here against the attributes Pub/Sub sets.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import threading
import time
import uuid

import pytest

from mldiag.adapters.bus.inprocess import InProcessBus
from mldiag.domain.envelopes import Message, message_from_cloud_event
from mldiag.domain.errors import NotFound

PROJECT = "p"


def test_publish_delivers_data_and_attributes(subscribed):
    message_id = subscribed.bus.publish(subscribed.topic, b'{"run": "r1"}', {"kind": "analysis", "run": "r1"})
    assert message_id

    [received] = subscribed.receive(1)
    assert received.data == b'{"run": "r1"}'
    assert received.attributes == {"kind": "analysis", "run": "r1"}
    assert received.message_id == message_id
    assert received.json() == {"run": "r1"}


def test_ordering_key_travels_and_keeps_order(subscribed):
    ids = [subscribed.bus.publish(subscribed.topic, str(n).encode(), ordering_key="run-r1") for n in range(3)]

    received = subscribed.receive(3)
    assert [message.message_id for message in received] == ids
    assert [message.data for message in received] == [b"0", b"1", b"2"]
    assert {message.ordering_key for message in received} == {"run-r1"}


def test_message_without_attributes(subscribed):
    subscribed.bus.publish(subscribed.topic, b"{}")
    [received] = subscribed.receive(1)
    assert (received.data, received.attributes, received.ordering_key) == (b"{}", {}, "")


def test_pubsub_refuses_a_topic_that_does_not_exist(pubsub_bus):
    with pytest.raises(NotFound, match="does not exist"):
        pubsub_bus.publish(f"missing-{uuid.uuid4().hex}", b"{}", ordering_key="k")
    with pytest.raises(NotFound):  # the failed ordering key was resumed, not left paused
        pubsub_bus.publish(f"missing-{uuid.uuid4().hex}", b"{}", ordering_key="k")


class FailingHandler:
    """Fails its first ``failures`` calls; records when each delivery came and its attempt number."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls: list[tuple[float, int]] = []

    def __call__(self, event) -> None:
        self.calls.append((time.monotonic(), message_from_cloud_event(event).delivery_attempt))
        if len(self.calls) <= self.failures:
            raise RuntimeError(f"failure {len(self.calls)}")


def test_inprocess_retries_with_exponential_backoff():
    bus = InProcessBus(PROJECT, max_attempts=5, min_backoff=0.02, max_backoff=1.0)
    handler = FailingHandler(failures=2)
    bus.subscribe("analysis-requests", handler)
    bus.publish("analysis-requests", b"{}")

    assert bus.drain(timeout=10) == 3
    assert [attempt for _, attempt in handler.calls] == [1, 2, 3]
    (first, _), (second, _), (third, _) = handler.calls
    assert second - first >= 0.02 and third - second >= 0.04, "backoff doubles from min_backoff"
    assert bus.dead_letters == []


def test_inprocess_dead_letters_after_max_attempts_like_pubsub():
    bus = InProcessBus(PROJECT, max_attempts=3, min_backoff=0.001, max_backoff=0.01)
    handler = FailingHandler(failures=100)
    subscription = bus.subscribe("analysis-requests", handler, name="analyze-session")
    dead = []
    bus.subscribe("analysis-requests-dead-letter", lambda event: dead.append(message_from_cloud_event(event)))
    bus.publish("analysis-requests", b'{"session": "s1"}', {"run": "r1"}, ordering_key="r1")

    bus.drain(timeout=10)
    assert len(handler.calls) == 3
    [record] = bus.dead_letters
    assert (record.subscription, record.topic) == ("analyze-session", "analysis-requests")
    assert "failure 3" in record.error
    [letter] = dead
    assert letter.data == b'{"session": "s1"}'
    publish_time = letter.attributes.pop("CloudPubSubDeadLetterSourceTopicPublishTime")
    assert publish_time.startswith("20")
    assert letter.attributes == {
        "run": "r1",
        "CloudPubSubDeadLetterSourceDeliveryCount": "3",
        "CloudPubSubDeadLetterSourceSubscription": subscription.name,
        "CloudPubSubDeadLetterSourceSubscriptionProject": PROJECT,
    }


def test_inprocess_drain_delivers_to_every_subscription_and_times_out_when_work_remains():
    bus = InProcessBus(PROJECT, max_attempts=2, min_backoff=30, max_backoff=30)
    seen: list[str] = []
    bus.subscribe("t", lambda event: seen.append("a"))
    bus.subscribe("t", lambda event: seen.append("b"))
    bus.publish("t", b"1")
    bus.publish("t", b"2")
    assert bus.drain() == 4
    assert sorted(seen) == ["a", "a", "b", "b"]
    assert bus.drain() == 0

    bus.subscribe("slow", FailingHandler(failures=1))
    bus.publish("slow", b"{}")
    with pytest.raises(TimeoutError):
        bus.drain(timeout=0.2)  # the retry is 30 s away


def test_inprocess_delivers_in_the_background_past_a_handler_that_takes_long():
    bus = InProcessBus(PROJECT)
    release, delivered = threading.Event(), threading.Event()
    bus.subscribe("analysis-requests", lambda event: release.wait(10))
    bus.subscribe("capture-requests", lambda event: delivered.set())
    bus.start(workers=2)
    try:
        bus.publish("analysis-requests", b"{}")
        bus.publish("capture-requests", b"{}")
        assert delivered.wait(5), "the capture request waited for the analysis"
    finally:
        release.set()
        bus.stop()


def _deliver_in_background(bus: InProcessBus, until, workers: int = 4, timeout_s: float = 10) -> None:
    """Run the bus's delivery threads until ``until()`` holds (or the timeout), then stop them."""
    bus.start(workers=workers)
    try:
        deadline = time.monotonic() + timeout_s
        while not until() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        bus.stop()


def test_inprocess_delivers_one_ordering_key_at_a_time_and_in_order():
    bus = InProcessBus(PROJECT)
    received, inside, overlaps = [], [], []
    lock = threading.Lock()

    def handler(event) -> None:
        message = message_from_cloud_event(event)
        with lock:
            inside.append(message.ordering_key)
            overlaps.append(inside.count(message.ordering_key))
        time.sleep(0.01)
        with lock:
            inside.remove(message.ordering_key)
            received.append((message.ordering_key, message.data))

    bus.subscribe("step-metrics", handler)
    for n in range(5):
        for run in ("run-a", "run-b"):
            bus.publish("step-metrics", str(n).encode(), ordering_key=run)
    _deliver_in_background(bus, until=lambda: len(received) == 10)
    assert max(overlaps) == 1
    for run in ("run-a", "run-b"):
        assert [data for key, data in received if key == run] == [str(n).encode() for n in range(5)]


def test_inprocess_limits_a_subscription_to_its_max_in_flight():
    bus = InProcessBus(PROJECT)
    inside, most = [], []
    lock = threading.Lock()

    def analyse(event) -> None:
        with lock:
            inside.append(1)
            most.append(len(inside))
        time.sleep(0.02)
        with lock:
            inside.pop()

    bus.subscribe("analysis-requests", analyse, name="analyze_session", max_in_flight=1)
    for _ in range(4):
        bus.publish("analysis-requests", b"{}")
    _deliver_in_background(bus, until=lambda: len(most) == 4)
    assert most == [1, 1, 1, 1]


# --- durability: the embedded bus's queue lives in SQLite, like Pub/Sub's it outlives the process ------------

def _collecting(bus: InProcessBus, topic: str = "analysis-requests", name: str = "analyze_session") -> list[Message]:
    received: list[Message] = []
    bus.subscribe(topic, lambda event: received.append(message_from_cloud_event(event)), name=name)
    return received


def test_inprocess_queued_messages_outlive_the_bus(tmp_path):
    path = tmp_path / "mldiag.sqlite3"
    first = InProcessBus(PROJECT, path=path)
    _collecting(first)
    ids = [first.publish("analysis-requests", str(n).encode(), {"n": str(n)}, ordering_key="s1") for n in range(3)]
    del first  # stopped before delivering anything

    again = InProcessBus(PROJECT, path=path)
    received = _collecting(again)
    assert again.drain() == 3
    assert [(m.message_id, m.data, m.attributes, m.ordering_key) for m in received] == [
        (ids[n], str(n).encode(), {"n": str(n)}, "s1") for n in range(3)]
    third = InProcessBus(PROJECT, path=path)
    assert _collecting(third) == [] and third.drain() == 0, "an acknowledged message is not delivered again"


def test_inprocess_message_for_a_subscription_not_yet_made_waits_for_it(tmp_path):
    path = tmp_path / "mldiag.sqlite3"
    first = InProcessBus(PROJECT, path=path)
    _collecting(first, name="register_session")
    _collecting(first, name="analyze_session")
    first.publish("analysis-requests", b"{}")

    again = InProcessBus(PROJECT, path=path)
    only_one = _collecting(again, name="register_session")
    assert again.drain() == 1 and len(only_one) == 1
    later = InProcessBus(PROJECT, path=path)
    assert len(_collecting(later, name="analyze_session")) == 0 and later.drain() == 1


_KILLED_MID_DELIVERY = """
import sys, threading
from pathlib import Path
from mldiag.adapters.bus.inprocess import InProcessBus

bus = InProcessBus("p", path=sys.argv[1])
def handler(event):
    Path(sys.argv[2]).touch()
    threading.Event().wait()  # until killed
bus.subscribe("analysis-requests", handler, name="analyze_session")
bus.publish("analysis-requests", b'{"session": "s1"}', {"run": "r1"}, ordering_key="s1")
bus.start()
threading.Event().wait()
"""


def _kill_mid_delivery(path) -> None:
    """A process delivers the one queued message and is killed (SIGKILL) while its handler runs."""
    inside = path.with_name("inside")
    process = subprocess.Popen([sys.executable, "-c", _KILLED_MID_DELIVERY, str(path), str(inside)])
    try:
        deadline = time.monotonic() + 30
        while not inside.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert inside.exists(), "the handler never ran"
    finally:
        process.kill()
        process.wait()


def test_inprocess_delivery_cut_by_a_crash_is_made_again_on_start(tmp_path):
    path = tmp_path / "mldiag.sqlite3"
    _kill_mid_delivery(path)

    bus = InProcessBus(PROJECT, path=path)
    received = _collecting(bus)
    assert bus.drain() == 0, "another process's delivery is not taken while it might still run"
    assert bus.recover() == 1
    assert bus.drain() == 1
    [message] = received
    assert (message.data, message.attributes, message.ordering_key) == (b'{"session": "s1"}', {"run": "r1"}, "s1")
    assert message.delivery_attempt == 2, "the cut delivery counts as an attempt"


def test_inprocess_crash_during_the_last_attempt_dead_letters_on_start(tmp_path):
    path = tmp_path / "mldiag.sqlite3"
    _kill_mid_delivery(path)

    bus = InProcessBus(PROJECT, path=path, max_attempts=1)
    received = _collecting(bus)
    dead = _collecting(bus, topic="analysis-requests-dead-letter", name="record_dead_letter")
    bus.recover()
    bus.drain()
    assert received == []
    [letter] = dead
    assert letter.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "1"
    assert letter.attributes["CloudPubSubDeadLetterSourceSubscription"] == "analyze_session"
    assert "stopped during its last attempt" in bus.dead_letters[0].error


def test_inprocess_retry_waiting_in_backoff_outlives_the_bus(tmp_path):
    path = tmp_path / "mldiag.sqlite3"
    first = InProcessBus(PROJECT, path=path, min_backoff=0.05)
    first.subscribe("analysis-requests", FailingHandler(failures=1), name="analyze_session")
    first.publish("analysis-requests", b"{}")
    with pytest.raises(TimeoutError):
        first.drain(timeout=0.01)

    again = InProcessBus(PROJECT, path=path, min_backoff=0.05)
    received = _collecting(again)
    assert again.drain() == 1 and received[0].delivery_attempt == 2


def test_inprocess_waits_idle_while_what_is_due_waits_for_a_busy_subscription():
    bus = InProcessBus(PROJECT)
    release = threading.Event()
    bus.subscribe("analysis-requests", lambda event: release.wait(5), name="analyze_session", max_in_flight=1)
    for _ in range(3):
        bus.publish("analysis-requests", b"{}")
    bus.start(workers=4)
    try:
        time.sleep(0.2)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
        time.sleep(1.0)
        assert resource.getrusage(resource.RUSAGE_SELF).ru_utime - before < 0.3, "the idle workers spin"
    finally:
        release.set()
        bus.stop()
