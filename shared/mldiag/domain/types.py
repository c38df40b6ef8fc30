"""Wire-format building blocks shared by every resource.

Google's JSON mapping is the contract: lowerCamelCase field names, RFC 3339
timestamps with a ``Z`` suffix, durations as ``"2.500s"`` strings and enum
values spelled with their type prefix (``KIND_ON_DEMAND``). Timestamps are
always written with six fractional digits so that stored strings sort in time
order, which the document stores rely on for range queries.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_camel

_EPOCH_ZERO_YEAR = 1  # the SDK sends "0001-01-01T00:00:00Z" for "not set"


class CamelModel(BaseModel):
    """Base for every wire type: camelCase JSON, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
        use_enum_values=False,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The resource as Google's JSON mapping would show it (unset fields omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _parse_timestamp(value: Any) -> Any:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc)
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        value = value.astimezone(timezone.utc)
        if value.year == _EPOCH_ZERO_YEAR:
            return None
    return value


def format_timestamp(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Optional by nature: Google's model leaves unset times out (and the SDK sends year 1 for "unset").
Timestamp = Annotated[
    datetime | None,
    BeforeValidator(_parse_timestamp),
    PlainSerializer(format_timestamp, return_type=str | None, when_used="json"),
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> timedelta:
    """Accept ``"2s"``, ``"1500ms"``, ``"2.5s"``, ``"10m"``, seconds as a number, or a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=float(value))
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    raise ValueError(f"not a duration: {value!r} (use e.g. '2s', '1500ms', '10m')")


def format_duration(value: timedelta) -> str:
    return f"{value.total_seconds():.3f}s"


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]


class PrefixedEnum(StrEnum):
    """An enum whose JSON spelling carries a type prefix, accepting short forms.

    ``Kind("on-demand")``, ``Kind("ON_DEMAND")`` and ``Kind("KIND_ON_DEMAND")``
    are the same member; anything else is refused with the allowed values listed.
    """

    @classmethod
    def _prefix(cls) -> str:
        return ""

    @classmethod
    def _missing_(cls, value: object) -> PrefixedEnum | None:
        if not isinstance(value, str):
            return None
        normalized = value.strip().upper().replace("-", "_")
        for candidate in (normalized, cls._prefix() + normalized):
            if candidate in cls._value2member_map_:
                return cls._value2member_map_[candidate]  # type: ignore[return-value]
        return None
