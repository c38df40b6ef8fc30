"""How the console writes values: times, durations, enum members, resource names.

Jinja filters only; escaping stays with Jinja's autoescape (each filter returns
plain text, never markup).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from enum import Enum
from urllib.parse import urlsplit

from mldiag.domain.types import PrefixedEnum


def when(value: datetime | None) -> str:
    """``2026-01-01 12:00:03 UTC`` (empty for unset)."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def iso(value: datetime | None) -> str:
    """The machine-readable form for ``<time datetime=...>``."""
    return value.astimezone(timezone.utc).isoformat() if value else ""


def span(value: timedelta | None) -> str:
    """``2 s``, ``1.5 s``, ``250 ms``."""
    if not value:
        return ""
    seconds = value.total_seconds()
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:g} s"


def label(value: Enum | str | None) -> str:
    """An enum member as words: ``KIND_ON_DEMAND`` → ``On demand``, ``HOST_TRACER_LEVEL_INFO`` → ``Info``."""
    if value is None:
        return ""
    text = value.value if isinstance(value, Enum) else str(value)
    if isinstance(value, PrefixedEnum):
        text = text.removeprefix(type(value)._prefix())
    return text.replace("_", " ").capitalize()


def state_class(value: Enum | str | None) -> str:
    """A CSS-safe word for a state: ``SUCCEEDED`` → ``succeeded`` (for the colour of a badge)."""
    return label(value).lower().replace(" ", "-")


def web_url(value: str) -> str:
    """``value`` if it is an http(s) URL, else empty: stored URLs never become ``javascript:`` links."""
    parts = urlsplit(value or "")
    return value if parts.scheme in ("http", "https") and parts.netloc else ""


def device_seconds(value: float | None) -> str:
    """Accelerator milliseconds as seconds, ``1,234.5`` (as ``mldiag fleet`` writes them)."""
    return "" if value is None else f"{value / 1000:,.1f}"


def percent(value: float | None) -> str:
    """A fraction as ``12.5%`` (as ``mldiag fleet`` writes it)."""
    return "" if value is None else f"{value * 100:.1f}%"


def tail(name: str) -> str:
    """The id at the end of a resource name."""
    return name.rsplit("/", 1)[-1]


FILTERS = {"when": when, "iso": iso, "span": span, "label": label, "state_class": state_class, "tail": tail,
           "web_url": web_url, "device_seconds": device_seconds, "percent": percent}
