"""``PubSubBus``: the message bus on Cloud Pub/Sub (or its emulator via ``PUBSUB_EMULATOR_HOST``).

Delivery to handlers is Pub/Sub's job (push subscriptions made by Terraform, or
by the devstack locally); this side only publishes. The code names topics as
:mod:`mldiag.config` does; a deployment that shares its project with another
puts its own prefix before each (``MLDIAG_TOPIC_PREFIX``), added here only. The publisher client starts
background threads, so it is created on the first publish, not at import or
wiring time: a function that never publishes never pays for it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from google.api_core import exceptions as google_errors
from google.cloud import pubsub_v1

from mldiag.domain.errors import NotFound

PUBLISH_TIMEOUT_S = 60.0


class PubSubBus:
    """A :class:`mldiag.ports.MessageBus` publishing to topics of one project."""

    def __init__(self, project: str, topic_prefix: str = ""):
        self.project = project
        self.topic_prefix = topic_prefix
        self._publisher: pubsub_v1.PublisherClient | None = None
        self._lock = threading.Lock()

    def _client(self) -> pubsub_v1.PublisherClient:
        with self._lock:
            if self._publisher is None:
                options = pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
                self._publisher = pubsub_v1.PublisherClient(publisher_options=options)
            return self._publisher

    def publish(
        self,
        topic: str,
        data: bytes,
        attributes: Mapping[str, str] | None = None,
        ordering_key: str = "",
    ) -> str:
        publisher = self._client()
        topic_path = publisher.topic_path(self.project, self.topic_prefix + topic)
        future = publisher.publish(topic_path, bytes(data), ordering_key=ordering_key, **dict(attributes or {}))
        try:
            return future.result(timeout=PUBLISH_TIMEOUT_S)
        except Exception as error:
            if ordering_key:
                # A failed publish pauses its ordering key; let later messages go again.
                publisher.resume_publish(topic_path, ordering_key)
            if isinstance(error, google_errors.NotFound):
                raise NotFound(f"topic {topic_path} does not exist") from None
            raise
