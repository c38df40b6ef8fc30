"""The ports: what the services need from the outside world, as small Protocols.

The document store, the blob store and the message bus each have an embedded
adapter (SQLite, a local directory, an in-process bus) and a Google Cloud one
(Firestore, Cloud Storage, Pub/Sub, which also drive the official emulators);
the profiler client dials a workload's XProf profiler server; the reasoner that
investigates an analysis is the offline one or Gemini on Vertex AI; the analysis
runner runs an analysis job in a child process (or, for tests, in this one).
``mldiag.bootstrap`` picks the adapters; nothing else imports one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from cloudevents.http import CloudEvent

    from mldiag.analysis.evidence import Analysis
    from mldiag.analysis.fanout import HostAnalysis
    from mldiag.analysis.reasoning.followups import FollowupTools
    from mldiag.analysis.reasoning.investigation import Conclusion
    from mldiag.domain.capture import TracerLevels

T = TypeVar("T")

# JSON values, and timezone-aware ``datetime``s where the store must see a timestamp (Firestore's
# TTL deletes only on a Timestamp field). A store compares datetimes with datetimes in queries;
# reading back, a timestamp comes as a ``datetime`` or as its ISO 8601 text.
Document = dict[str, Any]


class EncodedDocument(Mapping[str, Any]):
    """A document as JSON text, ``text``, encoded by the model it was dumped from (a datetime in it written as
    fixed-width UTC text, :func:`mldiag.domain.clock.format_timestamp`). A store that keeps JSON text stores ``text``
    as it is; one that keeps values reads them from this mapping, decoded from the text when first asked for, with
    ``timestamps`` (fields whose text stands for a datetime, as those datetimes: Firestore's TTL deletes only on a
    Timestamp) in place of their text."""

    __slots__ = ("text", "timestamps", "_values")

    def __init__(self, text: str, timestamps: Mapping[str, datetime] | None = None):
        self.text = text
        self.timestamps = timestamps or {}
        self._values: Document | None = None

    def _decoded(self) -> Document:
        if self._values is None:
            self._values = {**json.loads(self.text), **self.timestamps}
        return self._values

    def __getitem__(self, field: str) -> Any:
        return self._decoded()[field]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())


# What a store is handed to write: a document, or one as its model encoded it.
Written = Document | EncodedDocument

Operator = Literal["==", "!=", "<", "<=", ">", ">=", "in", "array_contains"]


@dataclass(frozen=True)
class Where:
    """A query condition on a (dotted) field of the stored document."""

    field: str
    op: Operator
    value: Any


@dataclass(frozen=True)
class OrderBy:
    field: str
    descending: bool = False


class Transaction(Protocol):
    """Reads first, then writes; committed atomically or retried by the store.

    Like Firestore, a transaction must do all its reads before its first write.
    """

    def get(self, collection: str, key: str) -> Document | None: ...

    def set(self, collection: str, key: str, document: Written) -> None: ...

    def create(self, collection: str, key: str, document: Written) -> None:
        """Write a new document; the commit raises :class:`AlreadyExists` if it is there."""

    def delete(self, collection: str, key: str) -> None: ...


class DocumentStore(Protocol):
    """Schemaless JSON documents in named collections, keyed by string."""

    def get(self, collection: str, key: str) -> Document | None: ...

    def create(self, collection: str, key: str, document: Written) -> None:
        """Insert; raises :class:`mldiag.domain.AlreadyExists` if the key is taken."""

    def set(self, collection: str, key: str, document: Written) -> None: ...

    def delete(self, collection: str, key: str) -> bool:
        """Remove; returns whether the document existed."""

    def query(
        self,
        collection: str,
        where: Sequence[Where] = (),
        order_by: Sequence[OrderBy] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Document]: ...

    def transaction(self, work: Callable[[Transaction], T]) -> T:
        """Run ``work`` in a serialisable transaction; may call it more than once on contention."""


@dataclass(frozen=True)
class BlobInfo:
    uri: str
    size: int
    generation: str
    updated: datetime
    content_type: str = ""


class BlobStore(Protocol):
    """Objects addressed by ``gs://bucket/path`` URIs."""

    def stat(self, uri: str) -> BlobInfo | None: ...

    def read_bytes(self, uri: str, max_bytes: int | None = None) -> bytes:
        """The object's content; :class:`mldiag.domain.NotFound` if absent,
        :class:`mldiag.domain.InvalidArgument` if larger than ``max_bytes``."""

    def read_head(self, uri: str, size: int) -> bytes:
        """The object's first ``size`` bytes (all of it if shorter); :class:`mldiag.domain.NotFound` if absent."""

    def write_bytes(self, uri: str, data: bytes, content_type: str = "", *,
                    if_absent: bool = False) -> BlobInfo | None:
        """Write the object. With ``if_absent`` an object already there is kept and ``None`` returned:
        write-once work that is retried (an archived raw event, a captured trace) is then done,
        and needs only the right to create objects, not to overwrite them."""

    def download(self, uri: str, destination: Path) -> BlobInfo: ...

    def upload(self, source: Path, uri: str, content_type: str = "", *,
               if_absent: bool = False) -> BlobInfo | None:
        """:meth:`write_bytes` from a file."""

    def list(self, prefix: str) -> Iterator[BlobInfo]:
        """Every object whose URI starts with ``prefix`` (a ``gs://bucket/...`` URI)."""

    def list_after(self, prefix: str, start_after: str = "") -> Iterator[BlobInfo]:
        """The objects under ``prefix`` whose name (the path after the bucket) sorts after ``start_after``,
        in name order: a listing that can stop anywhere and resume from the last name it gave."""

    def delete(self, uri: str) -> bool: ...

    def signed_url(self, uri: str, ttl: timedelta) -> str:
        """A URL that lets anyone holding it read the object until ``ttl`` has passed."""


@runtime_checkable
class LocalBuckets(Protocol):
    """A :class:`BlobStore` whose buckets are folders on this machine (the embedded default)."""

    buckets: Path  # the folder holding one folder per bucket

    def uri_for(self, path: Path) -> str:
        """The ``gs://`` URI of a file under a bucket folder; ``ValueError`` for any other path."""

    def path_for(self, uri: str) -> Path:
        """The local file behind a ``gs://`` URI (it may not exist yet)."""


class MessageBus(Protocol):
    """Publishes to named topics. Delivery is at-least-once to the subscribed handlers."""

    def publish(
        self,
        topic: str,
        data: bytes,
        attributes: Mapping[str, str] | None = None,
        ordering_key: str = "",
    ) -> str:
        """Publish and return the message id once the bus has accepted the message."""


# What a subscription calls with each event it delivers; a handler that returns text leaves it as a note.
EventHandler = Callable[["CloudEvent"], object]


class HostedBus(MessageBus, Protocol):
    """A message bus that delivers to handlers in this process (``mldiag up``'s embedded bus)."""

    def subscribe(self, topic: str, handler: EventHandler, *, name: str = "", max_in_flight: int = 0) -> object:
        """Deliver ``topic``'s messages to ``handler``, at most ``max_in_flight`` at once (0: any)."""

    def start(self, workers: int = 4) -> None:
        """Deliver in the background, up to ``workers`` messages at once."""

    def stop(self, interrupt: Callable[[], object] | None = None) -> None:
        """Stop delivering; ``interrupt`` is called to cut short the handlers still running."""


class ProfilerClient(Protocol):
    """One workload's XProf profiler server (``host:port``); failures raise
    :class:`mldiag.domain.capture.CaptureFailed` naming why."""

    @property
    def address(self) -> str: ...

    def reachable(self) -> bool: ...

    def probe(self) -> None:
        """Raise unless a profiler server answers at the address."""

    def trace(self, repository_root: str, session_id: str, host_name: str, duration_ms: int,
              levels: TracerLevels) -> None:
        """Trace for ``duration_ms`` and write the xplane under ``repository_root``."""

    def start_continuous(self, levels: TracerLevels) -> None: ...

    def stop_continuous(self) -> bool:
        """Stop continuous profiling; ``False`` when none was running."""

    def snapshot(self, logdir: Path) -> list[Path]:
        """Fetch the continuous-profiling buffer into ``logdir``; the xplane files written."""


# Dials the profiler server at an address a capture was allowed to contact.
ProfilerDialer = Callable[[str], ProfilerClient]


@dataclass(frozen=True)
class QueryResult:
    """What a query answered: its columns, its rows (values as JSON has them), and whether rows were left out."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False


class FleetRecords(Protocol):
    """The fleet table: one row per finished analysis (:class:`mldiag.domain.fleet.FleetRecord`), queried with SQL
    in the store's own dialect."""

    dialect: Literal["sqlite", "bigquery"]
    table: str  # how a query names the table

    def insert(self, row: Mapping[str, Any]) -> None:
        """Write one record's row; a row already there with its ``record_id`` is replaced unless it is newer."""

    def query(self, sql: str, parameters: Mapping[str, Any] | None = None, *, max_rows: int,
              timeout_s: float) -> QueryResult:
        """Run one statement that only reads, at most ``timeout_s`` and ``max_rows`` rows (more are left out);
        :class:`mldiag.domain.InvalidArgument` with the store's reason when it fails or would write."""


class Reasoner(Protocol):
    """Investigates an analysis that needs attention (:mod:`mldiag.analysis.reasoning.investigation`); raises
    :class:`~mldiag.analysis.reasoning.investigation.ReasonerFailed` saying why when it cannot conclude."""

    name: str

    def investigate(self, analysis: Analysis, tools: FollowupTools) -> Conclusion:
        """Form hypotheses from ``analysis``, check them with ``tools``, conclude."""


@dataclass(frozen=True)
class AnalysisJob:
    """One analysis for an :class:`AnalysisRunner`: what to analyse, where to write, within which limits."""

    inputs: tuple[Path, ...]  # the session's host files; for a merge, the hosts' evidence (``host.json``)
    out: Path  # the folder the reports (or one host's evidence) are written to
    scratch: Path  # where the private copy of the inputs may live, removed by whoever gave it
    timeout_seconds: float
    memory_ceiling_bytes: int | None = None  # None: the default ceiling (MLDIAG_ANALYSIS_MEMORY_CEILING or a share)
    source: str = ""  # where the session is kept, for the report
    dashboard_uri: str = ""  # the session in the XProf viewer, for the report
    baseline: Path | None = None  # ``analysis.json`` of an earlier session of the run, to compare with
    baseline_session: str = ""  # that session's name
    merge: bool = False  # ``inputs`` are hosts' evidence, merged into the session's analysis
    missing_hosts: Mapping[str, str] = field(default_factory=dict)  # merge: each host left out -> why
    followups_on: Path | None = None  # merge: the host file the follow-up checks read


class AnalysisRunner(Protocol):
    """Runs analysis jobs where a time limit and a memory ceiling can stop them.

    A job that produces no result raises :class:`~mldiag.domain.errors.AnalysisFailed` saying why:
    :class:`~mldiag.domain.errors.AnalysisTimedOut` past its time limit,
    :class:`~mldiag.domain.errors.AnalysisWorkerCrashed` when what ran it ended without a result.
    """

    def analyse(self, job: AnalysisJob) -> Analysis:
        """Analyse the job's host files (or merge its hosts' evidence), investigate, compare with the baseline
        and write ``summary.html`` and ``analysis.json`` into ``job.out``; returns the analysis."""

    def analyse_host(self, job: AnalysisJob) -> HostAnalysis:
        """One host file's evidence, for a merge later, also written to ``host.json`` in ``job.out``."""

    def stop_running(self) -> int:
        """Ask every job this runner runs now to stop at once (its private copy removed); their calls fail with
        :class:`~mldiag.domain.errors.AnalysisWorkerCrashed`, to retry. Returns how many were asked."""

    def kill_left_behind(self, scratch: Path) -> bool:
        """Kill what a runner of a process that was killed left analysing in ``scratch``, if it still runs;
        returns whether it did."""


class Clock(Protocol):
    def now(self) -> datetime: ...

