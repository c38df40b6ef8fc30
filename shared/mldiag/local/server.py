"""``mldiag up``: the whole control plane on one machine, on the embedded default.

One process hosts what the cloud spreads over services: the HTTP API (waitress,
which reads each request whole before a worker thread answers it:
:mod:`mldiag.local.http_server`), every event function bound to its topic on
the in-process bus exactly as Terraform subscribes it (``mldiag.entrypoints.handlers``),
a watcher that turns files landing in the local buckets into Cloud Storage
finalize notifications (delivered to the bucket-triggered functions the way
Eventarc delivers them), and a timer standing in for Cloud Scheduler's
maintenance ticks. With an OTLP port it also takes OpenTelemetry metrics over
gRPC (:mod:`mldiag.local.otlp_grpc`; OTLP/HTTP is a route of the API). With a viewer
port it also runs XProf over the local bucket
(:mod:`mldiag.local.xprof_viewer`, a child process on 127.0.0.1) and sends the
sessions' dashboard links there. Ctrl-C or SIGTERM stops it cleanly: the server stops
accepting and finishes the requests in flight, then the watcher, the timer and
the bus and the viewer stop; running analyses are stopped, to run again on the
next start. The bus's queue is in the SQLite file, so what was queued or being
delivered is delivered on the next start, which also stops analysis workers a
killed predecessor left running, removes its scratch folders and registers
files that landed while it was down.

Every folder under ``DATA_DIR/buckets`` is a bucket: its finalize events reach
the bucket-triggered functions, as an Eventarc trigger per bucket would deliver
them. The terminal shows what happened in a sentence each (``--log-format
console``); every log line goes as JSON to ``DATA_DIR/logs/mldiag.log``.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType

import structlog
from cloudevents.http import CloudEvent

from mldiag import bootstrap, logs
from mldiag.config import (
    BUCKET_NOTIFICATIONS,
    BUCKET_TRIGGERED,
    EMBEDDED_SUBSCRIBERS,
    TOPIC_SUBSCRIBERS,
    Settings,
)
from mldiag.domain.envelopes import finalized_event_from_notification, message_from_cloud_event
from mldiag.domain.errors import InvalidArgument
from mldiag.domain.messages import MaintenanceTick
from mldiag.domain.names import SESSIONS, parse_child
from mldiag.entrypoints import handlers
from mldiag.entrypoints.console.viewer_links import VIEWER_URL
from mldiag.entrypoints.http.app import create_app
from mldiag.entrypoints.http.auth import Guard
from mldiag.entrypoints.http.origin import HostNames
from mldiag.local.bucket_watcher import BucketWatcher
from mldiag.local.data_dir import make_private, private_files
from mldiag.local.http_server import HttpServer
from mldiag.local.native_stderr import NativeStderr
from mldiag.local.xprof_viewer import XprofViewer
from mldiag.ports import HostedBus
from mldiag.services.analysis_jobs import clean_up_after_a_stop
from mldiag.services.dependencies import Services
from mldiag.services.registration import Registrar

log = structlog.get_logger(__name__)

# Functions that share this machine's memory with everything else: an analysis reserves up to 80 % of the
# memory it finds free, so analyses run one after another here (each has an instance of its own in the cloud).
MAX_IN_FLIGHT = {"analyze_session": 1}
BUS_WORKERS = 4  # deliveries at once besides the host analyses of fanned-out sessions
HOST_ANALYSIS_MEMORY = 4 * 1024**3  # what one host analysis is given room for (100 MB - 1 GB files convert in it)
# One machine's profile files land together, so a found session settles sooner than in the cloud (30 s),
# where the hosts of a job write from many machines; a host that comes later starts a new analysis anyway.
LOCAL_SETTLE_SECONDS = 2.0
SETTLE_POLL_SECONDS = 0.5  # how often the ticker looks for a session whose settle window has passed
MIN_TICK_GAP_SECONDS = 2.0  # between two ticks, so that a tick that cannot settle a session is not repeated at once


def host_analysis_slots() -> int:
    """How many hosts of a fanned-out session this machine analyses at once: one per core, as memory allows."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, min(os.cpu_count() or 1, memory // HOST_ANALYSIS_MEMORY))


@dataclass(frozen=True)
class Banner:
    """What a user needs to point a workload at this control plane."""

    url: str
    data_dir: str
    bucket_uri: str
    bucket_folder: str
    log_file: str
    viewer_url: str = ""
    sdk_url: str = ""  # DIAGON_BASE_URL: the capability URL when a token is configured
    otlp_endpoint: str = ""  # OTEL_EXPORTER_OTLP_ENDPOINT for the SDK's gRPC exporter; "" when off
    otlp_note: str = ""  # why OTLP/gRPC is off though it was wanted


class StartFailed(Exception):
    """The server cannot listen where it was asked to, or cannot use its data directory; the message
    says why and what to do instead."""


def _why_not_bound(host: str, port: int, error: OSError) -> str:
    choose = "choose another with --port, or --port 0 for a free one"
    local = "use --host 127.0.0.1 (this machine) or 0.0.0.0 (every interface)"
    if isinstance(error, socket.gaierror):
        return f"{host!r} is not a known host address; {local}"
    if error.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is in use; {choose}"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to listen on port {port} of {host} (ports below 1024 need privileges); {choose}"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this machine; {local}"
    return f"cannot listen on {host} port {port}: {error.strerror or error}"


def _listens_beyond_this_machine(server: HttpServer) -> bool:
    return not ipaddress.ip_address(server.bind_addr[0].split("%")[0]).is_loopback


def _open_to_the_network(host: str, port: int) -> str:
    return (f"listening on {host} port {port} with no MLDIAG_API_TOKEN lets anyone who reaches it change runs, "
            "read the operator routes and post alerts")


def _bound_server(host: str, port: int) -> HttpServer:
    try:
        return HttpServer(host, port)  # binds now, so that --port 0 has a real port to report
    except OSError as error:
        raise StartFailed(_why_not_bound(host, port, error)) from None


def session_page_link(url: str) -> Callable[[str], str]:
    """The console page of a session (by resource name) on the server at ``url``; "" for another name."""
    def link(name: str) -> str:
        try:
            session = parse_child(name, SESSIONS)
        except InvalidArgument:
            return ""
        return f"{url}/ui/runs/{session.run_name.run}/sessions/{session.id}"

    return link


def wire_functions(services: Services, bus: HostedBus) -> None:
    """Subscribe every event function to its topics, and the bucket-triggered ones to every bucket's
    finalize events."""
    limits = {**MAX_IN_FLIGHT, "analyze_host": host_analysis_slots()}
    for topic, function in (*TOPIC_SUBSCRIBERS.items(), *EMBEDDED_SUBSCRIBERS.items()):
        bus.subscribe(topic, functools.partial(handlers.EVENT_HANDLERS[function], services), name=function,
                      max_in_flight=limits.get(function, 0))
    for function in BUCKET_TRIGGERED:
        handler = handlers.EVENT_HANDLERS[function]

        def deliver(notification: CloudEvent, handler: handlers.Handler = handler) -> None:
            message = message_from_cloud_event(notification)
            event = finalized_event_from_notification(message)
            if event is not None:
                handler(services, event)

        bus.subscribe(BUCKET_NOTIFICATIONS, deliver, name=function)


def recover_from_a_stop(services: Services) -> None:
    """What a killed predecessor left: its analysis workers and scratch, and files that landed meanwhile."""
    from mldiag.services.operator.reconciliation import reconcile

    clean_up_after_a_stop(services)
    reconcile(services, force=True, settling=timedelta(0))


class _Ticker(threading.Thread):
    """Cloud Scheduler's stand-in: a maintenance tick every ``interval``, and one as soon as a session's settle
    window has passed, so that its analysis is requested then and not up to an interval later."""

    def __init__(self, bus: HostedBus, registrar: Registrar, interval: float):
        super().__init__(name="mldiag-maintenance", daemon=True)
        self.bus, self.registrar, self.interval, self.stopping = bus, registrar, interval, threading.Event()

    def run(self) -> None:
        last_tick = time.monotonic()
        while not self.stopping.wait(SETTLE_POLL_SECONDS):
            since = time.monotonic() - last_tick
            if since >= self.interval or (since >= MIN_TICK_GAP_SECONDS and self._settle_is_due()):
                tick = MaintenanceTick(source="mldiag up").outgoing()
                self.bus.publish(tick.topic, tick.data)
                last_tick = time.monotonic()

    def _settle_is_due(self) -> bool:
        try:
            return self.registrar.settle_is_due()
        except Exception:  # the store busy or gone while stopping: the interval's tick comes anyway
            log.debug("could not check for sessions due to settle", exc_info=True)
            return False


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@private_files()
def serve(settings: Settings, host: str, port: int, announce: Callable[[Banner], None],
          viewer_port: int | None = None, otlp_port: int | None = None, otlp_optional: bool = False,
          insecure: bool = False) -> None:
    """Run until Ctrl-C or SIGTERM; ``announce`` is called once the port is bound (and the viewer is up).

    An address beyond loopback without a credential to check (the open mode) is refused unless ``insecure``,
    and then warned about. The data directory and what is written in it are its owner's only
    (:mod:`mldiag.local.data_dir`).

    ``viewer_port`` (0: any free port) also runs the XProf viewer; if it cannot start, nothing runs.
    ``otlp_port`` (0: any free port) also takes OTLP metrics over gRPC, on ``host``; with
    ``otlp_optional``, a port that cannot be bound leaves only that off (the banner says why).
    Raises :class:`StartFailed` when a port cannot be bound or the data directory used; nothing is
    left running then, and nothing is written when it is the port.
    """
    native = NativeStderr()
    native.install()  # before the log handlers are made: theirs is the terminal's copy of stderr
    try:
        _serve(native, settings, host, port, announce, viewer_port, otlp_port, otlp_optional, insecure)
    finally:
        native.restore()


def _serve(native: NativeStderr, settings: Settings, host: str, port: int, announce: Callable[[Banner], None],
           viewer_port: int | None, otlp_port: int | None, otlp_optional: bool, insecure: bool) -> None:
    server = _bound_server(host, port)
    bound_port = server.bind_addr[1]
    open_to_the_network = _listens_beyond_this_machine(server) and Guard(settings).mode == "open"
    if open_to_the_network and not insecure:
        server.stop()
        raise StartFailed(f"{_open_to_the_network(host, bound_port)}; set MLDIAG_API_TOKEN (and MLDIAG_ALERT_TOKEN "
                          "for the alert webhooks), listen on 127.0.0.1, or pass --insecure to run open anyway")
    reachable_host = '127.0.0.1' if host in ('0.0.0.0', '::', '') else host
    url = f"http://{reachable_host}:{bound_port}"
    settings = settings.model_copy(update={"backend": "embedded", "api_url": url})
    log_file = settings.data_dir / "logs" / "mldiag.log"
    try:
        tightened = make_private(settings.data_dir)
        logs.configure(settings.log_format, log_file=log_file, session_link=session_page_link(url))
        services, bus = bootstrap.build_hosted(settings)
    except OSError as error:
        server.stop()
        native.restore()
        logs.close()
        raise StartFailed(f"cannot use the data directory {settings.data_dir}: {error.strerror or error}; "
                          "choose another with --data") from None
    if tightened:
        log.warning("the data directory was open to other users; now only its owner may read it",
                    tightened=", ".join(tightened))
    if open_to_the_network:
        log.warning(f"{_open_to_the_network(host, bound_port)} (--insecure)")
    bucket_folder = settings.data_dir / "buckets" / settings.bucket
    wire_functions(services, bus)
    app = create_app(services, HostNames.serving(host, bound_port))
    viewer = None
    if viewer_port is not None:
        bucket_folder.mkdir(parents=True, exist_ok=True)
        viewer = XprofViewer(bucket_folder, viewer_port, settings.data_dir / "logs" / "xprof-viewer.log")
        try:
            app.config[VIEWER_URL] = viewer.start()
        except Exception:
            server.stop()
            raise
    otlp_server, otlp_note = None, ""
    if otlp_port is not None:
        from mldiag.local.otlp_grpc import OtlpGrpcServer, OtlpPortUnavailable

        try:
            otlp_server = OtlpGrpcServer(services, host, otlp_port)
        except OtlpPortUnavailable as error:
            if not otlp_optional:
                server.stop()
                if viewer is not None:
                    viewer.stop()
                raise StartFailed(str(error)) from None
            otlp_note = str(error)
            log.warning("OTLP/gRPC is off", reason=otlp_note)
    watcher = BucketWatcher(services.blobs, bus)
    ticker = _Ticker(bus, Registrar(services), settings.maintenance_interval_seconds)

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    recover_from_a_stop(services)
    bus.start(workers=BUS_WORKERS + host_analysis_slots())
    watcher.start()
    ticker.start()
    if otlp_server is not None:
        otlp_server.start()
    otlp_endpoint = f"http://{reachable_host}:{otlp_server.port}" if otlp_server else ""
    capability = settings.sdk_capability if settings.api_token or settings.auth_audience else ""
    announce(Banner(url, str(settings.data_dir), settings.bucket_uri, str(bucket_folder), str(log_file),
                    app.config.get(VIEWER_URL, ""), f"{url}/sdk/{capability}" if capability else url,
                    otlp_endpoint, otlp_note))
    try:
        try:
            server.serve(app)  # returns on Ctrl-C or SIGTERM that reach its loop
        except KeyboardInterrupt:  # one that came between two turns of the loop
            pass
        log.info("stopping", notice=True)
    finally:
        server.stop()
        if otlp_server is not None:
            otlp_server.stop()
        if viewer is not None:
            viewer.stop()
        ticker.stopping.set()
        watcher.stop()
        bus.stop(interrupt=services.analysis_runner.stop_running)  # analyses stopped are retried on the next start
        signal.signal(signal.SIGTERM, previous)
        native.restore()
        logs.close()
