"""on_alert: alerts become MonitoredEvents and, storm-controlled, automatic captures."""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
from datetime import timedelta

import pytest
from cloudevents.http import CloudEvent
from structlog.testing import capture_logs

from mldiag.entrypoints import handlers
from mldiag.services.monitoring.auto_capture import AutoCapturePolicy, describe_state, handle_alert, set_policy
from mldiag.config import CAPTURE_REQUESTS
from mldiag.domain import Kind, MachineLearningRun, MonitoredEvent, ProfilerSession, ProfilerTarget
from mldiag.services.event_archive import Outcome
from mldiag.services.monitoring.metrics import alert_message
from mldiag.domain.alerts import Alert
from mldiag.domain.degradation import Transition
from mldiag.domain.messages import AlertMessage

RUN = "projects/p/locations/l/machineLearningRuns/r1"
OTHER = "projects/p/locations/l/machineLearningRuns/r2"
_ids = iter(range(10**9))


def push(payload) -> CloudEvent:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    message_id = f"m{next(_ids)}"
    return CloudEvent(
        {"type": "google.cloud.pubsub.topic.v1.messagePublished", "id": message_id,
         "source": "//pubsub.googleapis.com/projects/p/topics/monitoring-alerts"},
        {"message": {"data": base64.b64encode(data).decode(), "messageId": message_id, "attributes": {}},
         "subscription": "projects/p/subscriptions/on_alert-monitoring-alerts"},
    )


def read(payload) -> Alert:
    return AlertMessage.model_validate(payload).alert()


def opened(run=RUN, event_id="degradation-1"):
    return alert_message(run, event_id, Transition.OPENED, "step time 260 ms is 30% above the baseline 200 ms",
                         "2026-01-01T00:00:00.000000Z").wire()


def closed(run=RUN, event_id="degradation-1"):
    return alert_message(run, event_id, Transition.CLOSED, "back within half the threshold",
                         "2026-01-01T00:10:00.000000Z").wire()


@pytest.fixture
def runs(embedded):
    for name in (RUN, OTHER):
        embedded.runs.create(MachineLearningRun(name=name, artifacts={"gcsPath": "gs://profiles/exp"}))
        for host in ("host0", "host1"):
            embedded.targets.create(ProfilerTarget(name=f"{name}/profilerTargets/{host}-0", hostname=host,
                                                   profiler_address=f"{host}.internal:9999"))
    return embedded


def events(services) -> dict[str, MonitoredEvent]:
    return {d["name"]: MonitoredEvent.model_validate({k: v for k, v in d.items() if not k.startswith("_")})
            for d in services.store.query(MonitoredEvent.collection)}


def auto_sessions(services) -> list[ProfilerSession]:
    return [s for s in (ProfilerSession.model_validate({k: v for k, v in d.items() if not k.startswith("_")})
                        for d in services.store.query(ProfilerSession.collection)) if s.auto_captured]


def test_open_alert_captures_every_target_and_links_both_ways(runs):
    assert handlers.on_alert(runs, push(opened())) is Outcome.OK
    (session,) = auto_sessions(runs)
    event = events(runs)[f"{RUN}/monitoredEvents/degradation-1"]
    assert session.kind is Kind.KIND_ON_DEMAND
    assert session.profiler_targets == ["host0-0", "host1-0"]
    assert session.monitored_events == [event.name]
    assert event.profiler_sessions == [session.name]
    assert event.ongoing and event.analyzer_reports[0].details.startswith("step time 260 ms")
    assert len(runs.bus.published[CAPTURE_REQUESTS]) == 2


def test_an_opened_event_is_told_once_with_what_was_decided(runs, clock):
    with capture_logs() as logged:
        handlers.on_alert(runs, push(opened()))
        handlers.on_alert(runs, push(opened()))
        handlers.on_alert(runs, push(closed()))
        clock.advance(60)
        handlers.on_alert(runs, push(opened(event_id="degradation-2")))
    assert [line["event"] for line in logged if line.get("notice")] == [
        "monitored event r1/degradation-1 opened: Step time degradation of r1; capturing r1/auto-degradation-1",
        "monitored event r1/degradation-2 opened: Step time degradation of r1; no capture: cooldown: the run's "
        "last automatic capture was 60s ago (cooldown 10m)"]


def test_closed_alert_ends_the_event_and_captures_nothing(runs):
    handlers.on_alert(runs, push(opened()))
    handlers.on_alert(runs, push(closed()))
    event = events(runs)[f"{RUN}/monitoredEvents/degradation-1"]
    assert event.end_time is not None
    assert len(auto_sessions(runs)) == 1


@pytest.mark.slow
def test_a_thousand_alerts_in_a_minute_capture_once(runs, clock):
    for _ in range(1000):
        handlers.on_alert(runs, push(opened()))
        clock.advance(0.05)
    assert len(auto_sessions(runs)) == 1
    event = events(runs)[f"{RUN}/monitoredEvents/degradation-1"]
    assert event.suppressed_count == 999
    assert len(event.suppressions) == MonitoredEvent.MAX_SUPPRESSIONS_KEPT
    assert event.suppressions[-1].reason.startswith("already captured for this event")


def test_two_runs_alerting_together_capture_once_each(runs):
    for _ in range(5):
        handlers.on_alert(runs, push(opened(RUN)))
        handlers.on_alert(runs, push(opened(OTHER)))
    assert sorted(s.name.rsplit("/profilerSessions", 1)[0] for s in auto_sessions(runs)) == [RUN, OTHER]


def test_flapping_within_the_cooldown_captures_once(runs, clock):
    handlers.on_alert(runs, push(opened(event_id="degradation-1")))
    clock.advance(60)
    handlers.on_alert(runs, push(closed(event_id="degradation-1")))
    clock.advance(60)
    handlers.on_alert(runs, push(opened(event_id="degradation-2")))
    assert len(auto_sessions(runs)) == 1
    second = events(runs)[f"{RUN}/monitoredEvents/degradation-2"]
    assert second.suppressions[0].reason.startswith("cooldown: the run's last automatic capture was 120s ago")
    clock.advance(600)
    handlers.on_alert(runs, push(opened(event_id="degradation-3")))
    assert len(auto_sessions(runs)) == 2


def test_hourly_cap_and_disabled_policy(runs, clock):
    set_policy(runs, RUN, AutoCapturePolicy(cooldown=timedelta(seconds=1), max_per_hour=2))
    for index in range(4):
        handlers.on_alert(runs, push(opened(event_id=f"e{index}")))
        clock.advance(5)
    assert len(auto_sessions(runs)) == 2
    assert events(runs)[f"{RUN}/monitoredEvents/e2"].suppressions[0].reason.startswith("hourly cap")
    set_policy(runs, OTHER, AutoCapturePolicy(enabled=False))
    handlers.on_alert(runs, push(opened(OTHER)))
    assert events(runs)[f"{OTHER}/monitoredEvents/degradation-1"].suppressions[0].reason == \
        "auto-capture is disabled for this run"


def test_alerts_beyond_the_runs_event_cap_are_dropped_counted_and_said(runs):
    services = dataclasses.replace(runs, settings=runs.settings.model_copy(
        update={"max_monitored_events_per_run": 3}))
    with capture_logs() as logged:
        accounts = [handle_alert(services, read(opened(event_id=f"e{i}")), f"m{i}") for i in range(12)]
        handle_alert(services, read(opened(run=OTHER)), "m-other")
        handle_alert(services, read(closed(event_id="e0")), "m-closed")  # events it has still change
    names = sorted(events(services))
    assert names == [*(f"{RUN}/monitoredEvents/e{i}" for i in range(3)), f"{OTHER}/monitoredEvents/degradation-1"]
    assert events(services)[f"{RUN}/monitoredEvents/e0"].end_time is not None
    reason = "event cap: the run has 3 monitored events (max 3, MLDIAG_MAX_MONITORED_EVENTS_PER_RUN)"
    assert accounts[3:] == [f"alert for {RUN}/monitoredEvents/e{i}: dropped ({reason})" for i in range(3, 12)]
    state = describe_state(services, RUN)["monitoredEvents"]
    assert state["count"] == 3 and state["max"] == 3 and state["dropped"] == 9
    assert state["lastDropped"]["reason"] == reason and state["lastDropped"]["alert"].startswith("on_alert:")
    assert [line["dropped"] for line in logged if line["event"] == "alerts of r1 dropped"] == [1]
    assert describe_state(services, OTHER)["monitoredEvents"] == {"count": 1, "max": 3, "dropped": 0}


def test_concurrent_alerts_cannot_both_capture(runs):
    barrier = threading.Barrier(4)

    def fire(event_id):
        barrier.wait()
        handlers.on_alert(runs, push(opened(event_id=event_id)))

    threads = [threading.Thread(target=fire, args=(f"c{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(auto_sessions(runs)) == 1
    assert sum(e.suppressed_count for e in events(runs).values()) == 3


INCIDENT = {
    "incident": {
        "incident_id": "0.n1n2n3n4n5n6",
        "scoping_project_id": "p",
        "scoping_project_number": 12345,
        "url": "https://console.cloud.google.com/monitoring/alerting/incidents/0.n1n2n3n4n5n6?project=p",
        "started_at": 1767225600,
        "ended_at": None,
        "state": "open",
        "summary": "Duty cycle for r1 dropped below 70% for 5 minutes.",
        "apigee_proxy": None,
        "observed_value": "0.61",
        "resource": {"type": "k8s_container", "labels": {"cluster_name": "tpu", "mldiag_run": "r1",
                                                          "mldiag_targets": "host1-0"}},
        "resource_type_display_name": "Kubernetes Container",
        "resource_id": "",
        "resource_display_name": "trainer",
        "resource_name": "p trainer",
        "metric": {"type": "custom.googleapis.com/tpu/duty_cycle", "displayName": "Duty cycle",
                   "labels": {"accelerator": "v5e"}},
        "metadata": {"system_labels": {}, "user_labels": {}},
        "policy_name": "Training duty cycle",
        "policy_user_labels": {"team": "ml"},
        "documentation": {"content": "Check the input pipeline.", "mime_type": "text/markdown"},
        "condition": {"name": "projects/p/alertPolicies/1/conditions/2", "displayName": "Duty cycle < 70%"},
        "condition_name": "Duty cycle < 70%",
        "threshold_value": "0.7",
    },
    "version": "1.2",
}


def test_cloud_monitoring_incident_open_then_closed(runs):
    handlers.on_alert(runs, push(INCIDENT))
    (session,) = auto_sessions(runs)
    assert session.profiler_targets == ["host1-0"]
    (event,) = events(runs).values()
    assert event.display_name == "Training duty cycle / Duty cycle < 70%"
    assert event.analyzer_reports[0].recommended_actions[0].description == "Check the input pipeline."
    closed_incident = json.loads(json.dumps(INCIDENT))
    closed_incident["incident"].update(state="closed", ended_at=1767226200)
    handlers.on_alert(runs, push(closed_incident))
    (event,) = events(runs).values()
    assert event.end_time is not None and len(auto_sessions(runs)) == 1


@pytest.mark.parametrize(("payload", "reason"), [
    (b"{not json", "is not JSON"),
    ({"something": "else"}, "neither a MonitoredEvent message, a Cloud Monitoring incident nor a Prometheus alert"),
    ({"monitoredEvent": {}, "monitoredEventId": "e1"}, "names no run"),
    ({"run": "ghost", "monitoredEventId": "e1", "monitoredEvent": {"analyzerReports": [
        {"analyzer": "x", "detectionState": "DETECTED"}]}}, "does not exist"),
    ({"run": "r1", "monitoredEventId": "../x", "monitoredEvent": {}}, "monitoredEventId"),
    ({"run": "r1", "monitoredEventId": "e1", "monitoredEvent": {"type": "EXPLOSION"}}, "monitoredEvent.type"),
    ({"incident": {"incident_id": "1", "state": "open"}}, "names no run"),
    ({"incident": {"incident_id": "1", "state": "maybe", "resource": {"labels": {"mldiag_run": "r1"}}}},
     "neither 'open' nor 'closed'"),
])
def test_malformed_alerts_are_recorded_acknowledged_and_never_capture(runs, payload, reason):
    event = push(payload)
    assert handlers.on_alert(runs, event) is Outcome.REJECTED
    assert reason in runs.events.get("on_alert", event["id"]).error
    assert auto_sessions(runs) == []
    assert handlers.on_alert(runs, event) is Outcome.DUPLICATE


def test_run_without_targets_records_why_the_capture_failed(embedded):
    embedded.runs.create(MachineLearningRun(name=RUN, artifacts={"gcsPath": "gs://profiles/exp"}))
    assert handlers.on_alert(embedded, push(opened())) is Outcome.OK
    event = events(embedded)[f"{RUN}/monitoredEvents/degradation-1"]
    assert event.suppressions[-1].reason.startswith("capture failed: run r1 has no active profiler targets")
