"""Which profiler servers a capture may contact: the ones registered for the run, nothing else.

A capture request names targets by id. The address a capture connects to is
read from that run's stored :class:`~mldiag.domain.ProfilerTarget` when the
capture executes — never taken from the request or the message — so no caller
can make the system connect to an address of their choosing (SSRF). Stored
addresses are held to ``host:port`` with a real port, and never a link-local,
unspecified or cloud-metadata address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from mldiag.bootstrap import Services
from mldiag.domain.errors import FailedPrecondition, InvalidArgument
from mldiag.domain.names import RunName
from mldiag.domain.resources import ProfilerTarget, TargetState

ALL_TARGETS = "all"
MAX_TARGETS_PER_RUN = 1000
_METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog"})


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → ``(host, port)``; :class:`InvalidArgument` otherwise."""
    host, colon, port_text = address.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidArgument(f"{address!r} is not host:port", field="profilerAddress")
    return host, int(port_text)


def check_address(address: str) -> str:
    """``address`` if a capture may connect to it; :class:`InvalidArgument` naming why not."""
    host, _ = split_address(address)
    if host.lower().rstrip(".") in _METADATA_HOSTS:
        raise InvalidArgument(f"{address!r} is a cloud metadata server", field="profilerAddress")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return address  # a hostname; resolved by the node's DNS at capture time
    if ip.is_link_local or ip.is_unspecified or ip.is_multicast:
        raise InvalidArgument(f"{address!r} is a link-local, unspecified or multicast address",
                              field="profilerAddress")
    return address


def select_targets(services: Services, run_name: RunName, requested: Sequence[str]) -> list[ProfilerTarget]:
    """The run's targets a capture of ``requested`` ids reaches (``[]`` or ``["all"]``: every active one)."""
    registered = {t.name.rsplit("/", 1)[-1]: t
                  for t in services.targets.list(str(run_name), page_size=MAX_TARGETS_PER_RUN).items}
    wanted = [t.strip() for t in requested if t.strip()]
    if not wanted or wanted == [ALL_TARGETS]:
        chosen = [t for t in registered.values() if t.state is TargetState.ACTIVE]
        if not chosen:
            raise FailedPrecondition(f"run {run_name.run} has no active profiler targets; register them "
                                     "first (mldiag agent, or POST .../profilerTargets)")
    else:
        unknown = [t for t in wanted if t not in registered]
        if unknown:
            known = ", ".join(sorted(registered)) or "none"
            raise InvalidArgument(
                f"{', '.join(map(repr, unknown))} is not a profiler target registered for run {run_name.run} "
                f"(registered: {known}); a capture reaches registered targets only, named by id",
                field="profilerTargets")
        gone = [t for t in wanted if registered[t].state is TargetState.GONE]
        if gone:
            raise FailedPrecondition(f"profiler target(s) {', '.join(gone)} of run {run_name.run} are GONE "
                                     "(their node agent stopped sending heartbeats)")
        chosen = [registered[t] for t in dict.fromkeys(wanted)]
    for target in chosen:
        if not target.agent:  # an agent captures on its own node's localhost instead
            check_address(target.profiler_address)
    return chosen
