"""Cloud Function: periodic housekeeping (settle sessions, flush the outbox), on each scheduler tick."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap
from mldiag.entrypoints import handlers


@functions_framework.cloud_event
def maintenance(cloud_event: CloudEvent) -> None:
    handlers.maintenance(bootstrap.services(), cloud_event)
