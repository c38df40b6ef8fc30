"""The unit of work: a change and its messages commit together, and the messages go out only once committed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

import pytest

from mldiag.domain import MachineLearningRun
from mldiag.domain.messages import MaintenanceTick
from mldiag.domain.topics import MAINTENANCE_TICKS
from mldiag.ports import DocumentStore, Transaction
from mldiag.services import outbox, unit_of_work
from mldiag.services.unit_of_work import UnitOfWork

T = TypeVar("T")
RUN = "projects/p/locations/l/machineLearningRuns/r1"
TICK = MaintenanceTick(source="test").outgoing()


class _Retry(Exception):
    pass


@dataclasses.dataclass
class ContendedStore:
    """A store whose every transaction loses its first attempt to contention, as Firestore's may: the work runs,
    its writes are undone, and it runs again."""

    store: DocumentStore

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def transaction(self, work: Callable[[Transaction], T]) -> T:
        def lost(transaction: Transaction) -> T:
            work(transaction)
            raise _Retry

        with pytest.raises(_Retry):
            self.store.transaction(lost)
        return self.store.transaction(work)


@dataclasses.dataclass
class DownBus:
    """A bus that cannot be reached."""

    def publish(self, topic: str, data: bytes, attributes=None, ordering_key: str = "") -> str:
        raise ConnectionError("the bus is down")


def create_run_and_tick(unit: UnitOfWork) -> str:
    unit.runs.create(MachineLearningRun(name=RUN))
    unit.publish("tick", TICK)
    return "created"


def test_the_change_commits_and_its_messages_are_published_after(embedded):
    assert unit_of_work.run(embedded, create_run_and_tick) == "created"

    assert embedded.runs.get(RUN).name == RUN
    (published,) = embedded.bus.published[MAINTENANCE_TICKS]
    assert published.data == TICK.data
    assert embedded.store.query(outbox.COLLECTION) == []  # sent, so no longer staged


def test_a_change_that_fails_sends_nothing(embedded):
    def failing(unit: UnitOfWork) -> None:
        create_run_and_tick(unit)
        raise ValueError("refused")

    with pytest.raises(ValueError):
        unit_of_work.run(embedded, failing)

    assert embedded.runs.find(RUN) is None
    assert embedded.bus.published[MAINTENANCE_TICKS] == [] and embedded.store.query(outbox.COLLECTION) == []


def test_only_the_attempt_that_commits_sends_its_messages(embedded):
    services = dataclasses.replace(embedded, store=ContendedStore(embedded.store))
    attempts = iter(range(2))

    def work(unit: UnitOfWork) -> None:
        unit.publish(f"tick-{next(attempts)}", TICK)

    unit_of_work.run(services, work)

    assert len(embedded.bus.published[MAINTENANCE_TICKS]) == 1
    assert embedded.store.query(outbox.COLLECTION) == []


def test_messages_a_crash_left_behind_are_sent_by_the_next_run_that_knows_them(embedded):
    down = dataclasses.replace(embedded, bus=DownBus())
    with pytest.raises(ConnectionError):
        unit_of_work.run(down, create_run_and_tick)
    assert embedded.runs.get(RUN) is not None  # committed: the state is there, its message staged
    assert [entry["key"] for entry in embedded.store.query(outbox.COLLECTION)] == ["tick"]

    unit_of_work.run(embedded, lambda unit: unit.publish_left_behind("tick"))

    assert [m.data for m in embedded.bus.published[MAINTENANCE_TICKS]] == [TICK.data]
    assert embedded.store.query(outbox.COLLECTION) == []


def test_what_is_done_on_commit_waits_for_the_commit(embedded):
    done: list[str] = []

    def work(unit: UnitOfWork) -> None:
        unit.on_commit(lambda: done.append("logged"))
        assert done == []

    unit_of_work.run(dataclasses.replace(embedded, store=ContendedStore(embedded.store)), work)
    assert done == ["logged"]


def test_a_commit_alone_stages_the_messages_and_publishes_none(embedded):
    committed = unit_of_work.commit(embedded, create_run_and_tick)

    assert committed.keys == ["tick"] and embedded.store.get(outbox.COLLECTION, "tick") is not None
    assert embedded.bus.published[MAINTENANCE_TICKS] == []
    assert committed.publish() == "created" and len(embedded.bus.published[MAINTENANCE_TICKS]) == 1
