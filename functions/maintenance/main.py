"""Cloud Function: periodic housekeeping (settle sessions, flush the outbox), on each scheduler tick."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap, entrypoints


@functions_framework.cloud_event
def maintenance(cloud_event: CloudEvent) -> None:
    entrypoints.maintenance(bootstrap.services(), cloud_event)
