"""Cloud Function: one host file of a multi-host session analysed; the last host asks for the merge."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap
from mldiag.entrypoints import handlers


@functions_framework.cloud_event
def analyze_host(cloud_event: CloudEvent) -> None:
    handlers.analyze_host(bootstrap.services(), cloud_event)
