"""Dead letters: messages that exhausted their delivery attempts, kept with why they failed.

Pub/Sub forwards such a message to ``<topic>-dead-letter`` with attributes
naming the source subscription and the delivery count; the archived event of
its last attempt holds the error, and is linked from the dead letter. A dead
analysis request also marks its session's analysis FAILED with that error; a
dead host-analysis request counts its host as FAILED, so that the merge goes ahead.
"""

from __future__ import annotations

import base64
from typing import Any, Protocol

from cloudevents.http import CloudEvent

from mldiag.config import DEAD_LETTER_SUFFIX, TOPIC_SUBSCRIBERS
from mldiag.domain.envelopes import message_from_cloud_event
from mldiag.domain.errors import MldiagError
from mldiag.domain.clock import format_timestamp
from mldiag.domain.topics import ANALYSIS_REQUESTS, HOST_ANALYSIS_REQUESTS
from mldiag.ports import OrderBy
from mldiag.services.dependencies import Archiving, Blobs, Configured, Publishing, Stored
from mldiag.services.event_archive import ArchivedEvent, Ignored, Outcome


class DeadLetterPorts(Stored, Publishing, Blobs, Configured, Archiving, Protocol):
    """What recording a dead letter uses."""


COLLECTION = "deadLetters"
MAX_DATA_CHARS = 16 * 1024


def record(services: DeadLetterPorts, event: CloudEvent) -> str:
    message = message_from_cloud_event(event)
    attributes = message.attributes
    subscription = attributes.get("CloudPubSubDeadLetterSourceSubscription", "")
    source_topic = str(event["source"]).rsplit("/", 1)[-1]
    original = _original_failure(services, source_topic, message.data)
    services.store.set(COLLECTION, f"{source_topic}:{message.message_id}", {
        "messageId": message.message_id,
        "deadLetterTopic": source_topic,
        "sourceSubscription": subscription,
        "deliveryCount": attributes.get("CloudPubSubDeadLetterSourceDeliveryCount", ""),
        "attributes": attributes,
        "data": message.data.decode("utf-8", "replace")[:MAX_DATA_CHARS],
        "originalEvent": original.key if original else "",
        "lastError": original.error if original else "",
        "receivedAt": format_timestamp(services.now()),
    })
    reason = original.error if original else (
        f"{attributes.get('CloudPubSubDeadLetterSourceDeliveryCount', 'every')} delivery attempts failed")
    gave_up = _give_up(services, source_topic.removesuffix(DEAD_LETTER_SUFFIX), message.data, reason)
    return f"dead letter {message.message_id} from {subscription or source_topic}" + (f"; {gave_up}" if gave_up else "")


def _give_up(services: DeadLetterPorts, topic: str, data: bytes, reason: str) -> str:
    """Record the failure where the system tracks the work the message asked for, if it does."""
    from mldiag.services import analysis_jobs, host_analyses

    try:
        if topic == ANALYSIS_REQUESTS:
            return analysis_jobs.give_up(services, data, reason)
        if topic == HOST_ANALYSIS_REQUESTS:
            return host_analyses.give_up(services, data, reason)
        return ""
    except (ValueError, MldiagError, Ignored) as unusable:  # kept as a dead letter all the same
        return f"no analysis to mark failed ({unusable})"


def _original_failure(services: DeadLetterPorts, dead_letter_topic: str, data: bytes) -> ArchivedEvent | None:
    """The consuming function's archived failure for the same message.

    Pub/Sub gives the forwarded message a new id, so the match is on the payload
    among that function's recent failures.
    """
    function = TOPIC_SUBSCRIBERS.get(dead_letter_topic.removesuffix(DEAD_LETTER_SUFFIX), "")
    if not function:
        return None
    encoded = base64.b64encode(data).decode()
    for record in services.events.list(function=function, outcome=Outcome.FAILED.value, limit=200):
        message = (record.raw or {}).get("data", {}).get("message", {})
        if message.get("data") == encoded:
            return record
    return None


def list_dead_letters(services: DeadLetterPorts, limit: int = 100) -> list[dict[str, Any]]:
    return services.store.query(COLLECTION, order_by=[OrderBy("receivedAt", descending=True)], limit=limit)
