"""The event handlers behind every function (which trigger feeds which is in :mod:`mldiag.config`).

``functions/<name>/main.py`` calls ``<name>(bootstrap.services(), event)``; the
local hosts (``mldiag up``, the devstack) bind the same handlers to their own
services. Each handler runs inside :func:`mldiag.services.event_archive.handle` (registration, which
writes in one transaction, inside :func:`~mldiag.services.event_archive.handle_atomically`), so every
event is archived, deduplicated and sorted into retry or reject. A handler reads its topic's message
(:mod:`mldiag.domain.messages`) there, once, and hands the use case the typed message: one that does not
read is rejected with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloudevents.http import CloudEvent

from mldiag.domain.envelopes import message_from_cloud_event
from mldiag.services.dependencies import FunctionHandler, Services

if TYPE_CHECKING:
    from collections.abc import Callable

    from mldiag.domain.envelopes import Message
    from mldiag.services.event_archive import Outcome


def _handle(services: Services, function: str, event: CloudEvent, work: Callable[[CloudEvent], str]) -> Outcome:
    """``work`` inside the event archive; imported on the first event, as the archive's models need pydantic."""
    from mldiag.services.event_archive import handle

    return handle(services.events, function, event, work)


def _attempt(services: Services, function: str, event: CloudEvent, message: Message) -> int:
    """Which delivery of its message ``event`` is. A Pub/Sub push through functions-framework loses the body's
    deliveryAttempt; the event archive has counted every delivery of the message to the function, this one
    included."""
    return max(message.delivery_attempt, services.events.attempts(function, str(event["id"])))


def register_session(services: Services, event: CloudEvent) -> Outcome:
    """Eventarc ``google.cloud.storage.object.v1.finalized`` on the profiles bucket: the file joins its session.
    A session whose files all came (a capture's) is analysed now; one that waits for no new file to come within
    ``settle_seconds`` (a scanned one) is asked for by the next maintenance tick."""
    from mldiag.services.event_archive import handle_atomically
    from mldiag.services.registration import registering_finalized

    return handle_atomically(services.events, services, "register_session", event,
                             lambda e: registering_finalized(services, e))


def analyze_session(services: Services, event: CloudEvent) -> Outcome:
    """``analysis-requests``: analyse a settled session, write summary.html and analysis.json next to it."""
    from mldiag.domain.messages import AnalysisRequest
    from mldiag.services.analysis_jobs import analyze_requested

    def work(event: CloudEvent) -> str:
        message = message_from_cloud_event(event)
        return analyze_requested(services, AnalysisRequest.read(message),
                                 _attempt(services, "analyze_session", event, message))

    return _handle(services, "analyze_session", event, work)


def analyze_host(services: Services, event: CloudEvent) -> Outcome:
    """``host-analysis-requests``: analyse one host file of a fanned-out session; the last host asks for the merge."""
    from mldiag.domain.messages import HostAnalysisRequest
    from mldiag.services.host_analyses import analyze_host_requested

    def work(event: CloudEvent) -> str:
        message = message_from_cloud_event(event)
        return analyze_host_requested(services, HostAnalysisRequest.read(message),
                                      _attempt(services, "analyze_host", event, message))

    return _handle(services, "analyze_host", event, work)


def record_dead_letter(services: Services, event: CloudEvent) -> Outcome:
    """Every ``<topic>-dead-letter`` topic: keep what exhausted its retries, with its reason."""
    from mldiag.services.operator.dead_letters import record

    return _handle(services, "record_dead_letter", event, lambda e: record(services, e))


def maintenance(services: Services, event: CloudEvent) -> Outcome:
    """``maintenance-ticks`` (Cloud Scheduler, every minute): settle sessions, flush the outbox, prune."""
    from mldiag.domain.messages import MaintenanceTick
    from mldiag.services.operator.maintenance import run_maintenance

    def work(event: CloudEvent) -> str:
        MaintenanceTick.read(message_from_cloud_event(event))
        return run_maintenance(services)

    return _handle(services, "maintenance", event, work)


def dispatch_capture(services: Services, event: CloudEvent) -> Outcome:
    """``capture-requests``: capture one target of a request (and its pending siblings, at once)."""
    from mldiag.domain.messages import CaptureTaskRequest
    from mldiag.services.capture.dispatch import dispatch

    return _handle(services, "dispatch_capture", event,
                                lambda e: dispatch(services, CaptureTaskRequest.read(message_from_cloud_event(e))))


def on_alert(services: Services, event: CloudEvent) -> Outcome:
    """``monitoring-alerts``: record the MonitoredEvent and capture automatically, storm-controlled."""
    from mldiag.domain.messages import read_alert
    from mldiag.services.monitoring.auto_capture import handle_alert

    def work(event: CloudEvent) -> str:
        message = message_from_cloud_event(event)
        return handle_alert(services, read_alert(message), message.message_id)

    return _handle(services, "on_alert", event, work)


def deliver_notifications(services: Services, event: CloudEvent) -> Outcome:
    """``analysis-events``: send a finished analysis or a monitored event's change to the configured destinations.
    The topic's other messages (fleet records) are news to no one, and left alone."""
    from mldiag.domain.messages import Notification
    from mldiag.services.notifications import deliver

    def work(event: CloudEvent) -> str:
        message = message_from_cloud_event(event)
        if not Notification.carried_by(message):
            return f"{message.attributes['ce-type']}: not a notification"
        return deliver(services, Notification.read(message))

    return _handle(services, "deliver_notifications", event, work)


def record_fleet(services: Services, event: CloudEvent) -> Outcome:
    """``analysis-events``, embedded only: a finished analysis's record into the local fleet table (in the cloud a
    Pub/Sub BigQuery subscription writes it). The topic's other messages are left alone."""
    from mldiag.domain.messages import read_fleet_record
    from mldiag.services.fleet import record_delivered

    def work(event: CloudEvent) -> str:
        message = message_from_cloud_event(event)
        record = read_fleet_record(message)
        if record is None:
            return f"{message.attributes.get('ce-type') or 'untyped'}: not a fleet record"
        return record_delivered(services, record)

    return _handle(services, "record_fleet", event, work)


EVENT_HANDLERS: dict[str, FunctionHandler] = {
    "register_session": register_session,
    "analyze_session": analyze_session,
    "analyze_host": analyze_host,
    "record_dead_letter": record_dead_letter,
    "maintenance": maintenance,
    "dispatch_capture": dispatch_capture,
    "on_alert": on_alert,
    "deliver_notifications": deliver_notifications,
    "record_fleet": record_fleet,
}
