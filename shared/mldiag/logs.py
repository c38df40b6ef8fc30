"""Structured logs as JSON lines in the shape Cloud Logging parses.

Each line has ``severity``, ``message``, ``time`` and whatever context is bound
(``event_id``, ``run``, ``session``, ``function``). Bind context for the
duration of one event with :func:`event_context`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

import structlog

_SEVERITY = {
    "debug": "DEBUG", "info": "INFO", "warning": "WARNING", "warn": "WARNING",
    "error": "ERROR", "exception": "ERROR", "critical": "CRITICAL",
}


def _cloud_logging_fields(_: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    event["severity"] = _SEVERITY.get(event.pop("level", method), "DEFAULT")
    event["message"] = event.pop("event", "")
    return event


def configure(fmt: str = "json", level: int = logging.INFO) -> None:
    """Route structlog (and stdlib logging) to stderr as JSON lines or readable console lines."""
    renderer: Any = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer()
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
        structlog.processors.format_exc_info,
    ]
    if fmt == "json":
        processors.append(_cloud_logging_fields)
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(level, logging.WARNING), stream=sys.stderr, format="%(message)s")


@contextlib.contextmanager
def event_context(**fields: Any) -> Iterator[None]:
    """Bind ``fields`` (event_id, run, session, function, ...) to every log line inside."""
    tokens = structlog.contextvars.bind_contextvars(**{k: v for k, v in fields.items() if v})
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
