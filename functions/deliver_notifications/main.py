"""Cloud Function: an analysis finished or a monitored event changed; tell the webhook, Slack and PagerDuty."""

import functions_framework
from cloudevents.http import CloudEvent

from mldiag import bootstrap
from mldiag.entrypoints import handlers


@functions_framework.cloud_event
def deliver_notifications(cloud_event: CloudEvent) -> None:
    handlers.deliver_notifications(bootstrap.services(), cloud_event)
