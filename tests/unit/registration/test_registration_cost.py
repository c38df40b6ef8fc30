"""register_session at the order of a bare write and publish: one transaction per event (the archive record and
the registration together), no deep copy of a model, and the archived payload stored as the function received it."""

from __future__ import annotations

import dataclasses
import json
import threading

import pydantic
import pytest
from cloudevents.conversion import to_json
from test_register_session import RUN_FOLDER, deliver, finalized

from mldiag.adapters.store.sqlite import SqliteStore
from mldiag.domain import AnalysisState, Kind, MachineLearningRun, ProfilerSession
from mldiag.services import event_archive
from mldiag.services.event_archive import Outcome
from mldiag.services.registration import Registrar
from mldiag.services.repository import Repository

RUN = "projects/p/locations/l/machineLearningRuns/run1"


@pytest.fixture
def transactions(embedded, monkeypatch):
    """The store's transactions (each write of the embedded store is one), counted."""
    count = {"n": 0}
    transaction = embedded.store.transaction

    def counted(work):
        count["n"] += 1
        return transaction(work)

    monkeypatch.setattr(embedded.store, "transaction", counted)
    return count


def test_a_file_of_a_known_run_is_registered_and_archived_in_one_transaction(embedded, transactions):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb"))  # makes the run and the session
    transactions["n"] = 0

    event = finalized(f"{RUN_FOLDER}/host1.xplane.pb")
    assert deliver(embedded, event) is Outcome.OK

    assert transactions["n"] == 1
    assert embedded.events.get("register_session", event["id"]).outcome is Outcome.OK
    assert set(embedded.sessions.get("projects/p/locations/l/machineLearningRuns/run1/profilerSessions/s1")
               .host_files) == {"host0", "host1"}


def test_the_first_file_of_a_new_run_makes_the_run_in_the_same_transaction(embedded, transactions):
    event = finalized(f"{RUN_FOLDER}/host0.xplane.pb")
    assert deliver(embedded, event) is Outcome.OK

    assert transactions["n"] == 1
    assert embedded.runs.get(RUN).artifacts.gcs_path == "gs://profiles/team/exp"
    assert embedded.events.get("register_session", event["id"]).outcome is Outcome.OK


def test_a_redelivered_event_is_found_a_duplicate_before_it_is_read(embedded, transactions, monkeypatch):
    from mldiag.services import registration

    event = finalized(f"{RUN_FOLDER}/host0.xplane.pb")
    deliver(embedded, event)
    transactions["n"] = 0

    def unread(*args, **kwargs):
        raise AssertionError("a redelivered event was read again")

    monkeypatch.setattr(registration, "parse_finalized", unread)
    assert deliver(embedded, event) is Outcome.DUPLICATE
    assert transactions["n"] == 1


def test_registering_deep_copies_no_model(embedded, monkeypatch):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb"))
    copy = pydantic.BaseModel.model_copy
    deep = []

    def recorded(self, *args, **kwargs):
        deep.append(kwargs.get("deep", False))
        return copy(self, *args, **kwargs)

    monkeypatch.setattr(pydantic.BaseModel, "model_copy", recorded)
    deliver(embedded, finalized(f"{RUN_FOLDER}/host1.xplane.pb"))
    assert not any(deep)


def test_the_archived_payload_is_the_event_as_received_without_encoding_it_again(embedded, monkeypatch):
    event = finalized(f"{RUN_FOLDER}/host0.xplane.pb")
    expected = json.loads(to_json(event))  # the structured form, as the SDK writes it

    def encoding(*args, **kwargs):
        raise AssertionError("the event was encoded again to be archived")

    monkeypatch.setattr(event_archive, "to_json", encoding)
    deliver(embedded, event)
    assert embedded.events.get("register_session", event["id"]).raw == expected


@pytest.mark.parametrize("kind", [Kind.KIND_SCANNED, Kind.KIND_ON_DEMAND])
def test_registering_changes_a_copy_and_leaves_the_session_it_read_as_stored(embedded, monkeypatch, kind):
    """The save checks the transition from the session as read: adding the file (and, for a capture's last target,
    requesting the analysis) changes only the copy."""
    run = embedded.runs.create(MachineLearningRun(name=RUN, artifacts={"gcsPath": "gs://profiles/team/exp"}))
    session = f"{run.name}/profilerSessions/s1"
    embedded.sessions.create(ProfilerSession(name=session, kind=kind, profiler_targets=["host0", "host1"]))
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb"))
    stored = embedded.sessions.get(session).to_json_dict()
    read = []
    stage_save_in = Repository.stage_save_in

    def recorded(self, transaction, previous, resource):
        read.append(previous.to_json_dict())
        return stage_save_in(self, transaction, previous, resource)

    monkeypatch.setattr(Repository, "stage_save_in", recorded)
    deliver(embedded, finalized(f"{RUN_FOLDER}/host1.xplane.pb"))
    assert read == [stored]
    after = embedded.sessions.get(session)
    assert set(after.host_files) == {"host0", "host1"} and set(after.target_sessions) == {"host0", "host1"}
    if kind is Kind.KIND_ON_DEMAND:
        assert after.analysis.state is AnalysisState.PENDING


def _session_texts(services) -> list[str]:
    """The stored sessions as JSON, their field order and etags included."""
    return [json.dumps(document) for document in services.store.query(ProfilerSession.collection)]


def test_a_new_hosts_file_is_registered_in_the_stored_session_as_the_model_would_register_it(
        embedded, clock, tmp_path, monkeypatch):
    """Each file of a scanned session, the first (which makes the session) included, is written into its document
    as registering it in the model writes it: the same text, field order and etag."""
    by_model = dataclasses.replace(embedded, store=SqliteStore(tmp_path / "by_model.sqlite3"))
    for n in range(3):
        event = finalized(f"{RUN_FOLDER}/host{n}.xplane.pb", generation=n + 1)
        assert deliver(embedded, event) is Outcome.OK
        with monkeypatch.context() as model_only:
            model_only.setattr(Registrar, "_with_new_host", lambda self, stored, profile: None)
            assert deliver(by_model, event) is Outcome.OK
        assert _session_texts(embedded) == _session_texts(by_model)
        clock.advance(1.5)


def test_a_new_hosts_file_is_registered_without_loading_the_scanned_session(embedded, monkeypatch):
    deliver(embedded, finalized(f"{RUN_FOLDER}/host0.xplane.pb"))
    loaded = []
    load = Repository.load

    def recorded(self, document):
        loaded.append(self.model)
        return load(self, document)

    monkeypatch.setattr(Repository, "load", recorded)
    assert deliver(embedded, finalized(f"{RUN_FOLDER}/host1.xplane.pb")) is Outcome.OK
    assert ProfilerSession not in loaded
    assert set(embedded.sessions.get(f"{RUN}/profilerSessions/s1").host_files) == {"host0", "host1"}


def test_files_of_one_session_registered_at_once_all_land_in_it(embedded):
    """Each host's file is written into the session's document within its transaction: none is lost to another."""
    hosts = [f"host{n}" for n in range(8)]
    errors = []

    def register(host):
        try:
            assert deliver(embedded, finalized(f"{RUN_FOLDER}/{host}.xplane.pb")) is Outcome.OK
        except BaseException as error:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=register, args=(host,)) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    session = embedded.sessions.get(f"{RUN}/profilerSessions/s1")
    assert sorted(session.host_files) == sorted(session.target_sessions) == sorted(session.profiler_targets) == hosts
