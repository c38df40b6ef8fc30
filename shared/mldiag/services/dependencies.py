"""What a use case is given: the ports, the settings and the clock, and the typed views built on them.

:mod:`mldiag.bootstrap` builds the adapters and hands them over in a
:class:`Services`; a service reads the ports from it and never learns which
adapter is behind one.

A use case does not ask for the whole :class:`Services`: its parameter's type
names the port families below that it, and every use case it hands its
dependencies to, reads: one family, or a Protocol of its module that combines
several (``RegistrationPorts``). ``Services`` satisfies every family
structurally, so callers pass it unchanged; the type checker (``[tool.mypy]`` in
``pyproject.toml``) holds each use case to its Protocol.

The typed views load their modules (the resource models, the event archive) on
first use: a function's cold start imports this module, and needs none of them
until its first event.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from mldiag.domain.clock import utcnow
from mldiag.ports import AnalysisRunner, BlobStore, DocumentStore, FleetRecords, MessageBus, ProfilerDialer

if TYPE_CHECKING:
    from mldiag.config import Settings
    from mldiag.domain.resources import MachineLearningRun, MonitoredEvent, Operation, ProfilerSession, ProfilerTarget
    from mldiag.services.event_archive import EventArchive
    from mldiag.services.repository import Repository
    from cloudevents.http import CloudEvent


class Stored(Protocol):
    """The document store, the clock its timestamps come from, and the repositories over it."""

    @property
    def store(self) -> DocumentStore: ...

    @property
    def now(self) -> Callable[[], datetime]: ...

    @property
    def runs(self) -> Repository[MachineLearningRun]: ...

    @property
    def sessions(self) -> Repository[ProfilerSession]: ...

    @property
    def targets(self) -> Repository[ProfilerTarget]: ...

    @property
    def monitored_events(self) -> Repository[MonitoredEvent]: ...

    @property
    def operations(self) -> Repository[Operation]: ...


class Publishing(Protocol):
    """The message bus."""

    @property
    def bus(self) -> MessageBus: ...


class Transacting(Stored, Publishing, Protocol):
    """The store and the bus together: what a unit of work (:mod:`mldiag.services.unit_of_work`) commits to and
    publishes on."""


class Blobs(Protocol):
    """The blob store: profiles, reports, exports."""

    @property
    def blobs(self) -> BlobStore: ...


class Configured(Protocol):
    """The deployment's settings."""

    @property
    def settings(self) -> Settings: ...


class Dialling(Protocol):
    """The profiler dialer, which asks a training process for a trace."""

    @property
    def profiler(self) -> ProfilerDialer: ...


class Analysing(Protocol):
    """The analysis runner, where an analysis job runs within its limits."""

    @property
    def analysis_runner(self) -> AnalysisRunner: ...


class Fleet(Protocol):
    """The fleet table; ``None`` where the deployment keeps none."""

    @property
    def fleet(self) -> FleetRecords | None: ...


class Archiving(Protocol):
    """The archive of every event a function received."""

    @property
    def events(self) -> EventArchive: ...


@dataclass
class Services:
    """What a handler, the API or the CLI needs, already built: every port family at once."""

    settings: Settings
    store: DocumentStore
    blobs: BlobStore
    bus: MessageBus
    profiler: ProfilerDialer
    analysis_runner: AnalysisRunner
    now: Callable[[], datetime] = field(default=utcnow)
    fleet: FleetRecords | None = None

    @functools.cached_property
    def runs(self) -> Repository[MachineLearningRun]:
        from mldiag.domain.resources import MachineLearningRun
        from mldiag.services.repository import Repository

        return Repository(self.store, MachineLearningRun, self.now)

    @functools.cached_property
    def sessions(self) -> Repository[ProfilerSession]:
        from mldiag.domain.resources import ProfilerSession
        from mldiag.services.repository import Repository

        return Repository(self.store, ProfilerSession, self.now)

    @functools.cached_property
    def targets(self) -> Repository[ProfilerTarget]:
        from mldiag.domain.resources import ProfilerTarget
        from mldiag.services.repository import Repository

        return Repository(self.store, ProfilerTarget, self.now)

    @functools.cached_property
    def monitored_events(self) -> Repository[MonitoredEvent]:
        from mldiag.domain.resources import MonitoredEvent
        from mldiag.services.repository import Repository

        return Repository(self.store, MonitoredEvent, self.now)

    @functools.cached_property
    def operations(self) -> Repository[Operation]:
        from mldiag.domain.resources import Operation
        from mldiag.services.repository import Repository

        return Repository(self.store, Operation, self.now)

    @functools.cached_property
    def events(self) -> EventArchive:
        from mldiag.services.event_archive import EventArchive

        retention = timedelta(days=self.settings.event_retention_days)
        return EventArchive(self.store, self.blobs, self.settings.bucket, retention, self.now)


# A function's handler: its dependencies and one event (see mldiag.entrypoints.handlers).
FunctionHandler = Callable[[Services, "CloudEvent"], object]
