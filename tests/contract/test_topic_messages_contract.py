"""Every topic's messages: what its producers publish, its consumer reads (``mldiag.domain.messages``).

Each test runs a real producer on the embedded services, takes the message the
bus was given, and hands it, as Pub/Sub would deliver it, to the function
subscribed to the topic: the function must read it (never reject it) and find
in it what the producer meant.
"""

from __future__ import annotations

import dataclasses
import socket

import pytest

from mldiag.config import (
    ANALYSIS_EVENTS,
    ANALYSIS_REQUESTS,
    CAPTURE_REQUESTS,
    HOST_ANALYSIS_REQUESTS,
    MAINTENANCE_TICKS,
    MONITORING_ALERTS,
)
from mldiag.domain import AnalysisState, MachineLearningRun, ProfilerTarget
from mldiag.domain.degradation import MetricPoint
from mldiag.domain.envelopes import Message, pubsub_cloud_event, storage_finalized_event
from mldiag.domain.fleet import FleetRecord
from mldiag.domain.host_analyses import HostAnalyses, HostProgress, HostState
from mldiag.domain.messages import (
    EVENT_OPENED,
    AlertMessage,
    AnalysisRequest,
    CaptureTaskRequest,
    HostAnalysisRequest,
    MaintenanceTick,
    Notification,
    read_alert,
    read_fleet_record,
)
from mldiag.domain.names import parse_run
from mldiag.entrypoints import handlers
from mldiag.services import fleet, unit_of_work
from mldiag.services.capture.requests import CaptureRequest, capture
from mldiag.services.event_archive import Outcome
from mldiag.services.fan_out import counter_key, record_host
from mldiag.services.monitoring.alert_webhooks import receive_prometheus
from mldiag.services.monitoring.metrics import report_metrics
from mldiag.services.registration import Registrar

RUN = "projects/p/locations/l/machineLearningRuns/run1"
SESSION = f"{RUN}/profilerSessions/s1"
FOLDER = "gs://profiles/run1/plugins/profile/s1"


def deliver(services, topic: str, message: Message, handler) -> Outcome:
    event = pubsub_cloud_event(project="p", topic=topic, subscription=topic, message=message,
                               published=services.now())
    return handler(services, event)


def only(services, topic: str) -> Message:
    (message,) = services.bus.published[topic]
    return message


def register(services, *hosts: str) -> None:
    for host in hosts:
        written = services.blobs.write_bytes(f"{FOLDER}/{host}.xplane.pb", b"not read before the analysis")
        handlers.register_session(services, storage_finalized_event({
            "bucket": "profiles", "name": f"run1/plugins/profile/s1/{host}.xplane.pb",
            "generation": written.generation, "size": str(written.size)}))


@pytest.fixture
def settled(embedded, clock):
    """Two hosts' files registered, their session settled: one analysis request published."""
    register(embedded, "h0", "h1")
    clock.advance(embedded.settings.settle_seconds + 1)
    assert Registrar(embedded).settle_due() == 1
    return embedded


def test_the_analysis_request_registration_publishes_is_the_one_analyze_session_serves(settled):
    message = only(settled, ANALYSIS_REQUESTS)
    request = AnalysisRequest.read(message)
    session = settled.sessions.get(SESSION)
    assert (request.session, request.generation_set, request.merge) == (SESSION, session.generation_set(), False)
    assert request.host_files == {"h0": f"{FOLDER}/h0.xplane.pb", "h1": f"{FOLDER}/h1.xplane.pb"}
    assert message.attributes == {"session": SESSION, "run": RUN, "generationSet": request.generation_set}

    assert deliver(settled, ANALYSIS_REQUESTS, message, handlers.analyze_session) is Outcome.OK  # it fans out
    assert settled.sessions.get(SESSION).analysis.state is AnalysisState.RUNNING


def test_the_host_requests_a_fan_out_publishes_are_the_ones_analyze_host_serves(settled):
    deliver(settled, ANALYSIS_REQUESTS, only(settled, ANALYSIS_REQUESTS), handlers.analyze_session)

    requests = [HostAnalysisRequest.read(m) for m in settled.bus.published[HOST_ANALYSIS_REQUESTS]]
    assert sorted((r.host, r.host_file) for r in requests) == [("h0", f"{FOLDER}/h0.xplane.pb"),
                                                              ("h1", f"{FOLDER}/h1.xplane.pb")]
    assert {r.generation_set for r in requests} == {settled.sessions.get(SESSION).generation_set()}


def test_the_merge_request_the_last_host_publishes_is_an_analysis_request_to_merge(settled):
    request = AnalysisRequest.read(only(settled, ANALYSIS_REQUESTS))
    progress = HostAnalyses.of(request.session, request.generation_set, request.host_files)
    settled.store.set(HostAnalyses.collection, counter_key(request.session, request.generation_set),
                      progress.to_document())
    for host, uri in request.host_files.items():
        record_host(settled, HostAnalysisRequest(session=request.session, generation_set=request.generation_set,
                                                 host=host, host_file=uri),
                    HostProgress(file=uri, state=HostState.DONE, evidence_uri=f"{FOLDER}/mldiag/{host}.json"))

    merge = AnalysisRequest.read(settled.bus.published[ANALYSIS_REQUESTS][-1])
    assert merge.merge and merge.host_files == request.host_files and merge.session == request.session


def test_a_capture_request_names_the_task_dispatch_capture_runs(embedded):
    embedded.runs.create(MachineLearningRun(name=RUN, artifacts={"gcsPath": "gs://profiles"}))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    embedded.targets.create(ProfilerTarget(name=f"{RUN}/profilerTargets/t-0", hostname="h",
                                           profiler_address=f"127.0.0.1:{closed}"))
    operation = capture(embedded, parse_run(RUN), "s2", CaptureRequest())

    message = only(embedded, CAPTURE_REQUESTS)
    request = CaptureTaskRequest.read(message)
    assert (request.operation, request.target, request.run) == (operation.name, "t-0", RUN)
    assert message.attributes == {"run": RUN, "target": "t-0", "action": request.action}
    assert deliver(embedded, CAPTURE_REQUESTS, message, handlers.dispatch_capture) is Outcome.OK
    assert embedded.operations.get(operation.name).done  # the task ran (and failed to connect)


def test_the_detector_s_alert_is_the_one_on_alert_records(embedded):
    embedded.runs.create(MachineLearningRun(name=RUN, artifacts={"gcsPath": "gs://profiles"}))
    report_metrics(embedded, RUN, [MetricPoint(step=i, step_time_seconds=0.2) for i in range(60)]
                   + [MetricPoint(step=60 + i, step_time_seconds=0.4) for i in range(20)])

    message = only(embedded, MONITORING_ALERTS)
    alert = read_alert(message)
    assert (alert.run, alert.event_id, alert.open) == (RUN, "degradation-1", True)
    assert message.ordering_key == RUN
    assert deliver(embedded, MONITORING_ALERTS, message, handlers.on_alert) is Outcome.OK
    assert embedded.monitored_events.get(f"{RUN}/monitoredEvents/degradation-1").ongoing


def test_an_alertmanager_alert_goes_on_as_the_alert_the_webhook_read(embedded):
    embedded.runs.create(MachineLearningRun(name=RUN, display_name="training", artifacts={"gcsPath": "gs://p"}))
    (answer,) = receive_prometheus(embedded, "alertmanager", {"version": "4", "alerts": [{
        "status": "firing", "labels": {"alertname": "StepTimeHigh", "mldiag_run": "training"},
        "annotations": {"summary": "step time up"}, "startsAt": "2026-01-01T00:00:00Z", "fingerprint": "f1"}]})

    message = only(embedded, MONITORING_ALERTS)
    assert set(AlertMessage.decode(message.data).wire()) == {"version", "run", "monitoredEventId", "monitoredEvent"}
    alert = read_alert(message)
    assert alert.run == RUN and alert.open and answer["monitoredEvent"].endswith(f"/{alert.event_id}")
    assert alert.display_name == "StepTimeHigh / step time up"
    assert deliver(embedded, MONITORING_ALERTS, message, handlers.on_alert) is Outcome.OK
    assert embedded.monitored_events.get(answer["monitoredEvent"]).ongoing


def test_the_opened_event_s_notification_is_the_one_deliver_notifications_sends(embedded):
    embedded.runs.create(MachineLearningRun(name=RUN, artifacts={"gcsPath": "gs://profiles"}))
    report_metrics(embedded, RUN, [MetricPoint(step=i, step_time_seconds=0.2) for i in range(60)]
                   + [MetricPoint(step=60 + i, step_time_seconds=0.4) for i in range(20)])
    deliver(embedded, MONITORING_ALERTS, only(embedded, MONITORING_ALERTS), handlers.on_alert)

    message = only(embedded, ANALYSIS_EVENTS)
    assert Notification.carried_by(message) and read_fleet_record(message) is None
    notification = Notification.read(message)
    assert notification.type == EVENT_OPENED and notification.data.event == f"{RUN}/monitoredEvents/degradation-1"
    assert deliver(embedded, ANALYSIS_EVENTS, message, handlers.deliver_notifications) is Outcome.OK
    assert deliver(embedded, ANALYSIS_EVENTS, message, handlers.record_fleet) is Outcome.OK  # not its kind


def test_the_fleet_record_is_the_row_record_fleet_writes(embedded):
    record = FleetRecord(record_id=f"{SESSION}@g1", run=RUN, session=SESSION, generation_set="g1",
                         analyzed_at=embedded.now(), capture_kind="scanned", status="OPTIMAL", host_count=1,
                         device_count=1)
    unit_of_work.run(embedded, lambda unit: fleet.publish_record(unit, embedded, record))

    message = only(embedded, ANALYSIS_EVENTS)
    assert read_fleet_record(message) == record and not Notification.carried_by(message)
    assert deliver(embedded, ANALYSIS_EVENTS, message, handlers.record_fleet) is Outcome.OK
    assert deliver(embedded, ANALYSIS_EVENTS, message, handlers.deliver_notifications) is Outcome.OK  # not its kind
    assert fleet.query(embedded, "SELECT record_id FROM fleet_records")["rows"] == [[record.record_id]]


@pytest.mark.parametrize("tick", [MaintenanceTick(source="mldiag up").outgoing().data, b"{}"],
                         ids=["mldiag up", "Cloud Scheduler"])
def test_a_tick_from_either_clock_runs_maintenance(embedded, tick):
    assert MaintenanceTick.decode(tick).version == 1
    assert deliver(embedded, MAINTENANCE_TICKS, Message(data=tick, message_id="t1"), handlers.maintenance) is Outcome.OK


def test_a_message_of_a_version_this_deployment_does_not_read_is_rejected_saying_so(settled):
    message = only(settled, ANALYSIS_REQUESTS)
    newer = dataclasses.replace(message, data=message.data.replace(b'"version":1', b'"version":2'),
                                message_id="newer")

    assert deliver(settled, ANALYSIS_REQUESTS, newer, handlers.analyze_session) is Outcome.REJECTED
    assert settled.events.get("analyze_session", "newer").error == (
        "unreadable analysis-requests message: version 2 is not one this deployment reads")
