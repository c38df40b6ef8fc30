"""Cloud Function: keep a message that exhausted its retries, with the reason it failed."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap, entrypoints


@functions_framework.cloud_event
def record_dead_letter(cloud_event: CloudEvent) -> None:
    entrypoints.record_dead_letter(bootstrap.services(), cloud_event)
