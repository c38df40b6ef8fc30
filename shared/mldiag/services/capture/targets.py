"""Which profiler servers a capture may contact: the ones registered for the run, nothing else.

A capture request names targets by id. The address a capture connects to is
read from that run's stored :class:`~mldiag.domain.ProfilerTarget` when the
capture executes — never taken from the request or the message — so no caller
can make the system connect to an address of their choosing (SSRF). Stored
addresses are held to ``host:port`` with a real port, and never a link-local,
unspecified, multicast or cloud-metadata address, in whatever spelling the
system's resolver accepts for one (``2852039166``, ``0xa9fea9fe``,
``0251.0376.0251.0376``, ``169.254.43518``, ``0``, ``[::ffff:a9fe:a9fe]``, ``[::a9fe:a9fe]``,
``[2002:a9fe:a9fe::]``...):
a numeric host is read the way the resolver reads it, then checked.

A host name is checked when a capture connects: it is resolved once, every
address it resolves to is checked, and the capture dials the checked address
itself (:func:`resolve_address`), so a name that resolves to a refused address,
or that changes its answer between the check and the connection, reaches
nothing. Loopback and private addresses are allowed: ``mldiag up`` captures
workloads on the same machine, and clusters on private networks.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

from mldiag.domain.capture import split_address
from mldiag.domain.errors import FailedPrecondition, InvalidArgument
from mldiag.domain.names import RunName
from mldiag.domain.resources import ProfilerTarget, TargetState
from mldiag.services.dependencies import Stored

ALL_TARGETS = "all"
MAX_TARGETS_PER_RUN = 1000
_METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog"})
# Cloud metadata servers: the link-local one of every cloud, Compute Engine's and EC2's over IPv6, and
# Alibaba Cloud's, which is not link-local.
_METADATA_IPS = frozenset(map(ipaddress.ip_address,
                              ("169.254.169.254", "fd20:ce::254", "fd00:ec2::254", "100.100.100.200")))
# IPv6 addresses that reach an IPv4 one: NAT64's well-known prefix, and the deprecated IPv4-compatible ones.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_address(address: str) -> str:
    """``address`` if a capture may connect to it; :class:`InvalidArgument` naming why not.

    A numeric host is checked in any spelling; a host name is checked by :func:`resolve_address`
    when a capture connects (it may only resolve inside the workload's network).
    """
    host, port = split_address(address)
    if host.lower().rstrip(".") in _METADATA_HOSTS:
        raise InvalidArgument(f"{address!r} is a cloud metadata server", field="profilerAddress")
    try:
        literal = _addresses(host, port, socket.AI_NUMERICHOST)
    except OSError:
        return address  # a host name
    _refuse_unsafe(address, host, literal)
    return address


def resolve_address(address: str) -> str:
    """The checked ``ip:port`` (``[ip]:port``) a capture of ``address`` dials.

    Raises :class:`InvalidArgument` when the address, or any address its host resolves to,
    is one a capture may not reach, and :class:`OSError` when the host does not resolve.
    """
    host, port = split_address(check_address(address))
    resolved = _addresses(host, port, 0)
    _refuse_unsafe(address, host, resolved)
    first = resolved[0]
    return f"[{first}]:{port}" if first.version == 6 else f"{first}:{port}"


def resolve_outbound_address(address: str, *, allow_private: bool) -> str:
    """:func:`resolve_address` for a connection the control plane makes on a user's behalf (a notification):
    loopback and private addresses are refused too, in every address the host resolves to, unless
    ``allow_private``."""
    resolved = resolve_address(address)
    if allow_private:
        return resolved
    host, port = split_address(address)
    for ip in _addresses(host, port, 0):
        if any(candidate.is_private or candidate.is_loopback for candidate in (ip, *_carried_ipv4(ip))):
            shown = "" if str(ip) == host else f" ({ip})"
            raise InvalidArgument(f"{address!r}{shown} is a loopback or private address; notifications go there "
                                  "only where the operator allows it (MLDIAG_NOTIFY_ALLOW_PRIVATE)", field="url")
    return resolved


def _addresses(host: str, port: int, flags: int) -> list[IPAddress]:
    """What the system's resolver makes of ``host``, in its order (``AI_NUMERICHOST``: without DNS)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=flags)
    except ValueError:  # a name the resolver cannot encode (a label over 63 characters)
        raise socket.gaierror(socket.EAI_NONAME, f"{host!r} is not a host name") from None
    return list(dict.fromkeys(ipaddress.ip_address(sockaddr[0]) for *_, sockaddr in found))


def _refuse_unsafe(address: str, host: str, ips: Sequence[IPAddress]) -> None:
    for ip in ips:
        reason = _refusal(ip)
        if reason:
            shown = "" if str(ip) == host else f" ({ip})"
            raise InvalidArgument(f"{address!r}{shown} is {reason}; a capture never connects there",
                                  field="profilerAddress")


def _refusal(ip: IPAddress) -> str:
    """Why a capture may not connect to ``ip`` (``""``: it may)."""
    for candidate in (ip, *_carried_ipv4(ip)):
        if candidate in _METADATA_IPS:
            return "a cloud metadata server's address"
        if candidate.is_link_local:
            return "a link-local address"
        if candidate.is_unspecified:
            return "the unspecified address"
        if candidate.is_multicast:
            return "a multicast address"
    return ""


def _carried_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 one reaches or names: IPv4-mapped, IPv4-compatible (``::a9fe:a9fe``),
    NAT64, 6to4 (``2002:a9fe:a9fe::``) and both of Teredo's."""
    if isinstance(ip, ipaddress.IPv4Address):
        return []
    carried = []
    if ip.ipv4_mapped:
        carried.append(ip.ipv4_mapped)
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):
        carried.append(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF))
    if ip.sixtofour:
        carried.append(ip.sixtofour)
    if ip.teredo:
        carried.extend(ip.teredo)
    return carried


def select_targets(services: Stored, run_name: RunName, requested: Sequence[str]) -> list[ProfilerTarget]:
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
            why = ("their node agent stopped sending heartbeats" if all(registered[t].agent for t in gone) else
                   "their node agent stopped sending heartbeats, or the run ended, which ends targets registered "
                   "without an agent")
            raise FailedPrecondition(f"profiler target(s) {', '.join(gone)} of run {run_name.run} are GONE ({why})")
        chosen = [registered[t] for t in dict.fromkeys(wanted)]
    for target in chosen:
        if not target.agent:  # an agent captures on its own node's localhost instead
            check_address(target.profiler_address)
    return chosen
