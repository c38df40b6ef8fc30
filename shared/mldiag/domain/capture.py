"""What a capture is in words the whole system shares: a profiler server's address, its tracer levels, and
why a capture failed.

The profiler client (:mod:`mldiag.adapters.profiler.xprof_server`) raises
:class:`CaptureFailed`; the capture services record its :class:`Failure` on
the operation and the target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from mldiag.domain.errors import InvalidArgument

_HOST = re.compile(r"[A-Za-z0-9._:%-]+")  # a DNS name, an IPv4 or IPv6 address (with a zone)
# How long a target's capture may stay unfinished past its duration before maintenance fails it.
DEADLINE_GRACE = timedelta(minutes=10)


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → ``(host, port)``; :class:`InvalidArgument` otherwise."""
    host, colon, port_text = address.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if (not colon or not _HOST.fullmatch(host) or not port_text.isdigit()
            or not 0 < int(port_text) < 65536):
        raise InvalidArgument(f"{address!r} is not host:port", field="profilerAddress")
    return host, int(port_text)



class Failure(StrEnum):
    """Why a target's capture failed; the value starts the target's error message."""

    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    BUSY = "busy"
    EMPTY_TRACE = "empty trace"
    ERROR = "error"

    @property
    def status(self) -> tuple[int, str]:
        """The ``google.rpc.Code`` an operation reports for this failure."""
        return {
            Failure.UNREACHABLE: (14, "UNAVAILABLE"),
            Failure.TIMEOUT: (4, "DEADLINE_EXCEEDED"),
            Failure.BUSY: (6, "ALREADY_EXISTS"),
            Failure.EMPTY_TRACE: (9, "FAILED_PRECONDITION"),
            Failure.ERROR: (2, "UNKNOWN"),
        }[self]


class CaptureFailed(Exception):
    """A capture that did not produce a profile, with the reason in words."""

    def __init__(self, failure: Failure, message: str):
        super().__init__(f"{failure.value}: {message}")
        self.failure = failure


@dataclass(frozen=True)
class TracerLevels:
    """The integer tracer levels the profiler server takes (see the session's level enums)."""

    host: int = 2
    device: int = 1
    python: int = 0

    def options(self) -> dict[str, int]:
        return {"host_tracer_level": self.host, "device_tracer_level": self.device,
                "python_tracer_level": self.python}
