"""The operator's view of an installation: its event archive, dead letters, replay, and status.

The ``/v1alpha/events``, ``/v1alpha/deadLetters`` and ``/v1alpha/status`` routes
and the ``mldiag events`` / ``mldiag status`` commands use these. Filters arrive
as strings (query parameters or a JSON body); ``since`` and ``until`` take an
RFC 3339 time or a duration meaning that long before the server's now.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol, TypeVar

from cloudevents.http import CloudEvent
from pydantic import Field, ValidationError, field_validator

from mldiag.domain.errors import InvalidArgument, invalid_argument
from mldiag.domain.resources import RESOURCE_TYPES
from mldiag.domain.types import CamelModel, parse_duration
from mldiag.services.dependencies import Archiving, Blobs, Configured, Publishing, Stored
from mldiag.services.event_archive import ArchivedEvent, Outcome
from mldiag.services.operator.dead_letters import list_dead_letters
from mldiag.services.operator.replay import ReplayResult, Target, find_record, replay_one


class ArchivePorts(Stored, Publishing, Blobs, Configured, Archiving, Protocol):
    """What the event archive's operations use; a replay re-delivers to a handler with the services it was given."""


# The services a replay is given, whatever else they hold: the handlers take the same.
Given = TypeVar("Given", bound=ArchivePorts)


MAX_LIMIT = 10_000


class EventQuery(CamelModel):
    """Which archived events: every given filter must match; newest first, at most ``limit``."""

    type: str = ""
    function: str = ""
    exclude_function: str = ""  # e.g. maintenance, whose ticks outnumber everything else
    outcome: Outcome | None = None
    since: str = ""
    until: str = ""
    limit: int = Field(default=100, ge=1, le=MAX_LIMIT)

    @field_validator("outcome", mode="before")
    @classmethod
    def _empty_is_any(cls, value: Any) -> Any:
        return None if value == "" else value

    @property
    def selective(self) -> bool:
        return any([self.type, self.function, self.outcome, self.since, self.until])


class ReplayRequest(EventQuery):
    """``POST /v1alpha/events:replay``: the events named, plus every event the filters select."""

    events: list[str] = Field(default_factory=list, max_length=MAX_LIMIT)
    dry_run: bool = False
    to: Target = Target.local


def parse(model: type[EventQuery], values: dict[str, Any]) -> Any:
    """``values`` as ``model``, or a one-line INVALID_ARGUMENT naming the field."""
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise invalid_argument(error) from None


def when(value: str, now: datetime, field: str) -> datetime | None:
    """An RFC 3339 time, or a duration (``1h``) meaning that long before ``now``; None when empty."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        try:
            ago = parse_duration(value)
        except ValueError:
            raise InvalidArgument(f"{value!r} is neither a time (2026-01-01T00:00:00Z) nor a duration (1h)",
                                  field=field) from None
        try:
            return now - ago
        except OverflowError:
            raise InvalidArgument(f"{value!r} ago is before the year 1", field=field) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=now.tzinfo)


def list_events(services: ArchivePorts, query: EventQuery) -> list[ArchivedEvent]:
    now = services.now()
    return services.events.list(
        type=query.type, function=query.function, outcome=query.outcome.value if query.outcome else "",
        since=when(query.since, now, "since"), until=when(query.until, now, "until"), limit=query.limit,
        exclude_function=query.exclude_function,
    )


def show_event(services: ArchivePorts, key_or_id: str) -> dict[str, Any]:
    """One archived event (``function:id``, or an id that reached one function) with its raw CloudEvent."""
    record = find_record(services, key_or_id)
    return {**record.to_json_dict(), "raw": services.events.load_raw(record)}


def replay(services: Given, request: ReplayRequest,
           handlers: Mapping[str, Callable[[Given, CloudEvent], object]]) -> list[ReplayResult]:
    """Replay the events a request names or selects; ``handlers`` serve a local re-delivery."""
    if not request.events and not request.selective:
        raise InvalidArgument("name events to replay, or select them with type, function, outcome, since or until",
                              field="events")
    records = [find_record(services, key) for key in request.events]
    if request.selective:
        records += list_events(services, request)
    return [replay_one(services, record, request.to, request.dry_run, handlers) for record in records]


def dead_letters(services: ArchivePorts, limit: int) -> list[dict[str, Any]]:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"must be between 1 and {MAX_LIMIT}", field="limit")
    return list_dead_letters(services, limit)


def status(services: ArchivePorts) -> dict[str, Any]:
    """The backend, where the data lives, and how many of each resource are stored."""
    settings = services.settings
    counts = {model.collection: len(services.store.query(model.collection)) for model in RESOURCE_TYPES}
    return {
        "backend": settings.backend,
        "project": settings.project,
        "location": settings.location,
        "dataDir": str(settings.data_dir) if settings.backend == "embedded" else "",
        "bucket": settings.bucket_uri,
        **counts,
    }
