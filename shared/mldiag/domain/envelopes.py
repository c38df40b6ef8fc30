"""Pub/Sub messages as CloudEvents, the way push subscriptions and Eventarc deliver them.

A Pub/Sub-triggered function receives a ``google.cloud.pubsub.topic.v1.messagePublished``
CloudEvent whose data is ``{"message": {data (base64), attributes, messageId,
publishTime}, "subscription": ...}``. The in-process bus builds exactly that, so
one handler serves the cloud, the emulators and the embedded default.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cloudevents.http import CloudEvent

from mldiag.domain.errors import PermanentFailure
from mldiag.domain.clock import format_timestamp

PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"


@dataclass(frozen=True)
class Message:
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    message_id: str = ""
    publish_time: str = ""
    # Pub/Sub's count, where the push body still carries it (functions-framework drops it:
    # handlers that need the count in the cloud take the event archive's, EventArchive.attempts).
    delivery_attempt: int = 1
    ordering_key: str = ""

    def json(self) -> Any:
        try:
            return json.loads(self.data)
        except ValueError as error:
            raise PermanentFailure(f"message {self.message_id or '?'} is not JSON: {error}") from None


def encode_json(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def pubsub_cloud_event(
    *, project: str, topic: str, subscription: str, message: Message, published: datetime
) -> CloudEvent:
    body: dict[str, Any] = {
        "data": base64.b64encode(message.data).decode(),
        "attributes": dict(message.attributes),
        "messageId": message.message_id,
        "publishTime": format_timestamp(published),
    }
    if message.ordering_key:
        body["orderingKey"] = message.ordering_key
    event = CloudEvent(
        {
            "type": PUBSUB_PUBLISHED,
            "source": f"//pubsub.googleapis.com/projects/{project}/topics/{topic}",
            "id": message.message_id,
            "time": format_timestamp(published),
            "specversion": "1.0",
            "datacontenttype": "application/json",
        },
        {"message": body, "subscription": f"projects/{project}/subscriptions/{subscription}",
         "deliveryAttempt": message.delivery_attempt},
    )
    return event


def message_from_cloud_event(event: CloudEvent) -> Message:
    """The Pub/Sub message inside a push CloudEvent; :class:`PermanentFailure` if it has none."""
    data = event.get_data() if hasattr(event, "get_data") else event.data
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except ValueError:
            data = None
    body = data if isinstance(data, dict) else {}
    message = body.get("message")
    if not isinstance(message, dict):
        raise PermanentFailure(f"event {event['id']} carries no Pub/Sub message")
    try:
        payload = base64.b64decode(message.get("data") or "", validate=True)
    except (ValueError, TypeError):
        raise PermanentFailure(f"event {event['id']}: message data is not base64") from None
    attributes = message.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise PermanentFailure(f"event {event['id']}: attributes must be a map")
    return Message(
        data=payload,
        attributes={str(k): str(v) for k, v in attributes.items()},
        message_id=str(message.get("messageId") or message.get("message_id") or event["id"]),
        publish_time=str(message.get("publishTime") or ""),
        delivery_attempt=int(body.get("deliveryAttempt") or 1),
        ordering_key=str(message.get("orderingKey") or ""),
    )


STORAGE_FINALIZED = "google.cloud.storage.object.v1.finalized"


def storage_finalized_event(metadata: dict[str, Any], *, event_id: str = "") -> CloudEvent:
    """The CloudEvent Eventarc delivers when an object is finalized.

    ``metadata`` is the object's JSON resource (``bucket``, ``name``,
    ``generation``, ``size``, ``contentType``, ``timeCreated``, ``updated``...),
    as Cloud Storage notifications carry it. The event id is stable per object
    generation, as a redelivery's would be.
    """
    bucket, name, generation = metadata.get("bucket", ""), metadata.get("name", ""), metadata.get("generation", "")
    attributes = {
        "type": STORAGE_FINALIZED,
        "source": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        "subject": f"objects/{name}",
        "id": event_id or f"{bucket}/{name}#{generation}",
        "specversion": "1.0",
        "datacontenttype": "application/json",
    }
    if timestamp := metadata.get("updated") or metadata.get("timeCreated"):
        attributes["time"] = timestamp
    return CloudEvent(attributes, metadata)


def finalized_event_from_notification(message: Message, bucket: str | None = None) -> CloudEvent | None:
    """What an Eventarc finalize trigger on ``bucket`` (on every bucket: ``None``) delivers for a
    Cloud Storage notification.

    ``None`` when the trigger would not fire: another event type, or another bucket.
    """
    if message.attributes.get("eventType") != "OBJECT_FINALIZE":
        return None
    if bucket is not None and message.attributes.get("bucketId") != bucket:
        return None
    return storage_finalized_event(message.json(), event_id=message.message_id)
