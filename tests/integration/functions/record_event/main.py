"""A test-only function, laid out like a deployed one: it stores every CloudEvent it receives.

Each event lands in the ``receivedEvents`` collection of the configured document
store (the devstack's Firestore), keyed by event id, so a test can observe what
came through the real delivery path.
"""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap

RECEIVED = "receivedEvents"


@functions_framework.cloud_event
def record_event(cloud_event: CloudEvent) -> None:
    attributes = {name: str(value) for name, value in cloud_event.get_attributes().items()}
    bootstrap.build().store.set(RECEIVED, cloud_event["id"], {"attributes": attributes, "data": cloud_event.data})
