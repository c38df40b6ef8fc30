"""Small per-run documents kept beside a run: the detector's memory, the auto-capture state.

Each lives in its own collection under the run's document key, is read and
written inside the caller's transaction, and starts from its model's defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from mldiag.domain.types import CamelModel
from mldiag.ports import Transaction
from mldiag.services import unit_of_work
from mldiag.services.repository import document_key
from mldiag.services.dependencies import Transacting
from mldiag.services.unit_of_work import UnitOfWork


class PerRunState(CamelModel):
    """A state kept beside a run, which names it."""

    run: str


M = TypeVar("M", bound=PerRunState)


class RunState(Generic[M]):
    def __init__(self, collection: str, model: type[M]):
        self.collection = collection
        self.model = model

    def load(self, transaction: Transaction, run_name: str) -> M:
        document = transaction.get(self.collection, document_key(run_name))
        return self.model(run=run_name) if document is None else self.model.model_validate(document)

    def save(self, transaction: Transaction, run_name: str, state: M) -> None:
        transaction.set(self.collection, document_key(run_name), state.to_json_dict())

    def read(self, services: Transacting, run_name: str) -> M:
        """The state of an existing run (:class:`~mldiag.domain.NotFound` otherwise)."""
        services.runs.get(run_name)
        return unit_of_work.run(services, lambda unit: self.load(unit.transaction, run_name))

    def update(self, services: Transacting, run_name: str, mutate: Callable[[M], object]) -> M:
        """Change the state of an existing run atomically."""
        services.runs.get(run_name)

        def work(unit: UnitOfWork) -> M:
            state = self.load(unit.transaction, run_name)
            mutate(state)
            self.save(unit.transaction, run_name, state)
            return state

        return unit_of_work.run(services, work)
