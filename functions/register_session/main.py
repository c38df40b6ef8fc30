"""Cloud Function: a profile file landed in the bucket; register it into its session."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap
from mldiag.entrypoints import handlers


@functions_framework.cloud_event
def register_session(cloud_event: CloudEvent) -> None:
    handlers.register_session(bootstrap.services(), cloud_event)
