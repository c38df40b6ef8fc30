"""The one wiring place: builds the adapters the settings ask for.

Everything else receives a :class:`~mldiag.services.dependencies.Services` (the
ports, already built) and never imports an adapter. The Google Cloud client
libraries are imported only when ``backend=gcp``, so the embedded default and
cold starts of functions that do not need them stay light.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from mldiag.ports import BlobStore, HostedBus, ProfilerClient
from mldiag.services.dependencies import Services

if TYPE_CHECKING:
    from mldiag.analysis.reasoning.investigation import Investigator
    from mldiag.config import Settings


def build(settings: Settings | None = None) -> Services:
    """Build the adapters for ``settings`` (read from the environment when omitted)."""
    from mldiag.config import Settings

    settings = settings or Settings.from_env()
    if settings.backend == "gcp":
        return _build_gcp(settings)
    return _build_embedded(settings)


def build_hosted(settings: Settings) -> tuple[Services, HostedBus]:
    """The embedded services, and their bus, whose subscribers run in this process (``mldiag up``)."""
    from mldiag.adapters.bus.inprocess import InProcessBus

    services = _build_embedded(settings)
    assert isinstance(services.bus, InProcessBus)
    return services, services.bus


def build_blobs(settings: Settings) -> BlobStore:
    """The blob store alone, for a process that only uploads profiles (the node agent)."""
    if settings.backend == "gcp":
        from mldiag.adapters.blobs.gcs import GcsBlobs

        return GcsBlobs(settings.project)
    from mldiag.adapters.blobs.local import LocalBlobs

    return LocalBlobs(settings.data_dir, share_base_url=settings.api_url, share_key=settings.share_key)


def dial_profiler(address: str) -> ProfilerClient:
    """The XProf profiler server at ``address``, as captures and the node agent reach it."""
    from mldiag.adapters.profiler.xprof_server import ProfilerServer

    return ProfilerServer(address)


def _build_embedded(settings: Settings) -> Services:
    from mldiag.adapters.analysis_runner.child_process import ChildProcessAnalysisRunner
    from mldiag.adapters.bus.inprocess import InProcessBus
    from mldiag.adapters.fleet.sqlite import SqliteFleet
    from mldiag.adapters.store.sqlite import SqliteStore

    return Services(
        settings=settings,
        store=SqliteStore(settings.sqlite_path),
        blobs=build_blobs(settings),
        profiler=dial_profiler,
        analysis_runner=ChildProcessAnalysisRunner(settings),
        bus=InProcessBus(settings.project, path=settings.sqlite_path, max_attempts=settings.max_delivery_attempts),
        fleet=SqliteFleet(settings.fleet_path),
    )


def _build_gcp(settings: Settings) -> Services:
    from mldiag.adapters.analysis_runner.child_process import ChildProcessAnalysisRunner
    from mldiag.adapters.bus.pubsub import PubSubBus
    from mldiag.adapters.fleet.bigquery import BigQueryFleet
    from mldiag.adapters.store.firestore import FirestoreStore

    return Services(
        settings=settings,
        store=FirestoreStore(settings.project, settings.firestore_database),
        blobs=build_blobs(settings),
        profiler=dial_profiler,
        analysis_runner=ChildProcessAnalysisRunner(settings),
        bus=PubSubBus(settings.project, settings.topic_prefix),
        fleet=BigQueryFleet(settings.project, settings.fleet_dataset),
    )


@functools.cache
def services() -> Services:
    """The process-wide services of a deployed function, built once per instance (logs configured too)."""
    from mldiag.logs import configure

    built = build()
    configure(built.settings.log_format)
    return built


def build_investigator(settings: Settings, reasoner: str | None = None) -> Investigator:
    """The investigation the settings ask for (``reasoner`` overrides ``settings.reasoner``)."""
    from mldiag.adapters.reasoning import investigator

    return investigator(settings, reasoner)
