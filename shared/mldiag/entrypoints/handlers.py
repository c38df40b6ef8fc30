"""The event handlers behind every function (which trigger feeds which is in :mod:`mldiag.config`).

``functions/<name>/main.py`` calls ``<name>(bootstrap.services(), event)``; the
local hosts (``mldiag up``, the devstack) bind the same handlers to their own
services. Each handler runs inside :func:`mldiag.services.event_archive.handle` (registration, which
writes in one transaction, inside :func:`~mldiag.services.event_archive.handle_atomically`), so every
event is archived, deduplicated and sorted into retry or reject.
"""

from __future__ import annotations

from cloudevents.http import CloudEvent

from mldiag.services import event_archive
from mldiag.services.dependencies import FunctionHandler, Services


def register_session(services: Services, event: CloudEvent) -> event_archive.Outcome:
    """Eventarc ``google.cloud.storage.object.v1.finalized`` on the profiles bucket."""
    from mldiag.services.registration import registering_finalized

    return event_archive.handle_atomically(services.events, "register_session", event,
                                           lambda e: registering_finalized(services, e))


def analyze_session(services: Services, event: CloudEvent) -> event_archive.Outcome:
    """``analysis-requests``: analyse a settled session, write summary.html and analysis.json next to it."""
    from mldiag.services.analysis_jobs import analyze_requested

    return event_archive.handle(services.events, "analyze_session", event, lambda e: analyze_requested(services, e))


def analyze_host(services: Services, event: CloudEvent) -> event_archive.Outcome:
    """``host-analysis-requests``: analyse one host file of a fanned-out session; the last host asks for the merge."""
    from mldiag.services.host_analyses import analyze_host_requested

    return event_archive.handle(services.events, "analyze_host", event,
                                lambda e: analyze_host_requested(services, e))


def record_dead_letter(services: Services, event: CloudEvent) -> event_archive.Outcome:
    """Every ``<topic>-dead-letter`` topic: keep what exhausted its retries, with its reason."""
    from mldiag.services.operations.dead_letters import record

    return event_archive.handle(services.events, "record_dead_letter", event, lambda e: record(services, e))


def maintenance(services: Services, event: CloudEvent) -> event_archive.Outcome:
    """``maintenance-ticks`` (Cloud Scheduler, every minute): settle sessions, flush the outbox, prune."""
    from mldiag.services.operations.maintenance import run_maintenance

    return event_archive.handle(services.events, "maintenance", event, lambda e: run_maintenance(services))


def dispatch_capture(services: Services, event: CloudEvent) -> event_archive.Outcome:
    """``capture-requests``: capture one target of a request (and its pending siblings, at once)."""
    from mldiag.services.capture.dispatch import dispatch

    return event_archive.handle(services.events, "dispatch_capture", event, lambda e: dispatch(services, e))


def on_alert(services: Services, event: CloudEvent) -> event_archive.Outcome:
    """``monitoring-alerts``: record the MonitoredEvent and capture automatically, storm-controlled."""
    from mldiag.services.monitoring.auto_capture import handle_alert

    return event_archive.handle(services.events, "on_alert", event, lambda e: handle_alert(services, e))


def deliver_notifications(services: Services, event: CloudEvent) -> event_archive.Outcome:
    """``analysis-events``: send a finished analysis or a monitored event's change to the configured destinations."""
    from mldiag.services.notifications import deliver

    return event_archive.handle(services.events, "deliver_notifications", event, lambda e: deliver(services, e))


def record_fleet(services: Services, event: CloudEvent) -> event_archive.Outcome:
    """``analysis-events``, embedded only: a finished analysis's record into the local fleet table (in the cloud a
    Pub/Sub BigQuery subscription writes it)."""
    from mldiag.services.fleet import record_delivered

    return event_archive.handle(services.events, "record_fleet", event, lambda e: record_delivered(services, e))


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
