"""Cloud Function: a monitoring alert arrived; record it and capture a profile if it calls for one."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap
from mldiag.entrypoints import handlers


@functions_framework.cloud_event
def on_alert(cloud_event: CloudEvent) -> None:
    handlers.on_alert(bootstrap.services(), cloud_event)
