"""Cloud Function: a session settled; analyse it and write summary.html and analysis.json next to it."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap, entrypoints


@functions_framework.cloud_event
def analyze_session(cloud_event: CloudEvent) -> None:
    entrypoints.analyze_session(bootstrap.services(), cloud_event)
