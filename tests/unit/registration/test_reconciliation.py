"""Reconciliation: files in the bucket that no finalize event announced become sessions, exactly once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from test_register_session import RUN_FOLDER, analysis_requests, deliver, finalized, only_session

from mldiag.domain import ProfilerSession
from mldiag.services.event_archive import Outcome
from mldiag.services.operations.maintenance import run_maintenance
from mldiag.services.operations.reconciliation import INTERVAL, reconcile


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
    listing = embedded.blobs.list_updated_since
    monkeypatch.setattr(embedded.blobs, "list_updated_since",
                        lambda prefix, since: listed.append(since) or listing(prefix, since))
    run_maintenance(embedded)
    assert listed == [], "not again within the interval"
    later.advance(INTERVAL.total_seconds())
    run_maintenance(embedded)
    [since] = listed
    assert since is not None and since < later(), "only what was written since the last one, with some overlap"
