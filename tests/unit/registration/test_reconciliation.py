"""Reconciliation: files in the bucket that no finalize event announced become sessions, exactly once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from test_register_session import RUN_FOLDER, analysis_requests, deliver, finalized, only_session

from mldiag.domain import ProfilerSession
from mldiag.services.event_archive import Outcome
from mldiag.services.operator.maintenance import run_maintenance
from mldiag.services.operator.reconciliation import INTERVAL, reconcile


@pytest.fixture
def later(clock):
    """The clock a little after the files written now (the hand-driven one starts in the past)."""
    clock.current = datetime.now(timezone.utc) + timedelta(minutes=1)
    return clock


def _write(services, name: str, data: bytes = b"\x0a\x00"):
    return services.blobs.write_bytes(f"gs://profiles/{name}", data)


def test_files_no_event_announced_are_registered_once(embedded, later):
    written = [_write(embedded, f"{RUN_FOLDER}/host{n}.xplane.pb") for n in range(2)]
    _write(embedded, "team/exp/run1/notes.txt")  # not a profile: left alone

    assert reconcile(embedded, force=True) == 2
    session = only_session(embedded)
    assert {host: f.generation for host, f in session.host_files.items()} == {
        "host0": written[0].generation, "host1": written[1].generation}
    assert reconcile(embedded, force=True) == 0
    late_event = finalized(f"{RUN_FOLDER}/host0.xplane.pb", generation=int(written[0].generation), size=2)
    assert deliver(embedded, late_event) is Outcome.OK
    assert only_session(embedded) == session, "the late event finds the file registered"

    later.advance(31)
    run_maintenance(embedded)
    assert len(analysis_requests(embedded)) == 1


def test_a_file_still_being_written_is_left_to_its_own_event_until_the_next_reconciliation(embedded, later):
    later.current = datetime.now(timezone.utc)
    _write(embedded, f"{RUN_FOLDER}/host0.xplane.pb")
    assert reconcile(embedded, force=True) == 0
    assert embedded.store.query(ProfilerSession.collection) == []
    later.advance(60)
    assert reconcile(embedded, force=True) == 1


def test_maintenance_reconciles_every_interval_and_lists_only_what_is_new(embedded, later, monkeypatch):
    _write(embedded, f"{RUN_FOLDER}/host0.xplane.pb")
    assert run_maintenance(embedded).startswith("registered 1 file(s) no event announced")
    listed = []
    listing = embedded.blobs.list_after
    monkeypatch.setattr(embedded.blobs, "list_after",
                        lambda prefix, start_after="": listed.append(start_after) or listing(prefix, start_after))
    run_maintenance(embedded)
    assert listed == [], "not again within the interval"
    later.advance(INTERVAL.total_seconds())
    run_maintenance(embedded)
    assert listed == [""], "after the interval, a new pass from the first name"


def test_a_bucket_too_big_for_one_run_is_reconciled_over_several(embedded, later, monkeypatch):
    """Each run lists at most a page of names and resumes after the last one, within the same window."""
    for n in range(5):
        _write(embedded, f"{RUN_FOLDER}/host{n}.xplane.pb")
    _write(embedded, "team/exp/run1/notes.txt")
    everything = [info.uri for info in embedded.blobs.list_after(embedded.settings.bucket_uri)]
    starts = []
    listing = embedded.blobs.list_after
    monkeypatch.setattr(embedded.blobs, "list_after",
                        lambda prefix, start_after="": starts.append(start_after) or listing(prefix, start_after))

    registered = [reconcile(embedded, page=2) for _ in range(len(everything) // 2 + 1)]
    assert sum(registered) == 5 and len(only_session(embedded).host_files) == 5
    assert max(registered) <= 2, "no run registers more than it lists"
    bucket = f"{embedded.settings.bucket_uri}/"
    assert starts == [""] + [uri.removeprefix(bucket) for uri in everything[1::2]][:len(starts) - 1]
    assert reconcile(embedded, page=2) == 0 and len(starts) == len(everything) // 2 + 1, "done: the next waits"

    later.advance(INTERVAL.total_seconds())
    written = _write(embedded, f"{RUN_FOLDER}/host5.xplane.pb")
    later.advance(60)
    assert reconcile(embedded, page=len(everything) + 1) == 1
    assert only_session(embedded).host_files["host5"].generation == written.generation
