"""Time as every resource writes it: aware UTC datetimes, stored as RFC 3339 strings with six fractional digits and
a ``Z`` suffix, so that stored strings sort in time order (the document stores' range queries rely on it).

Standard library only: a function's import path reads the clock before its first event needs pydantic.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache
from typing import overload


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@overload
def format_timestamp(value: datetime) -> str: ...
@overload
def format_timestamp(value: None) -> None: ...
def format_timestamp(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is not timezone.utc:
        value = value.astimezone(timezone.utc)
    return _utc_text(value)


# A resource is read, changed and written again whole: most of the times it writes, it wrote before.
@lru_cache(maxsize=4096)
def _utc_text(value: datetime) -> str:
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (
        value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond)
