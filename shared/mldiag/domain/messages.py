"""The messages on our topics: one model per topic, the only way a message is built or read.

A producer builds the model and stages :meth:`TopicMessage.outgoing` in the
outbox; the function subscribed to the topic reads the model back once, where
the event comes in (:meth:`TopicMessage.read`), and hands the typed message to
its use case. A message that does not read is a :class:`PermanentFailure` with
a one-line reason, so the event archive rejects it and acknowledges it.

Each message carries its ``version``: a message without one is version 1 (so
messages staged before versions were written still read), and a version this
code does not know is refused rather than guessed at. Fields a newer producer
adds are ignored. The notifications on ``analysis-events`` are CloudEvents,
whose version is in their type (``dev.mldiag.analysis.v1.completed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from mldiag.domain.alerts import Alert, alert_from_monitored_event
from mldiag.domain.envelopes import Message, encode_json
from mldiag.domain.errors import InvalidArgument, PermanentFailure, invalid_argument
from mldiag.domain.fleet import FLEET_RECORD_TYPE, FleetRecord
from mldiag.domain.layout import XPLANE_SUFFIX, parse_blob_uri
from mldiag.domain.names import parent_of
from mldiag.domain.resources import AnalyzerReport, DetectionState, MonitoredEvent
from mldiag.domain.topics import (
    ANALYSIS_EVENTS,
    ANALYSIS_REQUESTS,
    CAPTURE_REQUESTS,
    HOST_ANALYSIS_REQUESTS,
    MAINTENANCE_TICKS,
    MONITORING_ALERTS,
)
from mldiag.domain.clock import format_timestamp

ANALYSIS_COMPLETED = "dev.mldiag.analysis.v1.completed"
EVENT_OPENED = "dev.mldiag.event.v1.opened"
EVENT_CLOSED = "dev.mldiag.event.v1.closed"
NOTIFICATION_TYPES = (ANALYSIS_COMPLETED, EVENT_OPENED, EVENT_CLOSED)


@dataclass(frozen=True)
class Outgoing:
    """A message as the bus publishes it: its topic, data, attributes and ordering key."""

    topic: str
    data: bytes
    attributes: Mapping[str, str] = field(default_factory=dict)
    ordering_key: str = ""


class TopicMessage(BaseModel):
    """A message of one of our topics: camelCase JSON, its version, unknown fields ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)
    topic: ClassVar[str]

    version: Literal[1] = 1

    def attributes(self) -> dict[str, str]:
        """The Pub/Sub attributes a subscription may filter on."""
        return {}

    def ordering_key(self) -> str:
        return ""

    def wire(self) -> dict[str, Any]:
        """The message as JSON has it."""
        return self.model_dump(mode="json", by_alias=True)

    def outgoing(self) -> Outgoing:
        return Outgoing(self.topic, encode_json(self.wire()), self.attributes(), self.ordering_key())

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """The message in ``data``; :class:`PermanentFailure` saying in one line why it is not one."""
        try:
            return cls.model_validate_json(data)
        except ValidationError as error:
            raise PermanentFailure(f"unreadable {cls.topic} message: {_reason(error)}") from None

    @classmethod
    def read(cls, message: Message) -> Self:
        """:meth:`decode` of a delivered Pub/Sub message."""
        return cls.decode(message.data)


def _reason(error: ValidationError) -> str:
    first = error.errors()[0]
    if first["type"] == "json_invalid":
        return "its data is not JSON"
    if first["loc"] == ("version",):
        return f"version {first['input']!r} is not one this deployment reads"
    return str(invalid_argument(error))


def _profile_uri(uri: str) -> str:
    if not uri.endswith(XPLANE_SUFFIX):
        raise ValueError(f"{uri!r} is not the gs:// URI of a {XPLANE_SUFFIX} file")
    try:
        parse_blob_uri(uri)
    except InvalidArgument as bad:
        raise ValueError(str(bad)) from None
    return uri


def _required(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    return value


class AnalysisRequest(TopicMessage):
    """``analysis-requests``: analyse these files of the session (or, with ``merge``, merge what its hosts left)."""

    topic: ClassVar[str] = ANALYSIS_REQUESTS

    session: str
    generation_set: str
    host_files: dict[str, str]  # host -> gs:// URI of its .xplane.pb
    merge: bool = False  # merge the evidence the hosts of a fanned-out analysis left, rather than analyse

    check_required = field_validator("session", "generation_set")(_required)

    @field_validator("host_files")
    @classmethod
    def check_profiles(cls, host_files: dict[str, str]) -> dict[str, str]:
        if not host_files:
            raise ValueError("must map each host to the gs:// URI of its .xplane.pb")
        return {host: _profile_uri(uri) for host, uri in host_files.items()}

    @property
    def folder_uri(self) -> str:
        """The session folder: where the host files are."""
        return sorted(self.host_files.values())[0].rsplit("/", 1)[0]

    def attributes(self) -> dict[str, str]:
        return {"session": self.session, "run": parent_of(self.session), "generationSet": self.generation_set}


class HostAnalysisRequest(TopicMessage):
    """``host-analysis-requests``: analyse one host file of a fanned-out session."""

    topic: ClassVar[str] = HOST_ANALYSIS_REQUESTS

    session: str
    generation_set: str
    host: str
    host_file: str  # gs:// URI of its .xplane.pb

    check_required = field_validator("session", "generation_set", "host")(_required)
    check_profile = field_validator("host_file")(_profile_uri)

    @property
    def folder_uri(self) -> str:
        return self.host_file.rsplit("/", 1)[0]

    def attributes(self) -> dict[str, str]:
        return {"session": self.session, "generationSet": self.generation_set, "host": self.host}


class CaptureTaskRequest(TopicMessage):
    """``capture-requests``: run this capture task. The task itself is read from the store, never from here."""

    topic: ClassVar[str] = CAPTURE_REQUESTS

    task: str
    operation: str = ""
    target: str = ""
    session: str = ""
    action: str = ""
    run: str = ""
    agent: str = ""  # the node agent that serves the target; "" when the capture function does

    check_required = field_validator("task")(_required)

    def attributes(self) -> dict[str, str]:
        return {"run": self.run, "target": self.target, "action": self.action,
                **({"agent": self.agent} if self.agent else {})}


class AlertMessage(TopicMessage):
    """``monitoring-alerts``: a MonitoredEvent of a run, open while it has no ``endTime`` and some report
    says DETECTED. Any system may send one; the webhooks send each alert they receive as one.

    The topic also takes a Cloud Monitoring incident as its Pub/Sub channel publishes it
    (:func:`read_alert`)."""

    topic: ClassVar[str] = MONITORING_ALERTS

    run: str = ""  # a full name, an id or a display name
    monitored_event_id: str = ""
    monitored_event: MonitoredEvent

    @classmethod
    def of(cls, alert: Alert) -> AlertMessage:
        """The message that reads back as ``alert``."""
        state = DetectionState.DETECTED if alert.open else DetectionState.NOT_DETECTED
        reports = alert.reports or [AnalyzerReport(analyzer=alert.source or "alert", detection_state=state)]
        try:
            event = MonitoredEvent(type=alert.type, display_name=alert.display_name, start_time=alert.start_time,
                                   end_time=None if alert.open else alert.end_time, targets=alert.targets,
                                   analyzer_reports=reports)
            return cls(run=alert.run, monitored_event_id=alert.event_id, monitored_event=event)
        except ValidationError as error:
            raise invalid_argument(error) from None

    def alert(self) -> Alert:
        return alert_from_monitored_event(self.run, self.monitored_event_id, self.monitored_event)

    def attributes(self) -> dict[str, str]:
        return {"run": self.run}

    def ordering_key(self) -> str:
        return self.run

    def wire(self) -> dict[str, Any]:
        return {**super().wire(), "monitoredEvent": self.monitored_event.to_json_dict()}


def read_alert(message: Message) -> Alert:
    """The alert a ``monitoring-alerts`` message carries, whichever of its shapes it has; its ``run`` as the
    alert names it (the caller looks the run up)."""
    from mldiag.domain.alerts import parse_alert

    payload = message.json()
    if isinstance(payload, dict) and "monitoredEvent" in payload:
        return AlertMessage.decode(message.data).alert()
    return parse_alert(payload)


class MaintenanceTick(TopicMessage):
    """``maintenance-ticks``: time for a maintenance pass (Cloud Scheduler sends ``{}``)."""

    topic: ClassVar[str] = MAINTENANCE_TICKS

    source: str = ""


class _NotificationData(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class AnalysisCompleted(_NotificationData):
    """What ``analysis.v1.completed`` reports."""

    run: str
    session: str
    status: str = ""
    top_finding: str = ""
    step_time_ms: float | None = None
    step_time_change: float | None = None
    auto_captured: bool = False
    monitored_events: list[str] = []
    report_link: str = ""


class MonitoredEventChanged(_NotificationData):
    """What ``event.v1.opened`` and ``event.v1.closed`` report."""

    run: str
    event: str
    status: Literal["OPEN", "CLOSED"]
    type: str
    display_name: str = ""
    start_time: str = ""
    end_time: str = ""
    sessions: list[str] = []
    suppressed_count: int = 0


class Notification(BaseModel):
    """``analysis-events``: a notification, as a structured CloudEvent. The topic also carries fleet records
    (:class:`mldiag.domain.fleet.FleetRecord`, ``ce-type`` ``dev.mldiag.analysis.v1.record``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    topic: ClassVar[str] = ANALYSIS_EVENTS

    specversion: Literal["1.0"] = "1.0"
    type: Literal["dev.mldiag.analysis.v1.completed", "dev.mldiag.event.v1.opened", "dev.mldiag.event.v1.closed"]
    id: str
    source: str
    subject: str
    time: str
    datacontenttype: Literal["application/json"] = "application/json"
    data: AnalysisCompleted | MonitoredEventChanged

    @model_validator(mode="after")
    def check_data_of_its_type(self) -> Notification:
        expected = AnalysisCompleted if self.type == ANALYSIS_COMPLETED else MonitoredEventChanged
        if not isinstance(self.data, expected):
            raise ValueError(f"the data of {self.type} is not what it reports")
        return self

    def wire(self) -> dict[str, Any]:
        """The structured CloudEvent as JSON has it."""
        return self.model_dump(mode="json", by_alias=True)

    def outgoing(self) -> Outgoing:
        return Outgoing(self.topic, encode_json(self.wire()),
                        {"ce-type": self.type, "ce-id": self.id, "ce-subject": self.subject})

    @staticmethod
    def carried_by(message: Message) -> bool:
        """Whether ``message`` is a notification: the topic's other messages say another ``ce-type``."""
        kind = message.attributes.get("ce-type", "")
        return not kind or kind in NOTIFICATION_TYPES

    @classmethod
    def read(cls, message: Message) -> Notification:
        try:
            return cls.model_validate_json(message.data)
        except ValidationError as error:
            raise PermanentFailure(f"unreadable notification: {_reason(error)}") from None


def fleet_record_message(record: FleetRecord, source: str) -> Outgoing:
    """``analysis-events``: the record as a binary-mode CloudEvent (the record itself is the data, the shape a
    Pub/Sub BigQuery subscription writes to a table as it is; its version is in its ``ce-type``)."""
    return Outgoing(ANALYSIS_EVENTS, encode_json(record.row()), {
        "ce-specversion": "1.0", "ce-type": FLEET_RECORD_TYPE, "ce-id": f"{record.record_id}/record",
        "ce-source": source, "ce-subject": record.session, "ce-time": format_timestamp(record.analyzed_at) or "",
        "ce-datacontenttype": "application/json"})


def read_fleet_record(message: Message) -> FleetRecord | None:
    """The fleet record an ``analysis-events`` message carries; ``None`` when it carries another event."""
    if message.attributes.get("ce-type") != FLEET_RECORD_TYPE:
        return None
    try:
        return FleetRecord.model_validate_json(message.data)
    except ValidationError as error:
        raise PermanentFailure(f"unreadable fleet record: {_reason(error)}") from None
