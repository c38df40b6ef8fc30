"""Notifications out: a finished analysis and a monitored event's changes reach local receivers that check
the documented schemas (CloudEvents HTTP binding with its signature, Slack Block Kit, PagerDuty Events v2),
through the bus's retries and dead letters, and ``set-notifications`` never hands a secret back."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from cloudevents.http import CloudEvent
from typer.testing import CliRunner

from mldiag.entrypoints import handlers

from mldiag.services import notifications, unit_of_work
from mldiag.cli.main import app
from mldiag.config import ANALYSIS_EVENTS, Settings
from mldiag.domain.envelopes import storage_finalized_event
from mldiag.domain.errors import InvalidArgument
from mldiag.domain.degradation import Transition
from mldiag.domain import MachineLearningRun
from mldiag.services.monitoring.metrics import alert_message
from mldiag.local.server import wire_functions

PROFILE = Path(__file__).resolve().parents[2] / "fixtures" / "profiles" / "input_bound"
RUN = "projects/local-project/locations/local/machineLearningRuns/run1"
SESSION = f"{RUN}/profilerSessions/s1"
SECRET = "webhook-signing-secret"
ROUTING_KEY = "R0UT1NGKEY0123456789abcdef012345"


class Receiver:
    """A local HTTP endpoint that records what it is sent and fails the first ``failures`` requests
    (every one with ``failures=-1``)."""

    def __init__(self, failures: int = 0):
        self.failures = failures
        self.requests: list[tuple[str, dict[str, str], bytes]] = []  # every request, failed ones included
        self.accepted: list[tuple[str, dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = (self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                receiver.requests.append(request)
                failing = receiver.failures < 0 or len(receiver.requests) <= receiver.failures
                if not failing:
                    receiver.accepted.append(request)
                self.send_response(503 if failing else 202)
                self.end_headers()
                self.wfile.write(b"busy" if failing else b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Callable[..., Receiver]]:
    started: list[Receiver] = []

    def start(failures: int = 0) -> Receiver:
        started.append(Receiver(failures))
        return started[-1]

    yield start
    for one in started:
        one.server.shutdown()


@pytest.fixture
def deployment(start_server, receiver):
    """A control plane whose deployment default sends everything to local receivers, functions wired."""

    def start(webhook: Receiver, mode: str = "binary", **settings):
        server = start_server(bucket="profiles", settle_seconds=0, notify_allow_private=True,
                              notify_webhook_url=webhook.url + "/hook", notify_webhook_secret=SECRET,
                              notify_webhook_mode=mode, **settings)
        wire_functions(server.services, server.services.bus)
        return server

    return start


def _analyse_a_session(services) -> None:
    written = services.blobs.write_bytes("gs://profiles/run1/plugins/profile/s1/host0.xplane.pb",
                                         next(PROFILE.rglob("*.xplane.pb")).read_bytes())
    handlers.register_session(services, storage_finalized_event(
        {"bucket": "profiles", "name": "run1/plugins/profile/s1/host0.xplane.pb",
         "generation": written.generation, "size": str(written.size)}))
    services.bus.drain(timeout=120)


def _signed(headers: dict[str, str], body: bytes) -> bool:
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("x-mldiag-signature", ""), expected)


@pytest.mark.slow
def test_a_finished_analysis_reaches_the_webhook_slack_and_pagerduty_once(deployment, receiver):
    webhook, slack, pagerduty = receiver(), receiver(), receiver()
    server = deployment(webhook, notify_slack_url=slack.url + "/services/T0/B0/x",
                        pagerduty_events_url=pagerduty.url, notify_pagerduty_routing_key=ROUTING_KEY)

    _analyse_a_session(server.services)

    session = server.services.sessions.get(SESSION)
    assert session.analysis.state.value == "DONE"
    (path, headers, body), = webhook.requests  # exactly one, in binary mode: the attributes are headers
    assert path == "/hook" and _signed(headers, body)
    assert headers["ce-specversion"] == "1.0" and headers["ce-type"] == notifications.ANALYSIS_COMPLETED
    assert headers["ce-id"] and headers["ce-source"].startswith("//mldiag/") and headers["ce-subject"] == SESSION
    assert headers["content-type"] == "application/json"
    data = json.loads(body)
    assert data["run"] == RUN and data["session"] == SESSION
    assert data["status"] == session.analysis.health.value and data["topFinding"] == session.analysis.top_finding
    assert data["stepTimeMs"] == session.analysis.step_time_ms and "stepTimeChange" in data
    assert data["reportLink"].startswith(server.url + "/share/")

    (_, slack_headers, slack_body), = slack.requests
    message = json.loads(slack_body)
    assert slack_headers["content-type"] == "application/json" and "s1" in message["text"]
    assert all(block["type"] in ("section", "context", "actions") for block in message["blocks"])
    fields = " ".join(f["text"] for block in message["blocks"] for f in block.get("fields", []))
    assert "*Status*" in fields and "*Session*\ns1" in fields and "*Step time change*" in fields
    (button,) = [e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert button["url"] == data["reportLink"]

    (pd_path, _, pd_body), = pagerduty.requests  # a change event; no trigger: the session was not auto-captured
    change = json.loads(pd_body)
    assert pd_path == "/v2/change/enqueue" and change["routing_key"] == ROUTING_KEY
    assert change["payload"]["summary"] and change["payload"]["source"] == "run1" and change["payload"]["timestamp"]
    assert change["links"][0]["href"] == data["reportLink"]


def _create_run(services) -> None:
    services.runs.create(MachineLearningRun(name=RUN, artifacts={"gcsPath": "gs://profiles/run1"}))


def _alert(services, transition: Transition) -> None:
    if services.runs.find(RUN) is None:
        _create_run(services)
    services.bus.publish("monitoring-alerts", alert_message(
        RUN, "degradation-1", transition, "step time 30% above the baseline", "2026-01-01T00:00:00Z").outgoing().data)
    services.bus.drain(timeout=30)


def test_structured_mode_sends_the_whole_event_as_the_signed_body(deployment, receiver):
    webhook = receiver()
    server = deployment(webhook, mode="structured")

    _alert(server.services, Transition.OPENED)

    (_, headers, body), = webhook.requests
    assert headers["content-type"].startswith("application/cloudevents+json") and _signed(headers, body)
    event = json.loads(body)
    assert event["type"] == notifications.EVENT_OPENED and event["specversion"] == "1.0"
    assert event["data"]["event"] == f"{RUN}/monitoredEvents/degradation-1" and event["data"]["status"] == "OPEN"


@pytest.mark.slow
def test_a_receiver_that_fails_three_times_gets_the_event_once_and_the_others_are_not_resent(deployment, receiver):
    webhook, slack = receiver(failures=3), receiver()
    server = deployment(webhook, notify_slack_url=slack.url + "/slack")

    _alert(server.services, Transition.OPENED)

    assert len(webhook.requests) == 4 and len(webhook.accepted) == 1
    assert all(request[2] == webhook.accepted[0][2] for request in webhook.requests)  # the same event each time
    assert len(slack.requests) == 1  # served on the first attempt, not again on the webhook's retries
    assert server.services.bus.dead_letters == []
    assert server.services.store.query(notifications.DELIVERED) == []  # nothing kept once every one is served


@pytest.mark.slow
def test_a_receiver_that_always_fails_ends_dead_lettered_and_listed(deployment, receiver):
    webhook = receiver(failures=-1)
    server = deployment(webhook)

    _alert(server.services, Transition.OPENED)

    assert len(webhook.requests) == server.services.settings.max_delivery_attempts and not webhook.accepted
    listed = CliRunner().invoke(app, ["events", "dead-letters", "--format", "json"],
                                env={"MLDIAG_API_URL": server.url})
    assert listed.exit_code == 0, listed.output
    (letter,) = json.loads(listed.stdout)
    assert letter["deadLetterTopic"] == ANALYSIS_EVENTS + "-dead-letter"
    assert letter["sourceSubscription"] == "deliver_notifications" and "503" in letter["lastError"]


def test_pagerduty_is_triggered_for_an_auto_captured_p0_and_resolved_when_its_event_closes(deployment, receiver):
    webhook, pagerduty = receiver(), receiver()
    server = deployment(webhook, pagerduty_events_url=pagerduty.url, notify_pagerduty_routing_key=ROUTING_KEY)
    event_name = f"{RUN}/monitoredEvents/degradation-1"
    completed = {"type": notifications.ANALYSIS_COMPLETED, "time": "2026-01-01T00:05:00Z", "data": {
        "run": RUN, "session": f"{RUN}/profilerSessions/auto-degradation-1", "status": "NEEDS_ATTENTION",
        "topFinding": "P0 Input pipeline stalls the device", "stepTimeMs": 260.0, "stepTimeChange": 0.3,
        "autoCaptured": True, "monitoredEvents": [event_name], "reportLink": "https://example.com/r"}}

    (change, trigger) = notifications.pagerduty_requests(completed, ROUTING_KEY)
    assert change[0] == "/v2/change/enqueue"
    assert trigger[0] == "/v2/enqueue" and trigger[1]["event_action"] == "trigger"
    assert trigger[1]["dedup_key"] == event_name and trigger[1]["payload"]["severity"] == "critical"
    calm = {**completed, "data": {**completed["data"], "autoCaptured": False}}
    assert [path for path, _ in notifications.pagerduty_requests(calm, ROUTING_KEY)] == ["/v2/change/enqueue"]

    _alert(server.services, Transition.OPENED)
    _alert(server.services, Transition.CLOSED)

    (path, _, body), = pagerduty.requests  # the opening sends PagerDuty nothing; the closing resolves
    assert path == "/v2/enqueue"
    assert json.loads(body) == {"routing_key": ROUTING_KEY, "event_action": "resolve", "dedup_key": event_name}
    assert [json.loads(b)["status"] for _, _, b in webhook.requests] == ["OPEN", "CLOSED"]


@pytest.mark.slow
def test_set_notifications_routes_a_run_and_never_returns_its_secrets(start_server, receiver):
    server = start_server(notify_allow_private=True)
    _create_run(server.services)
    webhook = receiver()

    result = CliRunner().invoke(app, [
        "machine-learning-run", "set-notifications", "run1", "--webhook", webhook.url, "--webhook-secret", SECRET,
        "--slack", webhook.url + "/slack", "--pagerduty-routing-key", ROUTING_KEY, "--format", "json"],
        env={"MLDIAG_API_URL": server.url})

    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown == {"run": RUN, "webhookUrl": webhook.url, "webhookMode": "binary", "webhookSigned": True,
                     "slack": True, "pagerduty": True}
    assert SECRET not in result.stdout and ROUTING_KEY not in result.stdout and "/slack" not in result.stdout
    route = notifications.read_route(server.services, RUN).over(
        notifications.deployment_route(server.services.settings))
    assert route.webhook_secret == SECRET and route.pagerduty_routing_key == ROUTING_KEY
    fetched = requests.get(f"{server.url}/v1alpha/{RUN}:getNotifications", timeout=10)
    assert fetched.status_code == 200 and fetched.json() == shown

    unsigned = CliRunner().invoke(app, ["machine-learning-run", "set-notifications", "run1", "--webhook",
                                        webhook.url], env={"MLDIAG_API_URL": server.url})
    assert unsigned.exit_code == 1 and "needs a secret" in unsigned.output and "Traceback" not in unsigned.output


def test_notifications_never_go_to_a_refused_address():
    with pytest.raises(InvalidArgument, match="loopback or private"):
        notifications.check_url("http://127.0.0.1:8080/hook", allow_private=False)
    with pytest.raises(InvalidArgument, match="loopback or private"):
        notifications.check_url("http://10.1.2.3/hook", allow_private=False)
    with pytest.raises(InvalidArgument, match="metadata"):
        notifications.check_url("http://169.254.169.254/computeMetadata/v1/", allow_private=True)
    with pytest.raises(InvalidArgument, match="metadata"):
        notifications.check_url("http://metadata.google.internal/", allow_private=True)
    with pytest.raises(InvalidArgument, match="not an http"):
        notifications.check_url("file:///etc/passwd", allow_private=True)
    assert notifications.check_url("http://127.0.0.1:8080/hook", allow_private=True)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8080\\@8.8.8.8/x",  # urlsplit reads 8.8.8.8, the HTTP client dials 127.0.0.1
    "http://169.254.169.254\\@8.8.8.8/",
    "http://8.8.8.8\\x@127.0.0.1/",
    "http://user@8.8.8.8/",
    "http://8.8.8.8:80@127.0.0.1/",
    "http://127.1/", "http://0x7f.0.0.1/", "http://2130706433/", "http://0177.0.0.1/",
    "http://[::ffff:127.0.0.1]/", "http://8.8.8.8/\tx", "http://8.8.8.8 /x",
])
def test_a_url_the_http_client_would_read_differently_is_refused_even_where_private_is_allowed(url):
    with pytest.raises(InvalidArgument):
        notifications.check_url(url, allow_private=True)


def test_the_host_checked_is_the_host_the_http_client_dials():
    with pytest.raises(InvalidArgument, match="loopback or private"):
        notifications.check_url("http://localhost:8080/hook", allow_private=False)
    assert notifications.check_url("http://8.8.8.8:8080/hook?x=1#y", allow_private=False)
    assert notifications.check_url("http://[::1]:8080/hook", allow_private=True)


def test_a_delivery_that_fails_never_quotes_the_url_s_secret_path(start_server):
    server = start_server(notify_allow_private=True)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}/services/T000/B000/secret-token"
    with pytest.raises(RuntimeError) as failure:
        notifications._post(server.services, dead, b"{}", {})
    assert "secret-token" not in str(failure.value) and "127.0.0.1" in str(failure.value)


def test_a_deployment_webhook_without_its_signing_secret_is_refused_at_start():
    with pytest.raises(InvalidArgument, match="needs MLDIAG_NOTIFY_WEBHOOK_SECRET"):
        Settings.from_env({"MLDIAG_NOTIFY_WEBHOOK_URL": "https://hooks.example.com/mldiag"})


def test_a_loopback_receiver_is_not_called_unless_the_operator_allows_it(start_server, receiver):
    webhook = receiver()
    server = start_server(notify_webhook_url=webhook.url, notify_webhook_secret=SECRET, max_delivery_attempts=2)
    wire_functions(server.services, server.services.bus)

    _alert(server.services, Transition.OPENED)

    assert webhook.requests == []
    (letter,) = server.services.bus.dead_letters
    assert "loopback or private" in letter.error


def test_an_event_that_is_not_a_cloudevent_is_refused_for_good(start_server):
    server = start_server()
    push = CloudEvent({"type": "google.cloud.pubsub.topic.v1.messagePublished", "id": "x1",
                       "source": f"//pubsub.googleapis.com/projects/p/topics/{ANALYSIS_EVENTS}"},
                      {"message": {"data": base64.b64encode(b'{"hello": 1}').decode(), "messageId": "x1"}})
    outcome = handlers.deliver_notifications(server.services, push)
    assert outcome.value == "rejected"


@pytest.mark.slow
def test_a_notification_is_staged_under_a_key_firestore_takes(deployment, receiver):
    """Event ids hold resource names; Firestore reads a "/" in a document id as a path and refuses it."""
    server = deployment(receiver())
    _analyse_a_session(server.services)
    session = server.services.sessions.get(SESSION)
    committed = unit_of_work.commit(
        server.services, lambda unit: notifications.analysis_completed(unit, server.services, session, None))
    (key,) = committed.keys
    assert "/" not in key and server.services.store.get("outbox", key) is not None


def _stored_route(server) -> dict:
    return server.services.store.get(notifications.ROUTES, notifications.document_key(RUN))


def test_a_run_s_secrets_are_stored_encrypted_under_a_key_only_the_owner_reads(start_server, receiver):
    server = start_server(notify_allow_private=True)
    _create_run(server.services)
    slack = receiver().url + "/services/T0/B0/slack-secret-path"
    notifications.set_route(server.services, RUN, notifications.NotificationRoute(
        webhook_url=receiver().url, webhook_secret=SECRET, slack_url=slack, pagerduty_routing_key=ROUTING_KEY))

    stored = json.dumps(_stored_route(server))
    assert SECRET not in stored and "slack-secret-path" not in stored and ROUTING_KEY not in stored
    key = server.services.settings.data_dir / "notifications.key"
    assert key.stat().st_mode & 0o777 == 0o600
    route = notifications.read_route(server.services, RUN)
    assert (route.webhook_secret, route.slack_url, route.pagerduty_routing_key) == (SECRET, slack, ROUTING_KEY)
    assert notifications.describe_route(server.services, RUN)["slack"] is True


def test_a_route_stored_in_plain_text_is_read_and_sealed_on_read(start_server):
    server = start_server()
    _create_run(server.services)
    server.services.store.set(notifications.ROUTES, notifications.document_key(RUN),
                              {"run": RUN, "webhookSecret": SECRET, "pagerdutyRoutingKey": ROUTING_KEY})

    assert notifications.read_route(server.services, RUN).webhook_secret == SECRET
    stored = json.dumps(_stored_route(server))
    assert SECRET not in stored and ROUTING_KEY not in stored
    assert notifications.read_route(server.services, RUN).pagerduty_routing_key == ROUTING_KEY


def test_without_a_key_in_the_cloud_a_secret_is_refused_rather_than_stored_in_plain_text():
    from mldiag.domain.errors import FailedPrecondition
    from mldiag.services.sealed_secrets import SecretUnreadable, Sealer, sealer

    cloud = sealer(Settings(backend="gcp"))
    with pytest.raises(FailedPrecondition, match="MLDIAG_NOTIFY_ENCRYPTION_KEY"):
        cloud.seal(SECRET)
    sealed = sealer(Settings(backend="gcp", notify_encryption_key="k" * 32)).seal(SECRET)
    assert sealed != SECRET and SECRET not in sealed
    with pytest.raises(SecretUnreadable):
        Sealer(b"another key of thirty-two bytes!").open(sealed)
    with pytest.raises(SecretUnreadable):
        cloud.open(sealed)
