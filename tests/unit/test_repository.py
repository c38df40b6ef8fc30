"""Repository semantics over the embedded store: etags, transitions, pagination; changes within a transaction."""

from collections.abc import Callable

import pytest

from mldiag.adapters.store.sqlite import SqliteStore
from mldiag.domain import Aborted, AlreadyExists, InvalidTransition, MachineLearningRun, NotFound, RunPhase
from mldiag.ports import Where
from mldiag.services.repository import Repository

PARENT = "projects/p/locations/l"


@pytest.fixture
def runs(tmp_path):
    return Repository(SqliteStore(tmp_path / "db.sqlite3"), MachineLearningRun)


def _run(run_id: str, **fields) -> MachineLearningRun:
    return MachineLearningRun(name=f"{PARENT}/machineLearningRuns/{run_id}", **fields)


def update(runs: Repository, name: str, mutate: Callable[[MachineLearningRun], object], etag: str = ""):
    return runs.store.transaction(lambda transaction: runs.within(transaction).update(name, mutate, etag=etag))


def delete(runs: Repository, name: str, etag: str = "") -> None:
    runs.store.transaction(lambda transaction: runs.within(transaction).delete(name, etag=etag))


def test_create_stamps_times_and_etag(runs):
    created = runs.create(_run("r1", display_name="first"))
    assert created.create_time is not None and created.create_time == created.update_time
    assert created.etag
    assert runs.get(created.name) == created
    with pytest.raises(AlreadyExists):
        runs.create(_run("r1"))


def test_update_checks_etag_and_changes_it(runs):
    created = runs.create(_run("r1"))
    updated = update(runs, created.name, lambda r: setattr(r, "display_name", "renamed"), etag=created.etag)
    assert updated.display_name == "renamed" and updated.etag != created.etag
    assert updated.create_time == created.create_time
    with pytest.raises(Aborted):
        update(runs, created.name, lambda r: setattr(r, "display_name", "stale"), etag=created.etag)
    assert runs.get(created.name).display_name == "renamed"


def test_update_refuses_impossible_transition_and_writes_nothing(runs):
    created = runs.create(_run("r1"))
    update(runs, created.name, lambda r: setattr(r, "run_phase", RunPhase.COMPLETED))
    before = runs.get(created.name)
    with pytest.raises(InvalidTransition):
        update(runs, created.name, lambda r: setattr(r, "run_phase", RunPhase.FAILED))
    assert runs.get(created.name) == before


def test_delete_and_missing(runs):
    created = runs.create(_run("r1"))
    with pytest.raises(Aborted):
        delete(runs, created.name, etag="stale")
    delete(runs, created.name, etag=created.etag)
    with pytest.raises(NotFound):
        runs.get(created.name)
    with pytest.raises(NotFound):
        update(runs, created.name, lambda r: None)


def test_list_pages_through_children_of_one_parent_only(runs):
    for index in range(5):
        runs.create(_run(f"r{index}", labels={"team": "a" if index % 2 else "b"}))
    runs.create(MachineLearningRun(name="projects/other/locations/l/machineLearningRuns/x"))
    first = runs.list(PARENT, page_size=2)
    second = runs.list(PARENT, page_size=2, page_token=first.next_page_token)
    third = runs.list(PARENT, page_size=2, page_token=second.next_page_token)
    names = [r.id for page in (first, second, third) for r in page.items]
    assert names == ["r0", "r1", "r2", "r3", "r4"]
    assert third.next_page_token == ""
    team_a = runs.list(PARENT, where=[Where("labels.team", "==", "a")])
    assert [r.id for r in team_a.items] == ["r1", "r3"]
