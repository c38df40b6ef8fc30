"""Cloud Function: keep a message that exhausted its retries, with the reason it failed."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap
from mldiag.entrypoints import handlers


@functions_framework.cloud_event
def record_dead_letter(cloud_event: CloudEvent) -> None:
    handlers.record_dead_letter(bootstrap.services(), cloud_event)
