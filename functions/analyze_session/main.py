"""Cloud Function: a session settled; analyse it and write summary.html and analysis.json next to it."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap
from mldiag.entrypoints import handlers


@functions_framework.cloud_event
def analyze_session(cloud_event: CloudEvent) -> None:
    handlers.analyze_session(bootstrap.services(), cloud_event)
