"""Time as every resource writes it: aware UTC datetimes, stored as RFC 3339 strings with six fractional digits and
a ``Z`` suffix, so that stored strings sort in time order (the document stores' range queries rely on it).

Standard library only: a function's import path reads the clock before its first event needs pydantic.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import overload


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@overload
def format_timestamp(value: datetime) -> str: ...
@overload
def format_timestamp(value: None) -> None: ...
def format_timestamp(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
