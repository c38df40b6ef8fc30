"""Structured logs: JSON lines in the shape Cloud Logging parses, or calm human lines in a terminal.

Each JSON line has ``severity``, ``message``, ``time`` and whatever context is
bound (``event_id``, ``run``, ``session``, ``function``). Bind context for the
duration of one event with :func:`event_context`.

A line that a person watching the system cares about (a session registered,
an analysis done, a capture finished) is logged with ``notice=True``: its
severity is ``NOTICE``, Cloud Logging's "normal but significant". The human
format shows notices, warnings and errors only, one short line each; every
line, maintenance and debug chatter included, still goes as JSON to the log
file when one is given. Library loggers (stdlib ``logging``) take the same path,
and so do Python's warnings (to the file only, in the human format).

structlog is loaded when a line is first logged, not when a module that logs is
imported (:func:`get_logger`): a function's cold start imports every module it
serves from, and loading structlog (and the rich it pulls in) would be a third
of that.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mldiag.domain.names import short_name

if TYPE_CHECKING:
    import structlog

NOTICE = "notice"  # the key that marks a line as significant
FORMATS = ("json", "console")
LOG_FILE_BYTES = 10 * 1024 * 1024
LOG_FILE_BACKUPS = 3

_SEVERITY = {
    "debug": "DEBUG", "info": "INFO", NOTICE: "NOTICE", "warning": "WARNING", "warn": "WARNING",
    "error": "ERROR", "exception": "ERROR", "critical": "CRITICAL",
}
_SHOWN_TO_PEOPLE = {NOTICE, "warning", "warn", "error", "exception", "critical"}
# Context a human line leaves out: it says which event, not what happened.
_MACHINE_FIELDS = {"event", "level", "time", "logger", "event_id", "event_type", "exception"}
# A human line is one line, and text from outside (folder names, alert titles) cannot drive the terminal.
_CONTROL_CHARACTERS = {code: f"\\x{code:02x}" for code in (*range(32), 127)}
_handlers: list[logging.Handler] = []


def _notice_level(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    if event.pop(NOTICE, False) and event.get("level") == "info":
        event["level"] = NOTICE
    return event


def _cloud_logging_fields(_: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    event["severity"] = _SEVERITY.get(event.pop("level", method), "DEFAULT")
    event["message"] = event.pop("event", "")
    return event


class _HumanLines:
    """Renders one line a person can read: local time, what happened, why, and a link to look at it."""

    def __init__(self, session_link: Callable[[str], str] | None):
        self.session_link = session_link

    def __call__(self, _: Any, __: str, event: dict[str, Any]) -> str:
        level = event.get("level", "info")
        when = datetime.fromisoformat(event["time"]).astimezone().strftime("%H:%M:%S") if "time" in event else ""
        line = str(event.get("event", ""))
        if level != NOTICE:
            line = f"{_SEVERITY.get(level, level.upper()).lower()}: {line}"
            because = event.get("error") or event.get("reason")
            if because:
                line += f": {because}"
            exception = str(event.get("exception", "")).strip()
            if exception and not because:
                line += f": {exception.splitlines()[-1]}"
            context = [f"{key}={short_name(value) if isinstance(value, str) else value}"
                       for key, value in sorted(event.items())  # bound context comes in no fixed order
                       if key not in _MACHINE_FIELDS and key not in ("error", "reason") and value not in ("", None)
                       and not (key == "run" and event.get("session"))]  # the session names its run
            if context:
                line += f" ({', '.join(context)})"
        link = self.session_link(str(event["session"])) if self.session_link and event.get("session") else ""
        if link:
            line += f"  {link}"
        line = line.translate(_CONTROL_CHARACTERS)
        return f"{when}  {line}" if when else line


class _PeopleOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, dict):  # from structlog: its level, notice included
            return record.msg.get("level") in _SHOWN_TO_PEOPLE
        # Python's warnings are for the developers of the code that raised them.
        return record.levelno >= logging.WARNING and record.name != "py.warnings"


def _formatter(renderer: Any, chain: list[Any]) -> structlog.stdlib.ProcessorFormatter:
    """Renders structlog's lines and, through ``chain``, the stdlib records of other libraries."""
    import structlog

    return structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        foreign_pre_chain=[structlog.stdlib.add_log_level, structlog.stdlib.add_logger_name, *chain],
    )


def _json_renderer(logger: Any, method: str, event: dict[str, Any]) -> str:
    import structlog

    return structlog.processors.JSONRenderer()(logger, method, _cloud_logging_fields(logger, method, event))


def configure(fmt: str = "json", level: int = logging.INFO, *,
              log_file: Path | None = None, session_link: Callable[[str], str] | None = None) -> None:
    """Route structlog and stdlib logging to stderr, and to ``log_file`` when given.

    ``json``: every line at ``level`` or above goes to stderr as JSON. ``console``:
    stderr gets human lines for notices, warnings and errors; ``session_link``
    turns a line's ``session`` (a resource name) into a URL to show with it.
    ``log_file`` receives every line as JSON either way (rotated at 10 MB).
    """
    import structlog

    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; use one of {', '.join(FORMATS)}")
    chain: list[Any] = [
        structlog.contextvars.merge_contextvars,
        _notice_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
        structlog.processors.format_exc_info,
    ]
    json_lines = _formatter(_json_renderer, chain)
    terminal = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        terminal.setFormatter(json_lines)
    else:
        terminal.setFormatter(_formatter(_HumanLines(session_link), chain))
        terminal.addFilter(_PeopleOnly())
    handlers: list[logging.Handler] = [terminal]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        file = logging.handlers.RotatingFileHandler(log_file, maxBytes=LOG_FILE_BYTES,
                                                    backupCount=LOG_FILE_BACKUPS, encoding="utf-8")
        file.setFormatter(json_lines)
        handlers.append(file)

    close()
    _handlers.extend(handlers)
    root, own = logging.getLogger(), logging.getLogger("mldiag")
    for handler in handlers:
        root.addHandler(handler)
        own.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))  # other libraries' chatter stays out
    # Ours go to these handlers only, whatever else a host (functions-framework) put on the root.
    own.setLevel(level)
    own.propagate = False
    logging.captureWarnings(True)
    structlog.configure(
        processors=[structlog.processors.add_log_level, *chain,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )


def close() -> None:
    """Flush and detach the handlers :func:`configure` installed (the log file is closed)."""
    logging.captureWarnings(False)
    root, own = logging.getLogger(), logging.getLogger("mldiag")
    for handler in _handlers:
        root.removeHandler(handler)
        own.removeHandler(handler)
        handler.close()
    _handlers.clear()
    own.propagate = True


@contextlib.contextmanager
def event_context(**fields: Any) -> Iterator[None]:
    """Bind ``fields`` (event_id, run, session, function, ...) to every log line inside."""
    import structlog

    tokens = structlog.contextvars.bind_contextvars(**{k: v for k, v in fields.items() if v})
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)


class _LoggerOnFirstUse:
    """A module's structlog logger, loaded on its first line and built again only when structlog's configuration
    changes (:func:`configure`, or a test capturing the lines): building it for every line costs more than a line
    that the level filters out."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None
        self._built_for: dict[str, Any] = {}

    def __getattr__(self, method: str) -> Any:
        import structlog

        config = structlog.get_config()
        built_for = self._built_for
        if (not built_for or config["processors"] is not built_for["processors"]
                or config["wrapper_class"] is not built_for["wrapper_class"]
                or config["logger_factory"] is not built_for["logger_factory"]
                or config["context_class"] is not built_for["context_class"]):
            self._logger = structlog.get_logger(self._name).bind()
            self._built_for = config
        return getattr(self._logger, method)


def get_logger(name: str) -> Any:
    """``structlog.get_logger(name)``, with structlog loaded only when the first line is logged."""
    return _LoggerOnFirstUse(name)
