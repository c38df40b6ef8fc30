"""The ``analyze_session`` handler on the embedded backend: real registration, real worker, the committed profiles."""

from __future__ import annotations

import dataclasses
import json
import re
import time

import pytest
from analysis_support import xplane
from structlog.testing import capture_logs

from mldiag.config import ANALYSIS_REQUESTS, dead_letter_topic
from mldiag.domain import AnalysisState, HealthStatus
from mldiag.domain.envelopes import Message, pubsub_cloud_event, storage_finalized_event
from mldiag.domain.names import parse_child
from mldiag.entrypoints import handlers
from mldiag.services.event_archive import Ignored, Outcome
from mldiag.services.registration import Registrar, parse_finalized
from mldiag.services import unit_of_work
from mldiag.services.resources.reanalysis import reanalyze

SESSION = "projects/p/locations/l/machineLearningRuns/run1/profilerSessions/s1"
FOLDER = "gs://profiles/run1/plugins/profile/s1"


def _add_file(services, data: bytes, host: str = "host0") -> None:
    uri = f"{FOLDER}/{host}.xplane.pb"
    written = services.blobs.write_bytes(uri, data)
    handlers.register_session(services, storage_finalized_event({
        "bucket": "profiles", "name": uri.removeprefix("gs://profiles/"), "generation": written.generation,
        "size": str(written.size)}))


def _settle(services, clock) -> Message:
    clock.advance(services.settings.settle_seconds + 1)
    assert Registrar(services).settle_due() == 1
    return services.bus.published[ANALYSIS_REQUESTS][-1]


def _deliver(services, message: Message, attempt: int = 1) -> Outcome:
    event = pubsub_cloud_event(project="p", topic=ANALYSIS_REQUESTS, subscription="analyze_session",
                               message=dataclasses.replace(message, delivery_attempt=attempt),
                               published=services.now())
    return handlers.analyze_session(services, event)


def _analysis(services):
    return services.sessions.get(SESSION).analysis


def _error(services, message: Message) -> str:
    return services.events.get("analyze_session", message.message_id).error


@pytest.fixture
def requested(embedded, clock) -> Message:
    """An input-bound session, registered from the bucket and settled: its analysis request."""
    _add_file(embedded, xplane("input_bound").read_bytes())
    return _settle(embedded, clock)


@pytest.mark.slow
def test_a_settled_session_is_analysed_and_its_reports_land_next_to_it(embedded, requested):
    assert json.loads(requested.data) == {"version": 1, "session": SESSION, "merge": False,
                                          "generationSet": _analysis(embedded).generation_set,
                                          "hostFiles": {"host0": f"{FOLDER}/host0.xplane.pb"}}
    with capture_logs() as logged:
        assert _deliver(embedded, requested) is Outcome.OK
    analysis = _analysis(embedded)
    assert analysis.state is AnalysisState.DONE and analysis.health is HealthStatus.NEEDS_ATTENTION
    started, done = [line["event"] for line in logged if line.get("notice")]
    assert started == "analysis of run1/s1 started (1 host file)"
    assert re.fullmatch(r"analysis of run1/s1 done: NEEDS_ATTENTION, step time \d+\.\d ms; "
                        r"top finding P0 Host-bound: compute idle .*", done)
    reports = f"{FOLDER}/mldiag/{analysis.generation_set}"
    assert (analysis.report_uri, analysis.analysis_uri) == (f"{reports}/summary.html", f"{reports}/analysis.json")
    assert analysis.reasoner == "offline" and analysis.error == "" and analysis.attempts == 1
    assert analysis.top_finding.startswith("P0 Host-bound: compute idle")
    assert analysis.start_time <= analysis.end_time
    written = json.loads(embedded.blobs.read_bytes(analysis.analysis_uri))
    assert analysis.step_time_ms == written["metrics"]["step_time_ms"] > 0
    latest = embedded.runs.get(SESSION.rsplit("/", 2)[0]).latest_analysis
    assert (latest.profiler_session, latest.health, latest.step_time_ms, latest.top_finding) == (
        SESSION, HealthStatus.NEEDS_ATTENTION, analysis.step_time_ms, analysis.top_finding)
    assert written["status"] == "NEEDS_ATTENTION" and written["followups"]
    page = embedded.blobs.read_bytes(analysis.report_uri).decode()
    assert "NEEDS ATTENTION" in page and 'id="viewer-link"' in page and "session_path=gs%3A%2F%2Fprofiles" in page
    with pytest.raises(Ignored):  # the reports' own finalize events register nothing
        parse_finalized({"bucket": "profiles", "name": analysis.report_uri.removeprefix("gs://profiles/"),
                         "generation": "1", "size": "10"}, 1 << 30)


@pytest.mark.slow
def test_a_rerun_that_overwrites_the_files_keeps_the_earlier_report(embedded, clock, requested):
    assert _deliver(embedded, requested) is Outcome.OK
    first = _analysis(embedded)
    first_page = embedded.blobs.read_bytes(first.report_uri)

    clock.advance(60)
    _add_file(embedded, xplane("compute_bound").read_bytes())  # the job ran again: same session, new file
    registered = embedded.events.list(function="register_session")[0]
    assert registered.detail.startswith("session s1 of run run1 received a newer profile (generation ")
    assert registered.detail.endswith(f"; the earlier analysis is kept at {first.report_uri}")

    assert _deliver(embedded, _settle(embedded, clock)) is Outcome.OK
    session = embedded.sessions.get(SESSION)
    latest = session.analysis
    assert latest.state is AnalysisState.DONE and latest.generation_set != first.generation_set
    assert latest.attempts == 1 and latest.report_uri == f"{FOLDER}/mldiag/{latest.generation_set}/summary.html"
    assert session.earlier_analyses == [first]
    assert embedded.blobs.read_bytes(first.report_uri) == first_page
    assert json.loads(embedded.blobs.read_bytes(first.analysis_uri))["status"] == "NEEDS_ATTENTION"
    assert embedded.blobs.read_bytes(latest.report_uri) != first_page


@pytest.mark.slow
def test_analysing_the_same_files_again_lists_no_earlier_analysis(embedded, requested):
    assert _deliver(embedded, requested) is Outcome.OK
    reanalyze(embedded, parse_child(SESSION))
    assert _deliver(embedded, embedded.bus.published[ANALYSIS_REQUESTS][-1]) is Outcome.OK
    assert embedded.sessions.get(SESSION).earlier_analyses == []


@pytest.mark.slow
def test_one_analysis_per_session_and_set_of_files(embedded, requested):
    assert _deliver(embedded, requested) is Outcome.OK
    assert _deliver(embedded, requested) is Outcome.DUPLICATE  # the same message again
    again = dataclasses.replace(requested, message_id="another-publish")
    assert _deliver(embedded, again) is Outcome.IGNORED
    assert "already DONE" in embedded.events.get("analyze_session", "another-publish").detail
    assert _analysis(embedded).attempts == 1


def test_a_request_for_files_the_session_no_longer_holds_is_dropped(embedded, requested):
    _add_file(embedded, xplane("compute_bound").read_bytes())  # a new generation, not settled yet
    assert _deliver(embedded, requested) is Outcome.IGNORED
    assert "stale request" in embedded.events.get("analyze_session", requested.message_id).detail
    assert _analysis(embedded).state is AnalysisState.PENDING


def test_an_unreadable_profile_fails_for_good_with_the_reason(embedded, clock):
    _add_file(embedded, b"\x0a\x05hello this is not an XSpace")
    request = _settle(embedded, clock)
    assert _deliver(embedded, request) is Outcome.REJECTED
    analysis = _analysis(embedded)
    assert analysis.state is AnalysisState.FAILED and "unreadable profile" in analysis.error
    assert "unreadable profile" in _error(embedded, request)


@pytest.mark.slow
def test_a_timed_out_analysis_is_recorded_and_runs_again_on_request(embedded, requested):
    patient = embedded.settings
    embedded.settings = patient.model_copy(update={"analysis_timeout_seconds": 0.3})
    assert _deliver(embedded, requested) is Outcome.REJECTED
    failed = _analysis(embedded)
    assert failed.state is AnalysisState.FAILED and "did not finish within 0.3 s" in failed.error
    assert _deliver(embedded, dataclasses.replace(requested, message_id="redelivered")) is Outcome.IGNORED

    embedded.settings = patient
    assert reanalyze(embedded, parse_child(SESSION)).analysis.state is AnalysisState.PENDING
    rerun = embedded.bus.published[ANALYSIS_REQUESTS][-1]
    assert rerun.message_id != requested.message_id and json.loads(rerun.data) == json.loads(requested.data)
    assert _deliver(embedded, rerun) is Outcome.OK
    done = _analysis(embedded)
    assert done.state is AnalysisState.DONE and done.attempts == 2 and done.error == ""


@pytest.mark.slow
def test_a_transient_failure_is_retried_and_the_last_attempt_records_it(embedded, requested, monkeypatch):
    download = embedded.blobs.download
    failures = iter([ConnectionError("storage unavailable")])

    def flaky(uri, destination):
        for failure in failures:
            raise failure
        return download(uri, destination)

    monkeypatch.setattr(embedded.blobs, "download", flaky)
    with pytest.raises(ConnectionError):
        _deliver(embedded, requested)
    retrying = _analysis(embedded)
    assert retrying.state is AnalysisState.PENDING and "will retry: ConnectionError" in retrying.error
    assert _deliver(embedded, requested, attempt=2) is Outcome.OK
    assert _analysis(embedded).state is AnalysisState.DONE

    monkeypatch.setattr(embedded.blobs, "download", lambda uri, destination: (_ for _ in ()).throw(
        ConnectionError("storage unavailable")))
    reanalyze(embedded, parse_child(SESSION))
    last = embedded.bus.published[ANALYSIS_REQUESTS][-1]
    assert _deliver(embedded, last, attempt=embedded.settings.max_delivery_attempts) is Outcome.REJECTED
    assert _analysis(embedded).state is AnalysisState.FAILED


def _deliver_through_functions_framework(services, message: Message) -> Outcome:
    """A push as functions-framework hands it to the function: Pub/Sub's deliveryAttempt is gone."""
    event = pubsub_cloud_event(project="p", topic=ANALYSIS_REQUESTS, subscription="analyze_session",
                               message=message, published=services.now())
    del event.data["deliveryAttempt"]
    return handlers.analyze_session(services, event)


def test_the_last_delivery_is_known_from_the_event_archive_when_the_push_omits_it(embedded, requested,
                                                                                  monkeypatch):
    monkeypatch.setattr(embedded.blobs, "download", lambda uri, destination: (_ for _ in ()).throw(
        ConnectionError("storage unavailable")))
    for _ in range(embedded.settings.max_delivery_attempts - 1):
        with pytest.raises(ConnectionError):
            _deliver_through_functions_framework(embedded, requested)
        assert _analysis(embedded).state is AnalysisState.PENDING
    assert _deliver_through_functions_framework(embedded, requested) is Outcome.REJECTED
    failed = _analysis(embedded)
    assert failed.state is AnalysisState.FAILED and "storage unavailable" in failed.error


def _dead_letter(services, message: Message) -> Outcome:
    """``message`` as Pub/Sub forwards it once every delivery attempt failed."""
    letter = Message(message.data, {**message.attributes, "CloudPubSubDeadLetterSourceDeliveryCount": "5",
                                    "CloudPubSubDeadLetterSourceSubscription": "analyze_session"}, "dead-1")
    return handlers.record_dead_letter(services, pubsub_cloud_event(
        project="p", topic=dead_letter_topic(ANALYSIS_REQUESTS), subscription="record_dead_letter",
        message=letter, published=services.now()))


def test_a_request_that_exhausted_its_retries_fails_the_analysis_through_its_dead_letter(
        embedded, requested, monkeypatch):
    # In the cloud the function sees every attempt as the first (the push's delivery count does not
    # reach it), so the dead letter is what ends the wait.
    monkeypatch.setattr(embedded.blobs, "download", lambda uri, destination: (_ for _ in ()).throw(
        ConnectionError("storage unavailable")))
    for _ in range(2):
        with pytest.raises(ConnectionError):
            _deliver(embedded, requested, attempt=1)
    assert _analysis(embedded).state is AnalysisState.PENDING

    assert _dead_letter(embedded, requested) is Outcome.OK
    analysis = _analysis(embedded)
    assert analysis.state is AnalysisState.FAILED
    assert analysis.error == "gave up after every delivery attempt: ConnectionError: storage unavailable"
    assert _dead_letter(embedded, requested) is Outcome.DUPLICATE  # the same dead letter, delivered again


def test_a_dead_letter_leaves_a_newer_request_for_the_same_files_alone(embedded, requested, monkeypatch):
    monkeypatch.setattr(embedded.blobs, "download", lambda uri, destination: (_ for _ in ()).throw(
        ConnectionError("storage unavailable")))
    with pytest.raises(ConnectionError):
        _deliver(embedded, requested)
    reanalyze(embedded, parse_child(SESSION))  # asked again before the old request's dead letter came
    assert _dead_letter(embedded, requested) is Outcome.OK
    assert _analysis(embedded).state is AnalysisState.PENDING


@pytest.mark.parametrize(("payload", "outcome", "says"), [
    ({"session": SESSION}, Outcome.REJECTED, "generationSet: Field required"),
    ({"session": SESSION, "generationSet": "g", "hostFiles": {"h": "gs://profiles/x.txt"}},
     Outcome.REJECTED, "hostFiles"),
    ({"session": SESSION + "-gone", "generationSet": "g", "hostFiles": {"h": "gs://profiles/h.xplane.pb"}},
     Outcome.IGNORED, "no longer exists"),
])
def test_a_request_that_cannot_be_served_is_acknowledged_with_the_reason(embedded, payload, outcome, says):
    message = Message(data=json.dumps(payload).encode(), message_id=f"m-{len(json.dumps(payload))}")
    assert _deliver(embedded, message) is outcome
    record = embedded.events.get("analyze_session", message.message_id)
    assert says in record.error + record.detail


def test_a_file_of_zeros_is_refused_before_any_copy_is_made(embedded, clock, monkeypatch):
    uri = f"{FOLDER}/host0.xplane.pb"
    written = embedded.blobs.write_bytes(uri, b"")
    with open(embedded.blobs.path_for(uri), "r+b") as sparse:
        sparse.truncate(2 << 30)  # 2 GiB that take no disk
    handlers.register_session(embedded, storage_finalized_event({
        "bucket": "profiles", "name": uri.removeprefix("gs://profiles/"), "generation": written.generation,
        "size": str(2 << 30)}))
    request = _settle(embedded, clock)
    copies = []
    monkeypatch.setattr(embedded.blobs, "download", lambda *arguments: copies.append(arguments))

    started = time.monotonic()
    assert _deliver(embedded, request) is Outcome.REJECTED
    assert time.monotonic() - started < 1.0 and copies == []
    failed = _analysis(embedded)
    assert failed.state is AnalysisState.FAILED
    assert failed.error == (f"unreadable profile: {uri} is not an XSpace profile (.xplane.pb): "
                            "field 0 at byte 0 is not one of XSpace's")


@pytest.mark.slow
def test_a_finished_analysis_publishes_its_fleet_record_beside_the_notification(embedded, requested):
    from mldiag.config import ANALYSIS_EVENTS
    from mldiag.domain.fleet import FLEET_RECORD_TYPE, FleetRecord

    unit_of_work.change(embedded, lambda unit: unit.runs.update("projects/p/locations/l/machineLearningRuns/run1",
                                                                lambda run: setattr(run, "labels", {"team": "infra"})))
    assert _deliver(embedded, requested) is Outcome.OK

    published = embedded.bus.published[ANALYSIS_EVENTS]
    kinds = [message.attributes["ce-type"] for message in published]
    assert kinds == ["dev.mldiag.analysis.v1.completed", FLEET_RECORD_TYPE]
    record = FleetRecord.model_validate(json.loads(published[1].data))
    analysis = _analysis(embedded)
    assert record.record_id == f"{SESSION}@{analysis.generation_set}" and record.analyzed_at == analysis.end_time
    assert published[1].attributes["ce-subject"] == SESSION
    assert [(label.key, label.value) for label in record.labels] == [("team", "infra")]
    assert record.top_finding == analysis.top_finding and record.lost_ms > 0


def test_the_notifier_leaves_a_fleet_record_alone(embedded):
    from mldiag.config import ANALYSIS_EVENTS
    from mldiag.domain.fleet import FLEET_RECORD_TYPE
    message = Message(data=b'{"record_id": "x"}', attributes={"ce-type": FLEET_RECORD_TYPE}, message_id="m1")
    event = pubsub_cloud_event(project="p", topic=ANALYSIS_EVENTS, subscription="deliver_notifications",
                               message=message, published=embedded.now())

    assert handlers.deliver_notifications(embedded, event) is Outcome.OK
    assert embedded.events.get("deliver_notifications", "m1").detail == f"{FLEET_RECORD_TYPE}: not a notification"
