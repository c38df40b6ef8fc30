"""Dead letters: messages that exhausted their delivery attempts, kept with why they failed.

Pub/Sub forwards such a message to ``<topic>-dead-letter`` with attributes
naming the source subscription and the delivery count; the archived event of
its last attempt (same message id) holds the error.
"""

from __future__ import annotations

from typing import Any

from cloudevents.http import CloudEvent

from mldiag.bootstrap import Services
from mldiag.config import DEAD_LETTER_SUFFIX
from mldiag.domain.types import format_timestamp
from mldiag.messages import message_from_cloud_event
from mldiag.ports import OrderBy

COLLECTION = "deadLetters"
MAX_DATA_CHARS = 16 * 1024


def record(services: Services, event: CloudEvent) -> str:
    message = message_from_cloud_event(event)
    attributes = message.attributes
    subscription = attributes.get("CloudPubSubDeadLetterSourceSubscription", "")
    source_topic = str(event["source"]).rsplit("/", 1)[-1]
    last_error = _last_error(services, source_topic, message.message_id)
    services.store.set(COLLECTION, f"{source_topic}:{message.message_id}", {
        "messageId": message.message_id,
        "deadLetterTopic": source_topic,
        "sourceSubscription": subscription,
        "deliveryCount": attributes.get("CloudPubSubDeadLetterSourceDeliveryCount", ""),
        "attributes": attributes,
        "data": message.data.decode("utf-8", "replace")[:MAX_DATA_CHARS],
        "lastError": last_error,
        "receivedAt": format_timestamp(services.now()),
    })
    return f"dead letter {message.message_id} from {subscription or source_topic}"


def _last_error(services: Services, dead_letter_topic: str, message_id: str) -> str:
    """The error the consuming function archived for this message (push event id = message id)."""
    from mldiag.entrypoints import TOPIC_SUBSCRIBERS

    function = TOPIC_SUBSCRIBERS.get(dead_letter_topic.removesuffix(DEAD_LETTER_SUFFIX), "")
    archived = services.events.get(function, message_id) if function else None
    return archived.error if archived else ""


def list_dead_letters(services: Services, limit: int = 100) -> list[dict[str, Any]]:
    return services.store.query(COLLECTION, order_by=[OrderBy("receivedAt", descending=True)], limit=limit)
