"""``mldiag up``: the whole control plane on one machine, on the embedded default.

One process hosts what the cloud spreads over services: the HTTP API (cheroot,
a threaded production WSGI server), every event function bound to its topic on
the in-process bus exactly as Terraform subscribes it (``mldiag.entrypoints``),
a watcher that turns files landing in the local buckets into Cloud Storage
finalize notifications (delivered to the bucket-triggered functions the way
Eventarc delivers them), and a timer standing in for Cloud Scheduler's
maintenance ticks. With a viewer port it also runs XProf over the local bucket
(:mod:`mldiag.ui.xprof_viewer`, a child process on 127.0.0.1) and sends the
sessions' dashboard links there. Ctrl-C or SIGTERM stops it cleanly: the server stops
accepting and finishes the requests in flight, then the watcher, the timer and
the bus and the viewer stop; running analyses are stopped, to run again on the
next start. The bus's queue is in the SQLite file, so what was queued or being
delivered is delivered on the next start, which also stops analysis workers a
killed predecessor left running, removes its scratch folders and registers
files that landed while it was down.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType

import structlog
from cheroot import wsgi
from cloudevents.http import CloudEvent

from mldiag import bootstrap, entrypoints
from mldiag.adapters.inprocess_bus import InProcessBus
from mldiag.analysis.job import clean_up_after_a_stop, stop_workers
from mldiag.api import create_app
from mldiag.bootstrap import Services
from mldiag.bucket_watcher import BucketWatcher
from mldiag.config import BUCKET_NOTIFICATIONS, MAINTENANCE_TICKS, Settings
from mldiag.messages import encode_json, finalized_event_from_notification, message_from_cloud_event
from mldiag.ui.viewer_links import VIEWER_URL
from mldiag.ui.xprof_viewer import XprofViewer

log = structlog.get_logger(__name__)

MAINTENANCE_INTERVAL_S = 15.0  # Cloud Scheduler ticks every minute; locally results should come sooner
SERVER_THREADS = 16
# Functions that share this machine's memory with everything else: an analysis reserves up to 80 % of the
# memory it finds free, so analyses run one after another here (each has an instance of its own in the cloud).
MAX_IN_FLIGHT = {"analyze_session": 1}


@dataclass(frozen=True)
class Banner:
    """What a user needs to point a workload at this control plane."""

    url: str
    data_dir: str
    bucket_uri: str
    bucket_folder: str
    viewer_url: str = ""


def wire_functions(services: Services, bus: InProcessBus) -> None:
    """Subscribe every event function to its topics, and the bucket-triggered ones to finalize events."""
    for topic, function in entrypoints.TOPIC_SUBSCRIBERS.items():
        bus.subscribe(topic, functools.partial(entrypoints.EVENT_HANDLERS[function], services), name=function,
                      max_in_flight=MAX_IN_FLIGHT.get(function, 0))
    for function in entrypoints.BUCKET_TRIGGERED:
        handler = entrypoints.EVENT_HANDLERS[function]

        def deliver(notification: CloudEvent, handler: entrypoints.Handler = handler) -> None:
            message = message_from_cloud_event(notification)
            event = finalized_event_from_notification(message, services.settings.bucket)
            if event is not None:
                handler(services, event)

        bus.subscribe(BUCKET_NOTIFICATIONS, deliver, name=function)


def recover_from_a_stop(services: Services) -> None:
    """What a killed predecessor left: its analysis workers and scratch, and files that landed meanwhile."""
    from mldiag.reconciliation import reconcile

    clean_up_after_a_stop(services.settings)
    reconcile(services, force=True, settling=timedelta(0))


class _Ticker(threading.Thread):
    def __init__(self, bus: InProcessBus, interval: float):
        super().__init__(name="mldiag-maintenance", daemon=True)
        self.bus, self.interval, self.stopping = bus, interval, threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            self.bus.publish(MAINTENANCE_TICKS, encode_json({"source": "mldiag up"}))


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def serve(settings: Settings, host: str, port: int, announce: Callable[[Banner], None],
          viewer_port: int | None = None) -> None:
    """Run until Ctrl-C or SIGTERM; ``announce`` is called once the port is bound (and the viewer is up).

    ``viewer_port`` (0: any free port) also runs the XProf viewer; if it cannot start, nothing runs.
    """
    server = wsgi.Server((host, port), wsgi_app=None, numthreads=SERVER_THREADS)
    server.prepare()  # binds now, so that --port 0 has a real port to report
    bound_port = server.bind_addr[1]
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{bound_port}"
    settings = settings.model_copy(update={"backend": "embedded", "api_url": url})
    bucket_folder = settings.data_dir / "buckets" / settings.bucket
    services = bootstrap.build(settings)
    bus = services.bus
    assert isinstance(bus, InProcessBus)
    wire_functions(services, bus)
    app = create_app(services)
    viewer = None
    if viewer_port is not None:
        bucket_folder.mkdir(parents=True, exist_ok=True)
        viewer = XprofViewer(bucket_folder, viewer_port, settings.data_dir / "logs" / "xprof-viewer.log")
        try:
            app.config[VIEWER_URL] = viewer.start()
        except Exception:
            server.stop()
            raise
    server.wsgi_app = app
    watcher = BucketWatcher(services.blobs, bus)
    ticker = _Ticker(bus, MAINTENANCE_INTERVAL_S)

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    recover_from_a_stop(services)
    bus.start()
    watcher.start()
    ticker.start()
    announce(Banner(url, str(settings.data_dir), settings.bucket_uri, str(bucket_folder),
                    app.config.get(VIEWER_URL, "")))
    try:
        server.serve()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        server.stop()
        if viewer is not None:
            viewer.stop()
        ticker.stopping.set()
        watcher.stop()
        bus.stop(interrupt=lambda: stop_workers(services.settings))  # analyses stopped are retried on the next start
        signal.signal(signal.SIGTERM, previous)
