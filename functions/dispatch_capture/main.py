"""Cloud Function: a capture request arrived; capture its target through the XProf profiler protocol."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap, entrypoints


@functions_framework.cloud_event
def dispatch_capture(cloud_event: CloudEvent) -> None:
    entrypoints.dispatch_capture(bootstrap.services(), cloud_event)
