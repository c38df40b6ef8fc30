"""A message its function keeps refusing ends in the topic's dead-letter topic, as Pub/Sub marks it.

Through the devstack's push subscriptions (dead-letter policy included) on the
emulator, in a project of this test's own, so that no other function sees the
message. The emulator ignores retry policies and redelivers every few seconds,
so the five attempts take about ten seconds. The embedded bus must dead-letter
with the same attributes; this is where that is checked against Pub/Sub.
"""

from __future__ import annotations

import time
import uuid

import pytest
from google.cloud import pubsub_v1

from mldiag.adapters.bus.inprocess import InProcessBus
from mldiag.adapters.bus.pubsub import PubSubBus
from mldiag.config import ANALYSIS_REQUESTS, dead_letter_topic
from mldiag.domain.envelopes import message_from_cloud_event

pytestmark = pytest.mark.emulator

MAX_ATTEMPTS = 5  # Pub/Sub's minimum


def pull_one(subscriber: pubsub_v1.SubscriberClient, subscription: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = subscriber.pull(subscription=subscription, max_messages=1, timeout=10)
        if response.received_messages:
            [received] = response.received_messages
            subscriber.acknowledge(subscription=subscription, ack_ids=[received.ack_id])
            return received.message
    pytest.fail(f"nothing reached {subscription} in {timeout:.0f} s")


def test_refused_message_is_dead_lettered_after_max_attempts(devstack, host_test_function):
    project = f"dead-letters-{uuid.uuid4().hex[:8]}"
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    for topic in (ANALYSIS_REQUESTS, dead_letter_topic(ANALYSIS_REQUESTS)):
        publisher.create_topic(name=publisher.topic_path(project, topic))
    dead_letters = subscriber.create_subscription(
        name=subscriber.subscription_path(project, "dead-letters"),
        topic=publisher.topic_path(project, dead_letter_topic(ANALYSIS_REQUESTS)),
    ).name
    host_test_function(project, "always_fail", topics=(ANALYSIS_REQUESTS,))

    PubSubBus(project).publish(ANALYSIS_REQUESTS, b'{"session": "s1"}', {"run": "r1"})
    letter = pull_one(subscriber, dead_letters)

    assert letter.data == b'{"session": "s1"}'
    attributes = dict(letter.attributes)
    assert attributes["run"] == "r1"
    assert attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == str(MAX_ATTEMPTS)
    assert attributes["CloudPubSubDeadLetterSourceSubscription"] == f"always_fail-{ANALYSIS_REQUESTS}"
    assert attributes["CloudPubSubDeadLetterSourceSubscriptionProject"] == project

    embedded = InProcessBus(project, max_attempts=MAX_ATTEMPTS, min_backoff=0.001, max_backoff=0.001)
    embedded.subscribe(ANALYSIS_REQUESTS, lambda event: 1 / 0)
    embedded_letters = []
    embedded.subscribe(dead_letter_topic(ANALYSIS_REQUESTS),
                       lambda event: embedded_letters.append(message_from_cloud_event(event)))
    embedded.publish(ANALYSIS_REQUESTS, b'{"session": "s1"}', {"run": "r1"})
    embedded.drain()
    [embedded_letter] = embedded_letters
    assert embedded_letter.attributes.keys() == attributes.keys()
