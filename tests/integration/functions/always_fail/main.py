"""A test-only function that fails every delivery, so that Pub/Sub retries it into the dead-letter topic."""

import functions_framework
from cloudevents.http import CloudEvent


@functions_framework.cloud_event
def always_fail(cloud_event: CloudEvent) -> None:
    raise RuntimeError(f"refusing event {cloud_event['id']}")
