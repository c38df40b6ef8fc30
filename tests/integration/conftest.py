"""Integration tests run against the devstack: a running one, or one started for the session.

If ``FIRESTORE_EMULATOR_HOST``, ``PUBSUB_EMULATOR_HOST`` and
``STORAGE_EMULATOR_HOST`` are set (``.ci/run``, or a developer's
``scripts/devstack``), the tests use that devstack. Otherwise the ``devstack``
fixture starts one for the session (so ``pytest tests/integration`` works on
its own) and stops it at the end; without java or the emulator jars those tests
are skipped, unless ``MLDIAG_REQUIRE_EMULATORS=1`` makes that a failure.

Known emulator gaps (do not test for them here): the Firestore emulator does not
enforce composite indexes or TTL, and a contended transaction costs about 2 s;
the Pub/Sub emulator ignores subscription filters and retry policies, does not
dead-letter from a subscription with message ordering, and sends no OIDC token
with a push.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from mldiag.devstack import create_push_subscriptions, read_env_file
from mldiag.devstack_host import HostedFunction, create_host

EMULATOR_VARIABLES = ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "STORAGE_EMULATOR_HOST")
START_TIMEOUT_S = 120
REPO = Path(__file__).resolve().parents[2]
TEST_FUNCTIONS = Path(__file__).parent / "functions"


@contextlib.contextmanager
def _hosted(project: str, functions: list[HostedFunction]) -> Iterator[str]:
    from google.cloud import pubsub_v1

    server = make_server("127.0.0.1", 0, create_host(functions), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
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


@pytest.fixture(scope="session")
def devstack(deployment_settings: dict[str, str],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The devstack's environment (``MLDIAG_*`` and ``*_EMULATOR_HOST``), also set in ``os.environ``."""
    if all(os.environ.get(name) for name in EMULATOR_VARIABLES):
        # The root conftest set the running devstack's MLDIAG_* settings aside; they apply from here on.
        env = {name: os.environ[name] for name in EMULATOR_VARIABLES} | deployment_settings
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            yield env
        return
    if os.environ.get("MLDIAG_REQUIRE_EMULATORS") == "1":
        pytest.fail("MLDIAG_REQUIRE_EMULATORS=1 but the emulators' variables are not set", pytrace=False)

    state = tmp_path_factory.mktemp("devstack")
    env_file = state / "env"
    with (state / "devstack.log").open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "mldiag.devstack", "--project", "mldiag-integration",
             "--functions-dir", str(REPO / "functions"), "--data-dir", str(state / "data"),
             "--env-file", str(env_file)],
            stdout=subprocess.DEVNULL, stderr=log_file,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not env_file.exists():
            if process.poll() is not None:
                log = (state / "devstack.log").read_text(errors="replace")
                if process.returncode == 2:  # a prerequisite is missing; the log says which
                    pytest.skip(f"no devstack: {log.strip().splitlines()[-1]}")
                pytest.fail(f"devstack exited with {process.returncode}:\n{log}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"devstack not ready after {START_TIMEOUT_S} s", pytrace=False)
            time.sleep(0.2)
        env = read_env_file(env_file)
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            yield env
    finally:
        process.terminate()
        process.wait(timeout=30)
