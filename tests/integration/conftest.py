"""Integration tests run against the devstack (the ``devstack`` fixture of ``tests/conftest.py``:
a running one, or one started for the session); here, test functions hosted beside it.

Known emulator gaps (do not test for them here): the Firestore emulator does not
enforce composite indexes or TTL, and a contended transaction costs about 2 s;
the Pub/Sub emulator ignores subscription filters and retry policies, does not
dead-letter from a subscription with message ordering, and sends no OIDC token
with a push.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from mldiag.local.devstack import create_push_subscriptions
from mldiag.local.devstack_host import HostedFunction, create_host

TEST_FUNCTIONS = Path(__file__).parent / "functions"


@contextlib.contextmanager
def _hosted(project: str, functions: list[HostedFunction]) -> Iterator[str]:
    from google.cloud import pubsub_v1

    server = make_server("127.0.0.1", 0, create_host(functions), threaded=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    subscriptions = create_push_subscriptions(project, functions, url)
    try:
        yield url
    finally:
        subscriber = pubsub_v1.SubscriberClient()
        for subscription in subscriptions:
            subscriber.delete_subscription(subscription=subscription)
        server.shutdown()


@pytest.fixture
def host_test_function(devstack) -> Iterator[Callable[..., str]]:
    """``host_test_function(project, name, **triggers)`` serves ``functions/<name>/main.py`` beside
    this file in a functions host of this process, with push subscriptions made as the devstack
    makes them; returns the host's URL. Everything goes away after the test."""
    with contextlib.ExitStack() as stack:
        def host(project: str, name: str, **triggers) -> str:
            function = HostedFunction(name, TEST_FUNCTIONS / name / "main.py", **triggers)
            return stack.enter_context(_hosted(project, [function]))

        yield host
