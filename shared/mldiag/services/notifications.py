"""Notifications out: what happened, as CloudEvents, delivered to the destinations a run or the deployment names.

When an analysis finishes, and when a monitored event opens or closes, a
CloudEvent (:class:`~mldiag.domain.messages.Notification`: ``dev.mldiag.analysis.v1.completed``,
``dev.mldiag.event.v1.opened`` or ``...closed``) is sent on ``analysis-events`` from the
unit of work that records the state it reports. Anyone may subscribe to that topic;
``deliver_notifications`` does, and sends each event to:

* a generic webhook, in the CloudEvents HTTP binding (binary or structured
  mode) with ``X-Mldiag-Signature: sha256=<hex>``, an HMAC-SHA256 of the body
  under the webhook's secret;
* a Slack incoming webhook, as a compact Block Kit message;
* PagerDuty Events API v2: a change event for every analysis, a trigger for a
  NEEDS_ATTENTION analysis with a P0 finding of an automatically captured
  session (deduplicated on its monitored event), resolved when that event closes.

A destination that fails makes the delivery fail, so the bus retries it with
backoff and dead-letters it in the end; destinations already served for an
event are remembered and not sent it again. Every outbound URL is resolved and
checked first: never a metadata, link-local or multicast address, and no
loopback or private one unless the operator allows it
(``MLDIAG_NOTIFY_ALLOW_PRIVATE``).

A run's secrets (its webhook's signing secret, its Slack URL, its PagerDuty
routing key) are stored sealed (:mod:`mldiag.services.sealed_secrets`) and never
shown; a route stored before sealing is sealed when it is next read.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import requests
import structlog
from pydantic import Field

from mldiag.config import Settings
from mldiag.domain.errors import InvalidArgument, PermanentFailure
from mldiag.domain.messages import (
    ANALYSIS_COMPLETED,
    EVENT_CLOSED,
    EVENT_OPENED,
    AnalysisCompleted,
    MonitoredEventChanged,
    Notification,
)
from mldiag.domain.resources import HealthStatus, MonitoredEvent, ProfilerSession
from mldiag.domain.topics import ANALYSIS_EVENTS
from mldiag.domain.types import CamelModel
from mldiag.domain.clock import format_timestamp
from mldiag.ports import Transaction
from mldiag.services import unit_of_work
from mldiag.services.dependencies import Blobs, Configured, Publishing, Stored
from mldiag.services.repository import document_key
from mldiag.services.sealed_secrets import Sealer, SecretUnreadable, sealer
from mldiag.services.unit_of_work import UnitOfWork


class NotificationPorts(Stored, Publishing, Blobs, Configured, Protocol):
    """What sending and delivering notifications uses."""


SIGNATURE_HEADER = "X-Mldiag-Signature"
DELIVERED = "notificationDeliveries"  # (event, destination) served while another destination is being retried
ROUTES = "notificationRoutes"
REPORT_LINK_TTL = timedelta(days=7)
REQUEST_TIMEOUT_S = 10.0
log = structlog.get_logger(__name__)


class NotificationRoute(CamelModel):
    """Where a run's notifications go; an empty field falls back to the deployment's default."""

    run: str = ""
    webhook_url: str = ""
    webhook_secret: str = ""
    webhook_mode: Literal["binary", "structured"] = "binary"
    slack_url: str = ""
    pagerduty_routing_key: str = Field(default="", pattern=r"^[A-Za-z0-9]{0,64}$")

    def over(self, default: NotificationRoute) -> NotificationRoute:
        """This route, each unset destination taken from ``default``."""
        webhook = self if self.webhook_url else default
        return NotificationRoute(
            run=self.run, webhook_url=webhook.webhook_url, webhook_secret=webhook.webhook_secret,
            webhook_mode=webhook.webhook_mode, slack_url=self.slack_url or default.slack_url,
            pagerduty_routing_key=self.pagerduty_routing_key or default.pagerduty_routing_key)

    def described(self) -> dict[str, Any]:
        """What a GET shows: where notifications go, never a secret (a Slack URL and a routing key are ones)."""
        return {"run": self.run, "webhookUrl": self.webhook_url, "webhookMode": self.webhook_mode,
                "webhookSigned": bool(self.webhook_secret), "slack": bool(self.slack_url),
                "pagerduty": bool(self.pagerduty_routing_key)}


SECRET_FIELDS = ("webhookSecret", "slackUrl", "pagerdutyRoutingKey")  # as stored


def load_route(transaction: Transaction, seal: Sealer, run_name: str) -> NotificationRoute:
    """The run's own route, its secrets opened; one stored in plain text is sealed in the same transaction."""
    document = transaction.get(ROUTES, document_key(run_name))
    if document is None:
        return NotificationRoute(run=run_name)
    route = NotificationRoute.model_validate(
        {name: seal.open(value) if name in SECRET_FIELDS else value for name, value in document.items()})
    if seal.can_seal and any(not seal.is_sealed(document.get(name, "")) for name in SECRET_FIELDS):
        save_route(transaction, seal, route)
    return route


def save_route(transaction: Transaction, seal: Sealer, route: NotificationRoute) -> None:
    document = route.to_json_dict()
    transaction.set(ROUTES, document_key(route.run),
                    {name: seal.seal(value) if name in SECRET_FIELDS else value for name, value in document.items()})


def read_route(services: NotificationPorts, run_name: str) -> NotificationRoute:
    """The route of an existing run (:class:`~mldiag.domain.NotFound` otherwise), its secrets opened."""
    services.runs.get(run_name)
    seal = sealer(services.settings)
    return unit_of_work.run(services, lambda unit: load_route(unit.transaction, seal, run_name))


def deployment_route(settings: Settings) -> NotificationRoute:
    return NotificationRoute(
        webhook_url=settings.notify_webhook_url, webhook_secret=settings.notify_webhook_secret,
        webhook_mode=settings.notify_webhook_mode, slack_url=settings.notify_slack_url,
        pagerduty_routing_key=settings.notify_pagerduty_routing_key)


def set_route(services: NotificationPorts, run_name: str, route: NotificationRoute) -> dict[str, Any]:
    """Replace the run's destinations (each URL checked now, and again when it is called)."""
    for url in (route.webhook_url, route.slack_url):
        if url:
            check_url(url, services.settings.notify_allow_private)
    if route.webhook_url and not route.webhook_secret:
        raise InvalidArgument("a webhook needs a secret to sign its requests with", field="webhookSecret")

    services.runs.get(run_name)
    seal, saved = sealer(services.settings), route.model_copy(update={"run": run_name})
    unit_of_work.run(services, lambda unit: save_route(unit.transaction, seal, saved))
    return saved.described()


def describe_route(services: NotificationPorts, run_name: str) -> dict[str, Any]:
    return read_route(services, run_name).described()


def check_url(url: str, allow_private: bool) -> str:
    """``url`` if a notification may be sent there; :class:`InvalidArgument` naming why not.

    The host checked is the one the HTTP client dials: the URL is read by urllib3's parser, which requests
    connects with, and a URL that another parser would read differently (a backslash, user information, a
    host in a spelling that is not canonical) is refused outright rather than interpreted.
    """
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    from mldiag.services.capture.targets import resolve_outbound_address

    if any(character in url for character in "\\\t\r\n ") or not url.isprintable():
        raise InvalidArgument("a notification URL may not hold backslashes, spaces or control characters", field="url")
    try:
        dialled = parse_url(url)
    except LocationParseError:
        raise InvalidArgument("the notification URL does not parse", field="url") from None
    if dialled.scheme not in ("https", "http") or not dialled.host:
        raise InvalidArgument(f"{_without_path(url)!r} is not an http(s) URL", field="url")
    if dialled.auth is not None:
        raise InvalidArgument("a notification URL may not hold user information (user@host)", field="url")
    host = dialled.host.lower()
    if host.strip("[]") != (urlsplit(url).hostname or ""):
        raise InvalidArgument(f"{host!r}: the notification URL reads as two different hosts", field="url")
    if not _canonical_host(host):
        raise InvalidArgument(f"{host!r} is not a host name or an address in its usual spelling", field="url")
    port = dialled.port or (443 if dialled.scheme == "https" else 80)
    try:
        resolve_outbound_address(f"{host}:{port}", allow_private=allow_private)
    except OSError as error:
        raise InvalidArgument(f"{host!r} does not resolve: {error}", field="url") from None
    return url


_HOST_NAME = re.compile(r"(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?")


def _canonical_host(host: str) -> bool:
    """A DNS name with a letter in its last label, a dotted-quad IPv4 address, or a bracketed IPv6 address,
    each as the resolver itself would write it (no ``127.1``, ``0x7f.1`` or ``2130706433``)."""
    if host.startswith("["):
        try:
            return host == f"[{ipaddress.IPv6Address(host[1:-1])}]" and host.endswith("]")
        except ValueError:
            return False
    try:
        return str(ipaddress.IPv4Address(host)) == host
    except ValueError:
        pass
    last_label = host.rstrip(".").rsplit(".", 1)[-1]
    return bool(_HOST_NAME.fullmatch(host)) and not last_label.isdigit() and not last_label.startswith("0x")


def _without_path(url: str) -> str:
    """What an error may quote of a URL: its scheme and host, never the path that holds a webhook's secret."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" if parts.hostname else parts.scheme + ":"


# --- the events -----------------------------------------------------------------------------------

def _publish(unit: UnitOfWork, services: NotificationPorts, event_type: str, event_id: str, subject: str,
             data: AnalysisCompleted | MonitoredEventChanged) -> None:
    """Send the notification once ``unit`` has committed."""
    settings = services.settings
    notification = Notification(type=event_type, id=event_id, subject=subject, data=data,
                                source=f"//mldiag/projects/{settings.project}/locations/{settings.location}",
                                time=format_timestamp(services.now()))
    # Event ids hold resource names: no "/" in a key.
    unit.publish(f"{ANALYSIS_EVENTS}:{document_key(event_id)}", notification.outgoing())


def _report_link(services: NotificationPorts, session: ProfilerSession) -> str:
    """A share link to the session's report; "" when there is none or it cannot be signed (a notification
    without its link is better than an analysis that fails over it)."""
    if not session.analysis.report_uri:
        return ""
    try:
        return services.blobs.signed_url(session.analysis.report_uri, REPORT_LINK_TTL)
    except Exception as error:  # noqa: BLE001 - whatever the signer raises, the analysis stands
        log.warning("no share link for the notification", session=session.name, error=str(error))
        return ""


def analysis_completed(unit: UnitOfWork, services: NotificationPorts, session: ProfilerSession,
                       step_time_change: float | None) -> None:
    """Send ``analysis.v1.completed``, once ``unit`` has committed, for a session whose analysis is DONE."""
    from mldiag.domain.names import parent_of

    analysis = session.analysis
    data = AnalysisCompleted(
        run=parent_of(session.name), session=session.name, status=analysis.health.value if analysis.health else "",
        top_finding=analysis.top_finding, step_time_ms=analysis.step_time_ms, step_time_change=step_time_change,
        auto_captured=session.auto_captured, monitored_events=list(session.monitored_events),
        report_link=_report_link(services, session))
    # One id per completion: analysing the same files again (on request) is news again.
    completion = f"{analysis.generation_set}@{format_timestamp(analysis.end_time)}"
    _publish(unit, services, ANALYSIS_COMPLETED, f"{session.name}/analyses/{completion}", session.name, data)


def event_changed(unit: UnitOfWork, services: NotificationPorts, event: MonitoredEvent, opened: bool) -> None:
    """Send ``event.v1.opened`` or ``...closed`` for a monitored event, once ``unit`` has committed."""
    from mldiag.domain.names import parent_of

    data = MonitoredEventChanged(
        run=parent_of(event.name), event=event.name, status="OPEN" if opened else "CLOSED", type=event.type.value,
        display_name=event.display_name,
        start_time=format_timestamp(event.start_time) if event.start_time else "",
        end_time=format_timestamp(event.end_time) if event.end_time else "",
        sessions=list(event.profiler_sessions), suppressed_count=event.suppressed_count)
    kind = EVENT_OPENED if opened else EVENT_CLOSED
    _publish(unit, services, kind, f"{event.name}/{'opened' if opened else 'closed'}", event.name, data)


# --- delivery -------------------------------------------------------------------------------------

def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _post(services: NotificationPorts, url: str, body: bytes, headers: dict[str, str]) -> None:
    check_url(url, services.settings.notify_allow_private)
    host = urlsplit(url).hostname
    try:
        response = requests.post(url, data=body, headers=headers, timeout=REQUEST_TIMEOUT_S, allow_redirects=False)
    except requests.RequestException as error:
        # The exception's text holds the whole URL, and a Slack URL's path is its secret.
        raise RuntimeError(f"{host} could not be reached ({type(error).__name__})") from None
    if not 200 <= response.status_code < 300:
        raise RuntimeError(f"{host} answered {response.status_code}: {response.text[:200]}")


def _webhook(services: NotificationPorts, route: NotificationRoute, event: dict[str, Any]) -> None:
    if route.webhook_mode == "structured":
        body = json.dumps(event, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/cloudevents+json; charset=utf-8"}
    else:
        body = json.dumps(event["data"], separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json",
                   **{f"ce-{name}": str(value) for name, value in event.items()
                      if name not in ("data", "datacontenttype")}}
    headers[SIGNATURE_HEADER] = signature(route.webhook_secret, body)
    _post(services, route.webhook_url, body, headers)


def _summary(event: dict[str, Any]) -> str:
    data = event["data"]
    if event["type"] == ANALYSIS_COMPLETED:
        what = data["status"] or "DONE"
        return f"mldiag: {data['session'].rsplit('/', 1)[-1]} analysed, {what}" + (
            f": {data['topFinding']}" if data["topFinding"] else "")
    verb = "opened" if event["type"] == EVENT_OPENED else "closed"
    return f"mldiag: monitored event {data['event'].rsplit('/', 1)[-1]} {verb} ({data['displayName'] or data['type']})"


def _change_text(change: float | None) -> str:
    return f"{change * 100:+.1f}%" if change is not None else "unknown"


def slack_message(event: dict[str, Any]) -> dict[str, Any]:
    """The Block Kit message for one event: status, run/session, P0 title, step-time change, report link."""
    data = event["data"]
    fields = [f"*Run*\n{data['run'].rsplit('/', 1)[-1]}"]
    if event["type"] == ANALYSIS_COMPLETED:
        fields += [f"*Session*\n{data['session'].rsplit('/', 1)[-1]}", f"*Status*\n{data['status'] or 'DONE'}",
                   f"*Step time change*\n{_change_text(data['stepTimeChange'])}"]
    else:
        fields += [f"*Event*\n{data['event'].rsplit('/', 1)[-1]}", f"*Status*\n{data['status']}"]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _summary(event)}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": text} for text in fields]},
    ]
    if data.get("topFinding"):
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"Top finding: {data['topFinding']}"}]})
    if data.get("reportLink"):
        blocks.append({"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "Open the report"}, "url": data["reportLink"]}]})
    return {"text": _summary(event), "blocks": blocks}


def _slack(services: NotificationPorts, route: NotificationRoute, event: dict[str, Any]) -> None:
    _post(services, route.slack_url, json.dumps(slack_message(event)).encode(), {"Content-Type": "application/json"})


def pagerduty_requests(event: dict[str, Any], routing_key: str) -> list[tuple[str, dict[str, Any]]]:
    """The Events API v2 requests one event makes: ``(path, body)`` pairs."""
    data, summary = event["data"], _summary(event)[:1024]
    links = [{"href": data["reportLink"], "text": "mldiag report"}] if data.get("reportLink") else []
    details = {k: v for k, v in data.items() if k != "reportLink"}
    source = data["run"].rsplit("/", 1)[-1]
    if event["type"] == ANALYSIS_COMPLETED:
        sent = [("/v2/change/enqueue", {"routing_key": routing_key, "links": links, "payload": {
            "summary": summary, "timestamp": event["time"], "source": source, "custom_details": details}})]
        alarming = (data["status"] == HealthStatus.NEEDS_ATTENTION.value and data["topFinding"].startswith("P0 ")
                    and data["autoCaptured"] and data["monitoredEvents"])
        if alarming:
            sent.append(("/v2/enqueue", {
                "routing_key": routing_key, "event_action": "trigger", "dedup_key": data["monitoredEvents"][0],
                "links": links, "payload": {"summary": summary, "source": source, "severity": "critical",
                                            "timestamp": event["time"], "component": data["session"],
                                            "custom_details": details}}))
        return sent
    if event["type"] == EVENT_CLOSED:
        return [("/v2/enqueue", {"routing_key": routing_key, "event_action": "resolve", "dedup_key": data["event"]})]
    return []


def _pagerduty(services: NotificationPorts, route: NotificationRoute, event: dict[str, Any]) -> None:
    base = services.settings.pagerduty_events_url.rstrip("/")
    for path, body in pagerduty_requests(event, route.pagerduty_routing_key):
        _post(services, base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})


# A destination: the route's setting that turns it on, and how an event is sent to it.
Destination = tuple[Callable[[NotificationRoute], str],
                    Callable[[NotificationPorts, NotificationRoute, dict[str, Any]], None]]

_DESTINATIONS: dict[str, Destination] = {
    "webhook": (lambda route: route.webhook_url, _webhook),
    "slack": (lambda route: route.slack_url, _slack),
    "pagerduty": (lambda route: route.pagerduty_routing_key, _pagerduty),
}


def deliver(services: NotificationPorts, notification: Notification) -> str:
    """The ``deliver_notifications`` handler body: one notification to each destination."""
    event = notification.wire()
    run = notification.data.run
    seal = sealer(services.settings)
    try:
        own = unit_of_work.run(services, lambda unit: load_route(unit.transaction, seal, run))
    except SecretUnreadable as error:
        raise PermanentFailure(f"the notifications of {run}: {error}") from None
    route = own.over(deployment_route(services.settings))
    sent, failed, served = [], [], []
    for name, (configured, send) in _DESTINATIONS.items():
        key = document_key(f"{event['id']}:{name}")
        served.append(key)
        if not configured(route) or services.store.get(DELIVERED, key) is not None:
            continue
        try:
            send(services, route, event)
        except (requests.RequestException, RuntimeError, InvalidArgument) as error:
            log.info("notification not delivered", destination=name, cloud_event=event["id"], error=str(error))
            failed.append(f"{name}: {error}")
            continue
        services.store.set(DELIVERED, key, {"event": event["id"], "destination": name,
                                            "deliveredAt": format_timestamp(services.now())})
        sent.append(name)
    if failed:
        raise RuntimeError("; ".join(failed))
    for key in served:  # a redelivery of a delivered event stops at the event archive (a duplicate)
        services.store.delete(DELIVERED, key)
    return f"{event['type']} {event['id']}: " + (f"sent to {', '.join(sent)}" if sent else "no destination left")
