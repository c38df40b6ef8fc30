"""The unit of work: a change and its messages commit together, and the messages go out only once committed;
and nothing else in the package opens a transaction or publishes what a change decided."""

from __future__ import annotations

import ast
import dataclasses
from datetime import timedelta
from pathlib import Path
from collections.abc import Callable
from typing import TypeVar

import pytest

from mldiag.domain import Aborted, MachineLearningRun
from mldiag.domain.messages import MaintenanceTick
from mldiag.domain.topics import MAINTENANCE_TICKS
from mldiag.ports import DocumentStore, Transaction
from mldiag.services import outbox, unit_of_work
from mldiag.services.unit_of_work import Repositories, UnitOfWork

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


def test_a_change_that_sends_nothing_commits_or_writes_nothing(embedded):
    unit_of_work.change(embedded, lambda unit: unit.runs.create(MachineLearningRun(name=RUN)))
    created = embedded.runs.get(RUN)

    def rename_then_fail(unit: Repositories) -> None:
        unit.runs.update(RUN, lambda run: setattr(run, "display_name", "renamed"))
        raise ValueError("refused")

    with pytest.raises(ValueError):
        unit_of_work.change(embedded, rename_then_fail)
    with pytest.raises(Aborted):
        unit_of_work.change(embedded, lambda unit: unit.runs.delete(RUN, etag="stale"))
    assert embedded.runs.get(RUN) == created

    unit_of_work.change(embedded, lambda unit: unit.runs.delete(RUN, etag=created.etag))
    assert embedded.runs.find(RUN) is None


def test_the_sweep_publishes_what_a_crash_left_behind_once_it_is_stale(embedded, clock):
    with pytest.raises(ConnectionError):
        unit_of_work.run(dataclasses.replace(embedded, bus=DownBus()), create_run_and_tick)

    assert unit_of_work.publish_stale(embedded) == 0  # its writer may still be publishing it
    clock.advance(unit_of_work.STALE_AFTER.total_seconds() + 1)
    assert unit_of_work.publish_stale(embedded) == 1

    assert [m.data for m in embedded.bus.published[MAINTENANCE_TICKS]] == [TICK.data]
    assert unit_of_work.publish_stale(embedded, older_than=timedelta(0)) == 0


PACKAGE = Path(unit_of_work.__file__).resolve().parents[1]
# Where a transaction is opened and staged messages are published: the unit of work itself, the outbox it uses,
# and the adapters that implement the ports.
ALLOWED = {PACKAGE / "services" / "unit_of_work.py", PACKAGE / "services" / "outbox.py"}
# Re-publishing an archived message is an operator's action on the bus, not a change of state.
PUBLISHES_ON_THE_BUS = {PACKAGE / "services" / "operator" / "replay.py"}


def _outside_the_unit_of_work(path: Path) -> list[str]:
    """Where ``path`` opens a transaction, stages or flushes the outbox, or (in a use case) publishes on the bus."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            called, on = node.func.attr, node.func.value
            if called == "transaction":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} opens a transaction")
            elif isinstance(on, ast.Name) and on.id == "outbox":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} calls outbox.{called}")
            elif (called == "publish" and isinstance(on, ast.Attribute) and on.attr == "bus"
                  and path.is_relative_to(PACKAGE / "services") and path not in PUBLISHES_ON_THE_BUS):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} publishes on the bus")
        elif isinstance(node, ast.ImportFrom) and node.module == "mldiag.services.outbox":
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports from the outbox")
    return found


def test_only_the_unit_of_work_commits_a_change_and_publishes_its_messages():
    modules = [path for path in sorted(PACKAGE.rglob("*.py"))
               if path not in ALLOWED and not path.is_relative_to(PACKAGE / "adapters")]
    assert len(modules) > 100 and PACKAGE / "services" / "resources" / "runs.py" in modules

    assert [where for path in modules for where in _outside_the_unit_of_work(path)] == []
