"""Periodic housekeeping, driven by ``maintenance-ticks`` (Cloud Scheduler) or ``mldiag up``'s timer.

Settles sessions whose window has passed (requesting their analysis), registers
files in the bucket that no finalize event announced (every ten minutes:
:mod:`mldiag.services.operator.reconciliation`), asks again for analyses that stopped without a
result or fails them after their last attempt, publishes outbox entries a
crashed writer left behind, marks targets whose node agent
stopped sending heartbeats GONE, fails capture tasks nobody finished, and
prunes expired archived events where no TTL policy does it for us (the
embedded store).
"""

from __future__ import annotations

from typing import Protocol

from mldiag.services import unit_of_work
from mldiag.services.analysis_jobs import retry_stale
from mldiag.services.capture import agents
from mldiag.services.capture import tasks as capture_tasks
from mldiag.services.dependencies import Archiving, Blobs, Configured, Publishing, Stored
from mldiag.services.operator.reconciliation import reconcile
from mldiag.services.registration import Registrar


class MaintenancePorts(Stored, Publishing, Blobs, Configured, Archiving, Protocol):
    """What a maintenance pass uses."""


def run_maintenance(services: MaintenancePorts) -> str:
    settled = Registrar(services).settle_due()
    retried, failed = retry_stale(services)
    republished = unit_of_work.publish_stale(services)
    gone = agents.mark_gone(services)
    abandoned = capture_tasks.fail_overdue(services)
    pruned = services.events.prune() if services.settings.backend == "embedded" else 0
    reconciled = reconcile(services)  # the slowest (it lists the bucket), so last
    return (f"registered {reconciled} file(s) no event announced, settled {settled} session(s), asked again for "
            f"{retried} stale analysis(es) and failed {failed}, republished {republished} message(s), "
            f"marked {gone} target(s) gone, failed {abandoned} abandoned capture task(s), pruned {pruned} event(s)")
