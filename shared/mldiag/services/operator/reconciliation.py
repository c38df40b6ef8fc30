"""Reconciliation: profile files in the bucket that no session holds are registered.

A finalize event can be lost: Eventarc drops one now and then, and files that
land while ``mldiag up`` is stopped are never announced (a watcher only sees
what changes while it runs). So ``mldiag up`` reconciles when it starts, and
maintenance does it periodically: the objects written since the last
reconciliation are registered exactly as their finalize events would have been
(:meth:`mldiag.services.registration.Registrar.register`, which is keyed on the
object's generation, so a file registered already changes nothing and an
older generation is ignored).

Periodically, files written in the last few seconds are left to their own
events (a file may still be growing); the next reconciliation looks back far
enough to see them. When ``mldiag up`` starts, every file counts: nothing
announced those, and if one was still growing, its watcher registers the
final version as a newer generation.

Cloud Storage lists by name only, so a reconciliation reads every object name
in the bucket. A maintenance tick lists at most :data:`PAGE` of them and records
the last name it reached; the next tick resumes there, with the same time window,
until the listing ends and the pass is recorded as done. A bucket of any size is
thus reconciled within the tick's timeout, over as many ticks as it takes.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from mldiag.domain.errors import PermanentFailure
from mldiag.domain.clock import format_timestamp
from mldiag.services.dependencies import Blobs, Configured, Publishing, Stored
from mldiag.services.event_archive import Ignored
from mldiag.services.registration import Registrar, parse_finalized


class ReconciliationPorts(Stored, Publishing, Blobs, Configured, Protocol):
    """What reconciling the bucket with the store uses."""


COLLECTION = "maintenance"
KEY = "reconciliation"
INTERVAL = timedelta(minutes=10)  # between periodic reconciliations: in the cloud each lists the whole bucket
# Objects listed per run at most: Cloud Storage lists about 1,000 per request (tens of ms each), so a
# page takes well under a minute of the maintenance function's 120 s.
PAGE = 100_000
SETTLING = timedelta(seconds=10)  # younger files are left to their own finalize events, for now
LOOK_BACK = timedelta(minutes=5)  # overlap between reconciliations: object times are the writer's, not ours

log = structlog.get_logger(__name__)


def reconcile(services: ReconciliationPorts, *, force: bool = False, settling: timedelta = SETTLING,
              page: int | None = PAGE) -> int:
    """Register the bucket's files written since the last reconciliation; returns how many were new.

    Unless ``force`` or a pass is under way, nothing happens within :data:`INTERVAL` of the last one.
    Files written in the last ``settling`` are left for later. At most ``page`` objects are listed
    (``None``: the whole bucket); a pass that stops there resumes at the next call.
    """
    now = services.now()
    state = services.store.get(COLLECTION, KEY) or {}
    last_run = datetime.fromisoformat(state["ranAt"]) if state.get("ranAt") else None
    if not state.get("pass") and not force and last_run is not None and now - last_run < INTERVAL:
        return 0
    # A pass keeps the window it started with, and records how far through the names it got.
    window = state.get("pass") or {
        "since": format_timestamp(datetime.fromisoformat(state["until"]) - LOOK_BACK) if state.get("until") else "",
        "until": format_timestamp(now - settling),
        "after": "",
    }
    since = datetime.fromisoformat(window["since"]) if window["since"] else None
    until = datetime.fromisoformat(window["until"])
    registrar = Registrar(services)
    registered, listed, last_name = 0, 0, window["after"]
    for info in itertools.islice(services.blobs.list_after(services.settings.bucket_uri, window["after"]), page):
        listed += 1
        _, _, name = info.uri.removeprefix("gs://").partition("/")
        last_name = name
        if info.updated > until or (since is not None and info.updated <= since):
            continue
        try:
            profile = parse_finalized({"bucket": services.settings.bucket, "name": name,
                                       "generation": info.generation, "size": str(info.size)},
                                      services.settings.max_profile_bytes)
            account = registrar.register(profile)
        except (Ignored, PermanentFailure):
            continue  # not a profile file, or one its own event would refuse as well
        if not account.startswith("already registered"):
            registered += 1
            log.info("registered by reconciliation", uri=info.uri, account=account)
    if page is not None and listed == page:
        services.store.set(COLLECTION, KEY, {**state, "pass": {**window, "after": last_name}})
        log.info("reconciliation continues at the next run", after=last_name, listed=listed)
    else:
        services.store.set(COLLECTION, KEY, {"until": window["until"], "ranAt": format_timestamp(now)})
    return registered

