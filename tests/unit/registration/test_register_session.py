"""register_session on the embedded backend: layout, merging, idempotency, settling, bad input."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta

import pytest
from cloudevents.http import CloudEvent
from structlog.testing import capture_logs

from mldiag.entrypoints import handlers
from mldiag.config import ANALYSIS_REQUESTS
from mldiag.domain import (
    AnalysisState, AnalysisStatus, HealthStatus, Kind, MachineLearningRun, ProfilerSession, SessionPhase,
    TargetSession,
)
from mldiag.domain.capture import DEADLINE_GRACE
from mldiag.services.event_archive import Outcome
from mldiag.services.operator.maintenance import run_maintenance
from mldiag.services.registration import Registrar
from mldiag.services import unit_of_work
from mldiag.domain.envelopes import storage_finalized_event

RUN_FOLDER = "team/exp/run1/plugins/profile/s1"


def finalized(name: str, generation: int = 1, size: int = 1000, bucket: str = "profiles") -> CloudEvent:
    return storage_finalized_event({"bucket": bucket, "name": name, "generation": str(generation),
                                    "size": str(size), "contentType": "application/octet-stream"})


def deliver(services, event: CloudEvent) -> Outcome:
    return handlers.register_session(services, event)


def analysis_requests(services) -> list[dict]:
    return [json.loads(m.data) for m in services.bus.published[ANALYSIS_REQUESTS]]


def only_session(services) -> ProfilerSession:
    sessions = services.store.query(ProfilerSession.collection)
    assert len(sessions) == 1
    return ProfilerSession.model_validate({k: v for k, v in sessions[0].items() if not k.startswith("_")})


def test_scanned_session_appears_under_an_inferred_run(embedded):
    assert deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb")) is Outcome.OK
    session = only_session(embedded)
    assert session.name == "projects/p/locations/l/machineLearningRuns/run1/profilerSessions/s1"
    assert session.kind is Kind.KIND_SCANNED
    assert session.storage_folder_uri == f"gs://profiles/{RUN_FOLDER}"
    assert session.host_files["host0"].size_bytes == 1000
    assert session.target_sessions["host0"].session_phase is SessionPhase.SUCCEEDED
    run = embedded.runs.get("projects/p/locations/l/machineLearningRuns/run1")
    assert run.artifacts.gcs_path == "gs://profiles/team/exp"
    assert analysis_requests(embedded) == []  # not settled yet


def test_a_new_session_is_told_once_however_many_files_come(embedded):
    with capture_logs() as logged:
        deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb"))
        deliver(embedded, finalized(f"{RUN_FOLDER}/host1.xplane.pb"))
        deliver(embedded, finalized(f"{RUN_FOLDER}/host1.xplane.pb", generation=2))
    assert [(line["event"], line["session"]) for line in logged if line.get("notice")] == [
        ("session run1/s1 registered from gs://profiles/team/exp/run1/plugins/profile/s1",
         "projects/p/locations/l/machineLearningRuns/run1/profilerSessions/s1")]


def test_a_session_in_another_bucket_registers_there(embedded):
    assert deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb", bucket="other")) is Outcome.OK
    assert only_session(embedded).storage_folder_uri == f"gs://other/{RUN_FOLDER}"
    run = embedded.runs.get("projects/p/locations/l/machineLearningRuns/run1")
    assert run.artifacts.gcs_path == "gs://other/team/exp"


def test_session_joins_the_run_registered_with_that_gcs_path(embedded):
    embedded.runs.create(MachineLearningRun(name="projects/p/locations/l/machineLearningRuns/run1",
                                            artifacts={"gcsPath": "gs://profiles/team/exp/"}))
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb"))
    assert len(embedded.store.query(MachineLearningRun.collection)) == 1
    assert only_session(embedded).name.startswith("projects/p/locations/l/machineLearningRuns/run1/")


def test_same_folder_name_under_another_path_gets_its_own_run(embedded):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb"))
    deliver(embedded, finalized("other/run1/plugins/profile/s1/host0.xplane.pb"))
    runs = embedded.store.query(MachineLearningRun.collection)
    assert sorted(r["artifacts"]["gcsPath"] for r in runs) == ["gs://profiles/other", "gs://profiles/team/exp"]


def test_tensorboard_variant_and_trace_siblings(embedded):
    deliver(embedded, finalized("exp/run2/tensorboard/plugins/profile/s9/h.xplane.pb"))
    deliver(embedded, finalized("exp/run2/tensorboard/plugins/profile/s9/h.trace.json.gz"))
    session = only_session(embedded)
    assert session.name.endswith("machineLearningRuns/run2/profilerSessions/s9")
    assert list(session.host_files) == ["h"]
    assert list(session.extra_files) == ["h.trace.json.gz"]


def test_multi_host_session_settles_into_exactly_one_analysis_request(embedded, clock):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb"))
    clock.advance(10)
    deliver(embedded, finalized(f"{RUN_FOLDER}/host1.xplane.pb"))
    clock.advance(25)  # 35 s after host0, 25 s after host1: not settled
    run_maintenance(embedded)
    assert analysis_requests(embedded) == []
    clock.advance(10)
    run_maintenance(embedded)
    run_maintenance(embedded)
    requests = analysis_requests(embedded)
    assert len(requests) == 1
    assert set(requests[0]["hostFiles"]) == {"host0", "host1"}
    session = only_session(embedded)
    assert session.analysis.state is AnalysisState.PENDING
    assert session.profiler_targets == ["host0", "host1"]


def test_a_late_host_reopens_the_session_and_requests_again(embedded, clock):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb"))
    clock.advance(31)
    run_maintenance(embedded)
    deliver(embedded, finalized(f"{RUN_FOLDER}/host1.xplane.pb"))
    clock.advance(31)
    run_maintenance(embedded)
    assert [sorted(r["hostFiles"]) for r in analysis_requests(embedded)] == [["host0"], ["host0", "host1"]]


@pytest.mark.parametrize("kind", [Kind.KIND_ON_DEMAND, Kind.KIND_SNAPSHOT, Kind.KIND_PROGRAMMATIC])
def test_expected_hosts_all_present_requests_without_waiting(embedded, kind):
    run = embedded.runs.create(MachineLearningRun(name="projects/p/locations/l/machineLearningRuns/run1",
                                                  artifacts={"gcsPath": "gs://profiles/team/exp"}))
    embedded.sessions.create(ProfilerSession(name=f"{run.name}/profilerSessions/s1", kind=kind,
                                             profiler_targets=["a", "b"]))
    deliver(embedded, finalized(f"{RUN_FOLDER}/a.xplane.pb"))
    assert analysis_requests(embedded) == []
    deliver(embedded, finalized(f"{RUN_FOLDER}/b.xplane.pb"))
    assert len(analysis_requests(embedded)) == 1


def _capture_session(services, clock, *targets: str) -> None:
    """A capture's session as ``capture`` makes it: every target ACTIVE from now, for 2 s."""
    run = services.runs.create(MachineLearningRun(name="projects/p/locations/l/machineLearningRuns/run1",
                                                  artifacts={"gcsPath": "gs://profiles/team/exp"}))
    services.sessions.create(ProfilerSession(
        name=f"{run.name}/profilerSessions/s1", kind=Kind.KIND_ON_DEMAND, profiler_targets=list(targets),
        target_sessions={t: TargetSession(start_time=clock(), session_phase=SessionPhase.ACTIVE) for t in targets},
        duration=timedelta(seconds=2)))


def test_a_capture_waits_for_every_target_rather_than_the_settle_window(embedded, clock):
    _capture_session(embedded, clock, "a", "b")
    deliver(embedded, finalized(f"{RUN_FOLDER}/a.xplane.pb"))
    clock.advance(embedded.settings.settle_seconds + 5)  # b is slow to write: the window has passed
    assert not Registrar(embedded).settle_is_due()
    run_maintenance(embedded)
    assert analysis_requests(embedded) == []
    deliver(embedded, finalized(f"{RUN_FOLDER}/b.xplane.pb"))
    assert [sorted(r["hostFiles"]) for r in analysis_requests(embedded)] == [["a", "b"]]


def test_a_file_from_a_capture_whose_every_target_failed_settles_by_the_window(embedded, clock):
    _capture_session(embedded, clock, "a")

    def fail(session: ProfilerSession) -> None:
        session.target_sessions["a"].session_phase = SessionPhase.FAILED

    session = "projects/p/locations/l/machineLearningRuns/run1/profilerSessions/s1"
    unit_of_work.change(embedded, lambda unit: unit.sessions.update(session, fail))
    deliver(embedded, finalized(f"{RUN_FOLDER}/a.xplane.pb"))  # written after all, past the capture's timeout
    clock.advance(embedded.settings.settle_seconds + 1)
    run_maintenance(embedded)
    assert [sorted(r["hostFiles"]) for r in analysis_requests(embedded)] == [["a"]]


def test_a_capture_whose_target_never_ends_settles_at_its_deadline(embedded, clock):
    _capture_session(embedded, clock, "a", "b")
    deliver(embedded, finalized(f"{RUN_FOLDER}/a.xplane.pb"))
    clock.advance(2 + DEADLINE_GRACE.total_seconds() - 1)
    run_maintenance(embedded)
    assert analysis_requests(embedded) == []
    clock.advance(1)
    assert Registrar(embedded).settle_is_due()
    run_maintenance(embedded)
    assert [sorted(r["hostFiles"]) for r in analysis_requests(embedded)] == [["a"]]


@pytest.mark.parametrize("order", list(itertools.permutations(range(2))))
def test_redelivered_and_reordered_events_converge(embedded, clock, order):
    events = [finalized(f"{RUN_FOLDER}/host{i}.xplane.pb") for i in range(2)]
    for index in [*order, *order, *reversed(order)]:
        deliver(embedded, events[index])
    clock.advance(31)
    run_maintenance(embedded)
    for index in order:
        assert deliver(embedded, events[index]) is Outcome.DUPLICATE
    session = only_session(embedded)
    assert sorted(session.host_files) == ["host0", "host1"]
    assert len(analysis_requests(embedded)) == 1


def test_redelivery_of_an_applied_event_changes_nothing(embedded, clock):
    event = finalized(f"{RUN_FOLDER}/host0.xplane.pb")
    deliver(embedded, event)
    before = only_session(embedded)
    clock.advance(5)
    assert deliver(embedded, event) is Outcome.DUPLICATE
    # A different delivery id for the same object generation is absorbed by the session itself.
    event_again = storage_finalized_event(event.get_data(), event_id="another-delivery")
    assert deliver(embedded, event_again) is Outcome.OK
    assert only_session(embedded) == before


def test_overwrite_with_a_new_generation_registers_again(embedded, clock):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=1))
    clock.advance(31)
    run_maintenance(embedded)
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=2, size=2000))
    clock.advance(31)
    run_maintenance(embedded)
    assert only_session(embedded).host_files["host0"].generation == "2"
    assert len(analysis_requests(embedded)) == 2


def _finish_analysis(services, state: AnalysisState, **fields) -> AnalysisStatus:
    """Record the outcome of the pending analysis, as the analysis job would."""
    def finish(session: ProfilerSession) -> None:
        for field, value in {"state": state, **fields}.items():
            setattr(session.analysis, field, value)

    def start(session: ProfilerSession) -> None:
        session.analysis.state = AnalysisState.RUNNING

    name = only_session(services).name
    unit_of_work.change(services, lambda unit: unit.sessions.update(name, start))
    return unit_of_work.change(services, lambda unit: unit.sessions.update(name, finish)).analysis


def test_a_rerun_overwriting_an_analysed_session_keeps_that_analysis_and_says_so(embedded, clock):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=1))
    clock.advance(31)
    run_maintenance(embedded)
    report = f"gs://profiles/{RUN_FOLDER}/mldiag/{only_session(embedded).analysis.generation_set}/summary.html"
    first = _finish_analysis(embedded, AnalysisState.DONE, health=HealthStatus.OPTIMAL, report_uri=report,
                             attempts=1)

    again = finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=2, size=2000)
    deliver(embedded, again)
    assert embedded.events.get("register_session", again["id"]).detail == (
        f"session s1 of run run1 received a newer profile (generation 2 of host0.xplane.pb); "
        f"the earlier analysis is kept at {report}")
    assert only_session(embedded).analysis == first  # still the latest report, until the new files settle

    clock.advance(31)
    run_maintenance(embedded)
    session = only_session(embedded)
    assert session.earlier_analyses == [first]
    assert session.analysis.state is AnalysisState.PENDING and session.analysis.report_uri == ""
    assert session.analysis.attempts == 0 and session.analysis.generation_set == session.generation_set()


def test_an_analysis_that_never_finished_is_not_kept(embedded, clock):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=1))
    clock.advance(31)
    run_maintenance(embedded)
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=2))
    clock.advance(31)
    run_maintenance(embedded)
    session = only_session(embedded)
    assert session.earlier_analyses == [] and session.analysis.state is AnalysisState.PENDING


@pytest.mark.slow
def test_only_the_latest_earlier_analyses_stay_listed(embedded, clock):
    for generation in range(1, ProfilerSession.MAX_EARLIER_ANALYSES + 3):
        deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=generation))
        clock.advance(31)
        run_maintenance(embedded)
        _finish_analysis(embedded, AnalysisState.FAILED, error=f"run {generation}")
    kept = only_session(embedded).earlier_analyses
    assert len(kept) == ProfilerSession.MAX_EARLIER_ANALYSES
    assert [k.error for k in kept[:2]] == [f"run {ProfilerSession.MAX_EARLIER_ANALYSES + 1}",
                                           f"run {ProfilerSession.MAX_EARLIER_ANALYSES}"]


class FlakyBus:
    """The real in-process bus, except that the first publish dies (the process crashed there)."""

    def __init__(self, bus):
        self.bus, self.failures = bus, 1

    def publish(self, *args, **kwargs):
        if self.failures:
            self.failures -= 1
            raise ConnectionError("publisher died")
        return self.bus.publish(*args, **kwargs)


def test_crash_between_commit_and_publish_is_completed_by_the_retry(embedded):
    real_bus = embedded.bus
    embedded.bus = FlakyBus(real_bus)
    run = embedded.runs.create(MachineLearningRun(name="projects/p/locations/l/machineLearningRuns/run1",
                                                  artifacts={"gcsPath": "gs://profiles/team/exp"}))
    embedded.sessions.create(ProfilerSession(name=f"{run.name}/profilerSessions/s1", kind=Kind.KIND_ON_DEMAND,
                                             profiler_targets=["a"]))
    event = finalized(f"{RUN_FOLDER}/a.xplane.pb")
    with pytest.raises(ConnectionError):
        deliver(embedded, event)
    assert embedded.events.get("register_session", event["id"]).outcome is Outcome.FAILED
    assert real_bus.published[ANALYSIS_REQUESTS] == []
    assert deliver(embedded, event) is Outcome.OK  # the platform's retry
    deliver(embedded, event)
    assert len(real_bus.published[ANALYSIS_REQUESTS]) == 1


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"name": f"{RUN_FOLDER}/h.xplane.pb", "size": "1"}, "lacks the object's 'bucket' and 'name'"),
        ({"bucket": "profiles", "size": "1"}, "lacks the object's 'bucket' and 'name'"),
        ({"bucket": "profiles", "name": "x/../../etc/plugins/profile/s/h.xplane.pb", "size": "1"}, "not allowed"),
        ({"bucket": "profiles", "name": f"{RUN_FOLDER}/h.xplane.pb", "size": "0"}, "is empty"),
        ({"bucket": "profiles", "name": f"{RUN_FOLDER}/h.xplane.pb", "size": str(10**15)}, "over the"),
        ({"bucket": "profiles", "name": f"{RUN_FOLDER}/notes.txt", "size": "5"}, "not a profile file"),
        ({"bucket": "profiles", "name": f"{RUN_FOLDER}/h.xplane.pb", "size": "many"}, "must be integers"),
        ({"bucket": "profiles", "name": f"{RUN_FOLDER}/" + "h" * 2000 + ".xplane.pb", "size": "5"}, "1024 bytes"),
        ("not an object", "not a JSON object"),
    ],
)
def test_bad_events_are_rejected_with_their_reason_and_nothing_is_stored(embedded, data, reason):
    event = CloudEvent({"type": "google.cloud.storage.object.v1.finalized", "source": "//storage/x",
                        "id": "bad-1"}, data)
    assert deliver(embedded, event) is Outcome.REJECTED
    record = embedded.events.get("register_session", "bad-1")
    assert reason in record.error
    assert record.raw["data"] == data
    assert embedded.store.query(ProfilerSession.collection) == []
    assert deliver(embedded, event) is Outcome.DUPLICATE  # acknowledged, never retried forever


def test_wrong_event_type_is_rejected(embedded):
    event = CloudEvent({"type": "google.cloud.storage.object.v1.deleted", "source": "//s", "id": "d1"}, {})
    assert deliver(embedded, event) is Outcome.REJECTED
    assert "not 'google.cloud.storage.object.v1.deleted'" in embedded.events.get("register_session", "d1").error


@pytest.mark.parametrize("name", [
    "datasets/train.tfrecord",
    f"{RUN_FOLDER}/mldiag/summary.html",
    f"{RUN_FOLDER}/mldiag/0123456789abcdef/summary.html",
    f"{RUN_FOLDER}/ALL_HOSTS.op_stats_v2.pb",
    "plugins/profile/s1/h.xplane.pb",
])
def test_objects_outside_profiles_are_ignored_quietly(embedded, name):
    event = finalized(name)
    assert deliver(embedded, event) is Outcome.IGNORED
    assert embedded.events.get("register_session", event["id"]).error == ""
    assert embedded.store.query(ProfilerSession.collection) == []


def test_huge_event_is_archived_in_the_bucket(embedded):
    event = finalized(f"{RUN_FOLDER}/host0.xplane.pb")
    event.data["metadata"] = {"padding": "x" * 200_000}
    deliver(embedded, event)
    record = embedded.events.get("register_session", event["id"])
    assert record.raw is None and record.raw_uri.startswith("gs://profiles/_mldiag/events/")
    assert embedded.events.load_raw(record)["data"]["metadata"]["padding"] == "x" * 200_000


def test_an_older_generation_arriving_after_a_newer_one_is_ignored_and_recorded(embedded, clock):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=2, size=2000))
    clock.advance(31)
    run_maintenance(embedded)
    before = only_session(embedded)
    assert len(analysis_requests(embedded)) == 1

    late = finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=1)
    assert deliver(embedded, late) is Outcome.IGNORED
    assert embedded.events.get("register_session", late["id"]).detail == (
        "generation 1 of host0.xplane.pb is older than the registered generation 2")
    clock.advance(31)
    run_maintenance(embedded)
    assert only_session(embedded) == before
    assert len(analysis_requests(embedded)) == 1
