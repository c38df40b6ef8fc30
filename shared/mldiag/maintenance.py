"""Periodic housekeeping, driven by ``maintenance-ticks`` (Cloud Scheduler) or ``mldiag up``'s timer.

Settles sessions whose window has passed (requesting their analysis), publishes
outbox entries a crashed writer left behind, and prunes expired archived events
where no TTL policy does it for us (the embedded store).
"""

from __future__ import annotations

from mldiag import outbox
from mldiag.bootstrap import Services
from mldiag.registration import Registrar


def run_maintenance(services: Services) -> str:
    settled = Registrar(services).settle_due()
    republished = outbox.flush_stale(services.store, services.bus, services.now)
    pruned = services.events.prune() if services.settings.backend == "embedded" else 0
    return f"settled {settled} session(s), republished {republished} message(s), pruned {pruned} event(s)"
