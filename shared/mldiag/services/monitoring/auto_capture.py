"""Automatic capture: an open degradation alert becomes a profile, without a capture storm.

``on_alert`` stores the alert as a MonitoredEvent and, for an open, detected
one, decides in one transaction — with the run's auto-capture state — whether
to capture: per run a cooldown and an hourly cap, and never twice for the same
event. Two concurrent alerts therefore cannot both capture; every trigger that
does not is recorded on the event with its reason. The capture itself is a
snapshot when continuous profiling is on for the run, otherwise an on-demand
capture of the affected targets (all of them when the alert is not localised);
its session is ``autoCaptured`` and linked to the event both ways.
A closed alert ends the event and captures nothing. A run has at most
``MLDIAG_MAX_MONITORED_EVENTS_PER_RUN`` monitored events: an alert that would
open one more is dropped, counted with its reason in the run's auto-capture
state (``:getAutoCapture``) and its account, and logged at the first drop and
every tenfold after.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog
from pydantic import Field

from mldiag.domain.alerts import Alert
from mldiag.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, PermanentFailure
from mldiag.domain.names import EVENTS, parse_run, short_name
from mldiag.domain.resources import Kind, MachineLearningRun, MonitoredEvent, Suppression
from mldiag.domain.types import CamelModel, Duration, Timestamp, bounded_duration, human_duration
from mldiag.domain.clock import format_timestamp
from mldiag.services import notifications, unit_of_work
from mldiag.services.dependencies import Blobs, Configured, Publishing, Stored
from mldiag.services.monitoring.alert_runs import with_run_found
from mldiag.services.run_state import PerRunState, RunState
from mldiag.services.unit_of_work import UnitOfWork


class AutoCapturePorts(Stored, Publishing, Blobs, Configured, Protocol):
    """What deciding on an automatic capture uses."""


COLLECTION = "autoCapture"
log = structlog.get_logger(__name__)


class AutoCapturePolicy(CamelModel):
    """Per run: whether alerts capture, how long, and how often at most."""

    enabled: bool = True
    cooldown: Duration = timedelta(minutes=10)
    duration: Duration = timedelta(seconds=3)
    max_per_hour: int = Field(default=4, ge=1, le=60)


class AutoCaptureState(PerRunState):
    """What the storm control remembers per run."""

    policy: AutoCapturePolicy = Field(default_factory=AutoCapturePolicy)
    captures: list[Timestamp] = Field(default_factory=list)  # within the last hour
    # A decided capture not yet confirmed; a retried alert finishes it under the same session id.
    pending_event: str = ""
    pending_session: str = ""
    events_opened: int = 0  # the run's monitored events, against the cap
    events_dropped: int = 0  # alerts refused an event by the cap
    last_dropped: Suppression | None = None


STATES = RunState(COLLECTION, AutoCaptureState)


def set_policy(services: AutoCapturePorts, run_name: str, policy: AutoCapturePolicy) -> AutoCapturePolicy:
    """Store the run's policy; its capture duration must be one a capture accepts."""
    from mldiag.services.capture.requests import MAX_DURATION, MIN_DURATION

    try:
        bounded_duration(policy.duration, MIN_DURATION, MAX_DURATION)
    except ValueError as error:
        raise InvalidArgument(str(error), field="duration") from None
    return STATES.update(services, run_name, lambda state: setattr(state, "policy", policy)).policy


def _why_not(state: AutoCaptureState, event: MonitoredEvent, now: datetime) -> str:
    """The reason this trigger must not capture, or '' if it may."""
    policy = state.policy
    if not policy.enabled:
        return "auto-capture is disabled for this run"
    if event.profiler_sessions:
        return f"already captured for this event ({event.profiler_sessions[-1].rsplit('/', 1)[-1]})"
    last_capture = max((t for t in state.captures if t is not None), default=None)
    if last_capture is not None:
        since = now - last_capture
        if since < policy.cooldown:
            return (f"cooldown: the run's last automatic capture was {since.total_seconds():.0f}s ago "
                    f"(cooldown {human_duration(policy.cooldown)})")
    if len(state.captures) >= policy.max_per_hour:
        return f"hourly cap: {len(state.captures)} automatic captures in the last hour (max {policy.max_per_hour})"
    return ""


def _merge(event: MonitoredEvent, alert: Alert, now: datetime) -> None:
    event.type = alert.type
    event.display_name = alert.display_name or event.display_name
    event.start_time = event.start_time or alert.start_time or now
    if not alert.open and event.end_time is None:
        event.end_time = alert.end_time or now
    event.targets = list(dict.fromkeys([*event.targets, *alert.targets]))
    if alert.reports:
        event.analyzer_reports = alert.reports


class Decision(CamelModel):
    event: str
    capture_session: str = ""
    reason: str = ""
    dropped: int = 0  # the run's alerts dropped by the event cap, this one included; 0 when it was kept
    opened: bool = False  # this alert opened the event
    closed: bool = False  # this alert ended the event


def decide(services: AutoCapturePorts, alert: Alert, alert_key: str) -> Decision:
    """Record the alert on its event and decide, atomically, whether it captures."""
    event_name = str(parse_run(alert.run).child(EVENTS, alert.event_id))
    now = services.now()

    def work(unit: UnitOfWork) -> Decision:
        run = unit.runs.find(alert.run)
        if run is None:
            raise PermanentFailure(f"the alert names run {alert.run}, which does not exist")
        previous = unit.monitored_events.find(event_name)
        state = STATES.load(unit.transaction, alert.run)
        if previous is None:
            cap = services.settings.max_monitored_events_per_run
            if state.events_opened >= cap:
                reason = (f"event cap: the run has {state.events_opened} monitored events (max {cap}, "
                          "MLDIAG_MAX_MONITORED_EVENTS_PER_RUN)")
                if state.last_dropped is None or state.last_dropped.alert != alert_key:  # not a redelivery
                    state.events_dropped += 1
                    state.last_dropped = Suppression(time=now, reason=reason, alert=alert_key)
                STATES.save(unit.transaction, alert.run, state)
                return Decision(event=event_name, reason=reason, dropped=state.events_dropped)
            state.events_opened += 1
        event = previous.model_copy(deep=True) if previous else MonitoredEvent(name=event_name)
        state.captures = [t for t in state.captures if t and now - t < timedelta(hours=1)]
        if state.pending_event == event_name and state.pending_session:
            decision = Decision(event=event_name, capture_session=state.pending_session)  # finish what was decided
        elif previous is not None and previous.end_time is not None:
            reason = "the event has ended; a recurrence arrives as a new event" if alert.open else ""
            decision = Decision(event=event_name, reason=reason)
        else:
            _merge(event, alert, now)
            reason = _why_not(state, event, now) if alert.open else ""
            decision = Decision(event=event_name, reason=reason)
            if alert.open and not reason:
                session_id = f"auto-{alert.event_id}"[:100]
                decision.capture_session = f"{alert.run}/profilerSessions/{session_id}"
                state.captures.append(now)
                state.pending_event, state.pending_session = event_name, decision.capture_session
        decision.opened = previous is None and alert.open
        decision.closed = (previous is None or previous.end_time is None) and event.end_time is not None
        if decision.reason:
            event.suppress(Suppression(time=now, reason=decision.reason, alert=alert_key))
        saved = unit.monitored_events.save(previous, event)
        STATES.save(unit.transaction, alert.run, state)
        if decision.opened or decision.closed:
            notifications.event_changed(unit, services, saved, opened=decision.opened)
        return decision

    return unit_of_work.run(services, work)


def _capture(services: AutoCapturePorts, run: MachineLearningRun, alert: Alert, decision: Decision) -> str:
    """Start the decided capture (idempotent by session id); returns a one-line account."""
    from mldiag.services.capture import requests as capture_requests

    session_id = decision.capture_session.rsplit("/", 1)[-1]
    request = capture_requests.CaptureRequest(
        kind=Kind.KIND_SNAPSHOT if run.continuous_profiling is not None else Kind.KIND_ON_DEMAND,
        profiler_targets=alert.targets,
        duration=STATES.read(services, alert.run).policy.duration,
        auto_captured=True,
        monitored_events=[decision.event],
    )
    try:
        operation = capture_requests.capture(services, parse_run(alert.run), session_id, request)
        account = f"captured {decision.capture_session} ({request.kind.value}, operation {operation.name})"
    except AlreadyExists:
        account = f"capture {decision.capture_session} already started"
    except (FailedPrecondition, InvalidArgument, NotFound) as refused:
        account = ""
        _record_failed_capture(services, decision, str(refused))
    _settle(services, alert.run, decision, linked=bool(account))
    return account or f"capture refused for {decision.event}"


def _record_failed_capture(services: AutoCapturePorts, decision: Decision, reason: str) -> None:
    def note(event: MonitoredEvent) -> None:
        event.suppress(Suppression(time=services.now(), reason=f"capture failed: {reason}"))

    unit_of_work.change(services, lambda unit: unit.monitored_events.update(decision.event, note))


def _settle(services: AutoCapturePorts, run_name: str, decision: Decision, linked: bool) -> None:
    """Link the session to its event and clear the pending decision."""
    if linked:
        def link(event: MonitoredEvent) -> None:
            if decision.capture_session not in event.profiler_sessions:
                event.profiler_sessions.append(decision.capture_session)

        unit_of_work.change(services, lambda unit: unit.monitored_events.update(decision.event, link))

    def clear(state: AutoCaptureState) -> None:
        if state.pending_session == decision.capture_session:
            state.pending_event = state.pending_session = ""

    STATES.update(services, run_name, clear)


def handle_alert(services: AutoCapturePorts, alert: Alert, message_id: str) -> str:
    """The ``on_alert`` handler body: one alert (of the message ``message_id``) in, a one-line account out."""
    try:
        alert = with_run_found(services, alert)
    except NotFound as missing:
        raise PermanentFailure(f"the alert's run does not exist: {missing}") from None
    alert_key = f"on_alert:{message_id}"
    with structlog.contextvars.bound_contextvars(run=alert.run, monitored_event=alert.event_id):
        decision = decide(services, alert, alert_key)
        if decision.dropped:
            if math.log10(decision.dropped).is_integer():
                log.warning(f"alerts of {short_name(alert.run)} dropped", reason=decision.reason,
                            dropped=decision.dropped)
            return f"alert for {decision.event}: dropped ({decision.reason})"
        if decision.opened:
            outcome = (f"capturing {short_name(decision.capture_session)}" if decision.capture_session
                       else f"no capture: {decision.reason}" if decision.reason else "")
            log.info(f"monitored event {short_name(decision.event)} opened: {alert.display_name or alert.type.value}"
                     + (f"; {outcome}" if outcome else ""), notice=True)
        if decision.capture_session:
            return _capture(services, services.runs.get(alert.run), alert, decision)
        state = "open" if alert.open else "closed"
        if decision.reason:
            return f"{state} alert for {decision.event}: suppressed ({decision.reason})"
        return f"{state} alert recorded on {decision.event}"


def describe_state(services: AutoCapturePorts, run_name: str) -> dict[str, Any]:
    """The run's auto-capture policy and recent captures, for the CLI and the console."""
    state = STATES.read(services, run_name)
    events: dict[str, Any] = {"count": state.events_opened, "max": services.settings.max_monitored_events_per_run,
              "dropped": state.events_dropped}
    if state.last_dropped is not None:
        events["lastDropped"] = state.last_dropped.to_json_dict()
    return {"policy": state.policy.to_json_dict(),
            "capturesLastHour": [format_timestamp(t) for t in state.captures], "monitoredEvents": events}
