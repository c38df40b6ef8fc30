"""The devstack's functions host: every function in one WSGI app, reached the way Google Cloud reaches it.

Each function is the functions-framework app of its deployable source
(``functions/<name>/main.py``, entry point ``<name>``), mounted at ``/<name>``.
Pub/Sub push subscriptions post to ``/<name>/projects/P/topics/T``; the request
reaches the app untouched and functions-framework turns it into the
``messagePublished`` CloudEvent, taking its source from the topic in the path,
as it does in the cloud. A function triggered by a bucket instead sits behind
:class:`EventarcStorageAdapter`, which turns the Cloud Storage notification that
fake-gcs-server publishes into the ``google.cloud.storage.object.v1.finalized``
CloudEvent Eventarc would deliver.

Run alone: ``python -m mldiag.local.devstack_host --port 8090 --functions-dir functions``
(the devstack does this, with the emulators' variables set).
"""

from __future__ import annotations

import argparse
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.serving import run_simple

from mldiag.config import BUCKET_TRIGGERED, Settings
from mldiag.domain.envelopes import PUBSUB_PUBLISHED, finalized_event_from_notification, message_from_cloud_event
from mldiag.domain.errors import PermanentFailure

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
log = structlog.get_logger(__name__)



@dataclass(frozen=True)
class HostedFunction:
    """A function source and what triggers it: topics pushed to it, or finalized objects of a bucket."""

    name: str
    source: Path
    topics: tuple[str, ...] = ()
    finalized_bucket: str = ""


def discover(functions_dir: Path, settings: Settings) -> list[HostedFunction]:
    """Every ``functions_dir/<name>/main.py``, with the triggers Terraform gives it."""
    from mldiag.config import TOPIC_SUBSCRIBERS

    hosted = []
    for source in sorted(Path(functions_dir).glob("*/main.py")):
        name = source.parent.name
        topics = tuple(topic for topic, subscriber in TOPIC_SUBSCRIBERS.items() if subscriber == name)
        bucket = settings.bucket if name in BUCKET_TRIGGERED else ""
        hosted.append(HostedFunction(name, source.resolve(), topics, bucket))
    return hosted


def _respond(start_response: Callable[..., Any], status: str, body: bytes = b"") -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


class EventarcStorageAdapter:
    """WSGI middleware: a Pub/Sub push of a Cloud Storage notification in, Eventarc's CloudEvent out.

    Notifications of other event types or other buckets are acknowledged and
    dropped, as an Eventarc trigger filtered on type and bucket would.
    """

    def __init__(self, app: WsgiApp, bucket: str):
        self.app = app
        self.bucket = bucket

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        try:
            push = json.loads(body)
            envelope = CloudEvent({"type": PUBSUB_PUBLISHED, "source": "//pubsub.googleapis.com/",
                                   "id": str(push.get("message", {}).get("messageId") or "")}, push)
            event = finalized_event_from_notification(message_from_cloud_event(envelope), self.bucket)
        except (ValueError, PermanentFailure) as error:
            log.warning("unreadable storage notification", error=str(error))
            return _respond(start_response, "400 Bad Request", str(error).encode())
        if event is None:
            return _respond(start_response, "204 No Content")
        headers, data = to_binary(event)
        forwarded = {key: value for key, value in environ.items() if not key.startswith("HTTP_")}
        forwarded.update({f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()})
        forwarded.update({
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/",
            "CONTENT_TYPE": headers["content-type"],
            "CONTENT_LENGTH": str(len(data)),
            "wsgi.input": io.BytesIO(data),
        })
        return self.app(forwarded, start_response)


def _index(functions: list[HostedFunction]) -> WsgiApp:
    listing = json.dumps({"functions": [function.name for function in functions]}).encode()

    def index(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
        if environ.get("PATH_INFO", "/") not in ("", "/"):
            yield from _respond(start_response, "404 Not Found", b"no such function")
            return
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(listing)))])
        yield listing

    return index


def create_host(functions: list[HostedFunction]) -> WsgiApp:
    """One WSGI app serving ``functions`` at ``/<name>``, and their names as JSON at ``/``."""
    import functions_framework

    mounts: dict[str, WsgiApp] = {}
    for function in functions:
        # functions-framework remembers the last signature type in the environment;
        # each function declares its own with a decorator.
        os.environ.pop("FUNCTION_SIGNATURE_TYPE", None)
        app = functions_framework.create_app(target=function.name, source=str(function.source))
        if function.finalized_bucket:
            app = EventarcStorageAdapter(app, function.finalized_bucket)
        mounts[f"/{function.name}"] = app
    return DispatcherMiddleware(_index(functions), mounts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--functions-dir", type=Path, default=Path("functions"))
    args = parser.parse_args(argv)
    functions = discover(args.functions_dir, Settings.from_env())
    log.info("hosting functions", functions=[function.name for function in functions], port=args.port)
    run_simple(args.host, args.port, create_host(functions), threaded=True)


if __name__ == "__main__":
    main()
