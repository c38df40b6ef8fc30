"""Wire-format building blocks shared by every resource.

Google's JSON mapping is the contract: lowerCamelCase field names, RFC 3339
timestamps with a ``Z`` suffix, durations as ``"2.500s"`` strings and enum
values spelled with their type prefix (``KIND_ON_DEMAND``). Timestamps are
always written with six fractional digits so that stored strings sort in time
order, which the document stores rely on for range queries. Durations are
read in one syntax wherever they come from (``1500ms``, ``1h30m``, ``7d``,
and Google's ``"3.5s"``) and shown to people in it (:func:`human_duration`).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_camel

from mldiag.domain.clock import format_timestamp

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


def _parse_timestamp(value: Any) -> Any:
    if isinstance(value, str):
        return _timestamp_from_text(str(value)) if value else None
    if value is None:
        return None
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(value, timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"{value} is not a time in seconds since 1970 within years 1-9999") from None
    return _utc_or_unset(value) if isinstance(value, datetime) else value


# A stored resource is read, changed and written again whole: most of the times it reads, it read before.
@lru_cache(maxsize=4096)
def _timestamp_from_text(text: str) -> datetime | None:
    return _utc_or_unset(datetime.fromisoformat(text))


def _utc_or_unset(value: datetime) -> datetime | None:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    elif value.tzinfo is not timezone.utc:
        value = value.astimezone(timezone.utc)
    return None if value.year == _EPOCH_ZERO_YEAR else value


# Optional by nature: Google's model leaves unset times out (and the SDK sends year 1 for "unset").
Timestamp = Annotated[
    datetime | None,
    BeforeValidator(_parse_timestamp),
    PlainSerializer(format_timestamp, return_type=str | None, when_used="json"),
]

_NUMBER = r"\d+(?:\.\d+)?"
# Largest unit first, each at most once: "7d", "1h30m", "2.5s", "1500ms" (an "m" followed by "s" is milliseconds).
_DURATION = re.compile(
    rf"(?:(?P<d>{_NUMBER})d)?(?:(?P<h>{_NUMBER})h)?(?:(?P<m>{_NUMBER})m(?!s))?"
    rf"(?:(?P<s>{_NUMBER})s)?(?:(?P<ms>{_NUMBER})ms)?"
)
_UNIT_SECONDS = {"d": Decimal(86400), "h": Decimal(3600), "m": Decimal(60), "s": Decimal(1), "ms": Decimal("0.001")}
# Google's Duration spans about 10,000 years; beyond it no field here means anything.
_LONGEST_SECONDS = Decimal(315_576_000_000)
_SYNTAX = "numbers with units ms, s, m, h or d, largest first, e.g. 500ms, 2.5s, 1h30m, 7d"


def _from_seconds(seconds: Decimal, value: Any) -> timedelta:
    if not seconds.is_finite():
        raise ValueError(f"not a duration: {value!r} ({_SYNTAX})")
    if seconds < 0:
        raise ValueError(f"not a duration: {value!r} (durations are not negative)")
    if seconds > _LONGEST_SECONDS:
        longest = human_duration(timedelta(seconds=int(_LONGEST_SECONDS)))
        raise ValueError(f"too long a duration: {value!r} (at most {longest})")
    return timedelta(microseconds=int((seconds * 1_000_000).to_integral_value()))


def parse_duration(value: Any) -> timedelta:
    """A duration as people and Google's JSON mapping write it: ``1500ms``, ``3.5s``, ``10m``, ``1h30m``, ``7d``.

    JSON numbers are seconds and a timedelta is taken as it is. Anything else,
    negative or longer than Google's ``Duration`` allows, is a ``ValueError``
    with a one-line reason.
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _from_seconds(Decimal(value), value)
    if not isinstance(value, str):
        raise ValueError(f"not a duration: {value!r} ({_SYNTAX})")
    return _duration_from_text(value)


@lru_cache(maxsize=1024)  # a stored resource's duration is read each time the resource is
def _duration_from_text(value: str) -> timedelta:
    match = _DURATION.fullmatch(value.strip())
    if not match or not any(match.groups()):
        raise ValueError(f"not a duration: {value!r} ({_SYNTAX})")
    seconds = sum((Decimal(number) * _UNIT_SECONDS[unit] for unit, number in match.groupdict().items() if number),
                  Decimal(0))
    return _from_seconds(seconds, value)


def format_duration(value: timedelta) -> str:
    """Google's JSON form of a duration: seconds with three decimals, ``"2.500s"``."""
    return f"{value.total_seconds():.3f}s"


def human_duration(value: timedelta) -> str:
    """``value`` as :func:`parse_duration` reads it, in the largest units: ``7d``, ``1h30m``, ``2.5s``, ``100ms``."""
    if value < timedelta(0):
        return "-" + human_duration(-value)
    microseconds = value // timedelta(microseconds=1)
    days, microseconds = divmod(microseconds, 86_400_000_000)
    hours, microseconds = divmod(microseconds, 3_600_000_000)
    minutes, microseconds = divmod(microseconds, 60_000_000)
    parts = [f"{count}{unit}" for count, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if count]
    if microseconds and microseconds < 1_000_000 and microseconds % 1000 == 0:
        parts.append(f"{microseconds // 1000}ms")
    elif microseconds:
        parts.append(f"{(Decimal(microseconds) / 1_000_000).normalize():f}s")
    return "".join(parts) or "0s"


def bounded_duration(value: timedelta, shortest: timedelta, longest: timedelta) -> timedelta:
    """``value``, if it lies within the bounds; else a ``ValueError`` that names the bound, ``must be at most 7d``."""
    if value < shortest:
        raise ValueError(f"must be at least {human_duration(shortest)}")
    if value > longest:
        raise ValueError(f"must be at most {human_duration(longest)}")
    return value


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
