"""The progress of a multi-host session analysed one host per function instance: one document per set of files.

The ``analyze_session`` function creates it when it fans a request out; each
host's outcome is recorded in it in a transaction that also counts the host as
finished, once: a host already DONE or FAILED is never counted again, so a
redelivered host request changes nothing. The transaction that finishes the
last host is the only one that asks for the merge.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from mldiag.domain.types import CamelModel, Timestamp


class HostState(StrEnum):
    PENDING = "PENDING"
    DONE = "DONE"
    FAILED = "FAILED"


class HostProgress(CamelModel):
    """One host of the session: its file, and once finished its evidence or why it has none."""

    file: str  # gs:// URI of its .xplane.pb
    state: HostState = HostState.PENDING
    evidence_uri: str = ""  # <report folder>/hosts/<host>.json, once DONE
    reason: str = ""  # why it FAILED
    status: str = ""  # its own verdict analysed alone (OPTIMAL or NEEDS_ATTENTION), once DONE
    step_time_ms: float | None = None


class HostAnalyses(CamelModel):
    """The counter document of one fan-out: every host's progress, how many finished, whether the merge is asked."""

    collection: ClassVar[str] = "hostAnalyses"

    session: str
    generation_set: str
    hosts: dict[str, HostProgress]
    finished: int = 0
    merge_requested: bool = False
    progressed_at: Timestamp = None  # when the fan-out started or a host last finished

    @classmethod
    def of(cls, session: str, generation_set: str, host_files: dict[str, str]) -> HostAnalyses:
        return cls(session=session, generation_set=generation_set,
                   hosts={host: HostProgress(file=uri) for host, uri in sorted(host_files.items())})

    def record(self, host: str, outcome: HostProgress) -> bool:
        """Record a finished host; False (and nothing changed) when it had finished already."""
        if outcome.state is HostState.PENDING:
            raise ValueError("a host's outcome is DONE or FAILED")
        if self.hosts[host].state is not HostState.PENDING:
            return False
        self.hosts[host] = outcome
        self.finished += 1
        return True

    def take_merge(self) -> bool:
        """True once, when every host has finished: the caller asks for the merge in the same transaction."""
        if self.finished < len(self.hosts) or self.merge_requested:
            return False
        self.merge_requested = True
        return True

    @property
    def missing(self) -> dict[str, str]:
        """Each host that FAILED, and why."""
        return {host: progress.reason for host, progress in self.hosts.items() if progress.state is HostState.FAILED}

    @property
    def done(self) -> dict[str, HostProgress]:
        return {host: progress for host, progress in self.hosts.items() if progress.state is HostState.DONE}

    def to_document(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def followups_host(done: dict[str, HostProgress]) -> str:
    """The host whose file the merged analysis's follow-up checks read: the slowest of those whose own analysis
    NEEDS_ATTENTION; "" when every host was OPTIMAL on its own."""
    wanting = sorted(host for host, progress in done.items() if progress.status == "NEEDS_ATTENTION")
    return max(wanting, key=lambda host: done[host].step_time_ms or 0.0, default="")

