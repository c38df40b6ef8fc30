"""The unit of work: the one way a use case changes state and sends what follows from it.

A use case writes its change as a function of a :class:`UnitOfWork`: the
store's transaction, the repositories read and written in it, and the messages
the change sends (:meth:`UnitOfWork.publish`). :func:`run` opens the
transaction, runs the function, stages its messages in the outbox in that same
transaction (:mod:`mldiag.services.outbox`), commits, and only then publishes
them. A crash between the commit and the publishing leaves the messages in the
outbox, where a retry of the same work or the maintenance sweep
(:func:`publish_stale`) finds them: the state and its messages are never apart,
and consumers, being idempotent, take the rare second copy in their stride.

A change that sends nothing (an API update of a run, a target marked GONE) is
a function of :class:`Repositories` alone, committed by :func:`change`; it
needs no bus.

The store may run the function more than once on contention; only what its
last run asked for is staged and published.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Generic, TypeVar

from mldiag.ports import Transaction
from mldiag.services import outbox

if TYPE_CHECKING:
    from mldiag.domain.messages import Outgoing
    from mldiag.domain.resources import MachineLearningRun, MonitoredEvent, Operation, ProfilerSession, ProfilerTarget
    from mldiag.services.dependencies import Stored, Transacting
    from mldiag.services.repository import InTransaction

T = TypeVar("T")

STALE_AFTER = timedelta(seconds=60)


class Repositories:
    """One transaction and the repositories read and written within it (each made when first used)."""

    def __init__(self, services: Stored, transaction: Transaction):
        self._services = services
        self.transaction = transaction

    @cached_property
    def runs(self) -> InTransaction[MachineLearningRun]:
        return self._services.runs.within(self.transaction)

    @cached_property
    def sessions(self) -> InTransaction[ProfilerSession]:
        return self._services.sessions.within(self.transaction)

    @cached_property
    def targets(self) -> InTransaction[ProfilerTarget]:
        return self._services.targets.within(self.transaction)

    @cached_property
    def monitored_events(self) -> InTransaction[MonitoredEvent]:
        return self._services.monitored_events.within(self.transaction)

    @cached_property
    def operations(self) -> InTransaction[Operation]:
        return self._services.operations.within(self.transaction)


class UnitOfWork(Repositories):
    """One transaction's work: the repositories within it, and the messages to send once it has committed."""

    def __init__(self, services: Stored, transaction: Transaction):
        super().__init__(services, transaction)
        self.messages: list[tuple[str, Outgoing]] = []
        self.left_behind: list[str] = []
        self.committed: list[Callable[[], object]] = []

    def publish(self, key: str, message: Outgoing) -> None:
        """Send ``message`` once the work has committed; ``key`` names it in the outbox, so that asking again for
        the same key (a retried event) stages the same message rather than a second one."""
        self.messages.append((key, message))

    def publish_left_behind(self, key: str) -> None:
        """Publish, once committed, the message an earlier run of this work staged under ``key``, if it is still
        in the outbox (that run died before publishing it)."""
        self.left_behind.append(key)

    def on_commit(self, action: Callable[[], object]) -> None:
        """Do ``action`` (a log line, say) once the work has committed, before its messages are published."""
        self.committed.append(action)


@dataclass
class Committed(Generic[T]):
    """A committed unit of work whose messages are still to be published."""

    services: Transacting
    result: T
    keys: list[str] = field(default_factory=list)
    actions: list[Callable[[], object]] = field(default_factory=list)

    def publish(self) -> T:
        """Publish the work's messages (each removed from the outbox once the bus has it); returns its result."""
        for action in self.actions:
            action()
        for key in self.keys:
            outbox.flush(self.services.store, self.services.bus, key)
        return self.result


def commit(services: Transacting, work: Callable[[UnitOfWork], T]) -> Committed[T]:
    """Run ``work`` in one transaction with its messages staged in the outbox, and commit; nothing is published
    yet (:meth:`Committed.publish`)."""
    last: list[UnitOfWork] = []

    def attempt(transaction: Transaction) -> T:
        unit = UnitOfWork(services, transaction)
        result = work(unit)
        now = services.now()
        for key, message in unit.messages:
            outbox.stage(transaction, key, message, now)
        last[:] = [unit]
        return result

    result = services.store.transaction(attempt)
    (unit,) = last
    keys = [key for key, _ in unit.messages] + [key for key in unit.left_behind if key]
    return Committed(services, result, list(dict.fromkeys(keys)), unit.committed)


def run(services: Transacting, work: Callable[[UnitOfWork], T]) -> T:
    """Run ``work`` in one transaction, commit, then publish the messages it asked for; returns its result."""
    return commit(services, work).publish()


def change(services: Stored, work: Callable[[Repositories], T]) -> T:
    """Run ``work``, a change that sends no message, in one transaction and commit; returns its result."""
    return services.store.transaction(lambda transaction: work(Repositories(services, transaction)))


def publish_stale(services: Transacting, older_than: timedelta = STALE_AFTER) -> int:
    """Publish the messages of committed work that died before publishing them (staged longer than
    ``older_than`` ago); returns how many."""
    return outbox.flush_stale(services.store, services.bus, services.now, older_than)
