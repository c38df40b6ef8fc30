"""Periodic housekeeping, driven by ``maintenance-ticks`` (Cloud Scheduler) or ``mldiag up``'s timer.

Settles sessions whose window has passed (requesting their analysis), publishes
outbox entries a crashed writer left behind, marks targets whose node agent
stopped sending heartbeats GONE, fails capture tasks nobody finished, and
prunes expired archived events where no TTL policy does it for us (the
embedded store).
"""

from __future__ import annotations

from mldiag import outbox
from mldiag.bootstrap import Services
from mldiag.capture import tasks as capture_tasks
from mldiag.registration import Registrar
from mldiag.services import agents


def run_maintenance(services: Services) -> str:
    settled = Registrar(services).settle_due()
    republished = outbox.flush_stale(services.store, services.bus, services.now)
    gone = agents.mark_gone(services)
    abandoned = capture_tasks.fail_overdue(services)
    pruned = services.events.prune() if services.settings.backend == "embedded" else 0
    return (f"settled {settled} session(s), republished {republished} message(s), marked {gone} target(s) "
            f"gone, failed {abandoned} abandoned capture task(s), pruned {pruned} event(s)")
