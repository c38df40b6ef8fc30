"""Cloud Function: a capture request arrived; capture its target through the XProf profiler protocol."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap
from mldiag.entrypoints import handlers


@functions_framework.cloud_event
def dispatch_capture(cloud_event: CloudEvent) -> None:
    handlers.dispatch_capture(bootstrap.services(), cloud_event)
