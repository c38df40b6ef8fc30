"""Domain errors. Each maps to one Google API status in the HTTP layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class MldiagError(Exception):
    """Base of every error the library raises on purpose."""

    status = "INTERNAL"
    http_code = 500


class InvalidArgument(MldiagError):
    """The caller sent something that can never be valid (names the field)."""

    status = "INVALID_ARGUMENT"
    http_code = 400

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class InvalidTransition(InvalidArgument):
    """A state change the lifecycle does not allow, e.g. SUCCEEDED back to ACTIVE."""

    status = "FAILED_PRECONDITION"
    http_code = 400

    def __init__(self, field: str, old: object, new: object):
        super().__init__(f"cannot change from {old} to {new}", field=field)
        self.old, self.new = old, new


class Unauthenticated(MldiagError):
    """No credentials, or credentials that could not be verified."""

    status = "UNAUTHENTICATED"
    http_code = 401


class PermissionDenied(MldiagError):
    """Valid credentials (or a signed link) that do not allow this request."""

    status = "PERMISSION_DENIED"
    http_code = 403


class LinkExpired(PermissionDenied):
    """A signed link that was valid once: gone for good, not merely forbidden."""

    http_code = 410


class NotFound(MldiagError):
    status = "NOT_FOUND"
    http_code = 404


class AlreadyExists(MldiagError):
    status = "ALREADY_EXISTS"
    http_code = 409

    def __init__(self, message: str, *, resource_name: str = ""):
        super().__init__(message)
        self.resource_name = resource_name


class Aborted(MldiagError):
    """Optimistic concurrency lost: the etag did not match."""

    status = "ABORTED"
    http_code = 409


class FailedPrecondition(MldiagError):
    status = "FAILED_PRECONDITION"
    http_code = 412


class ResourceExhausted(MldiagError):
    """Too many requests of a kind: the caller may try again after ``retry_after_s``."""

    status = "RESOURCE_EXHAUSTED"
    http_code = 429

    def __init__(self, message: str, *, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PermanentFailure(MldiagError):
    """An event that can never be processed: record it and acknowledge, do not retry."""

    status = "INVALID_ARGUMENT"
    http_code = 400


class AnalysisFailed(MldiagError):
    """An analysis that produced no report, saying why; ``permanent`` when running it again cannot help."""

    def __init__(self, reason: str, *, permanent: bool):
        super().__init__(reason)
        self.permanent = permanent


class AnalysisTimedOut(AnalysisFailed):
    """The analysis ran past its time limit and was stopped: it would again."""

    def __init__(self, timeout_seconds: float):
        super().__init__(f"the analysis did not finish within {timeout_seconds:g} s", permanent=True)


class AnalysisWorkerCrashed(AnalysisFailed):
    """The process analysing ended without a result (killed, stopped by a signal, or an error it did not expect);
    permanent when it ran out of memory, which it would again."""


def invalid_argument(error: ValidationError) -> InvalidArgument:
    """A pydantic validation error as the caller sees it: the first problem, naming its field."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "body"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    elif first["type"] == "value_error":  # our validators' own words, without pydantic's "Value error, "
        message = str(first["ctx"]["error"])
    if len(error.errors()) > 1:
        message += f" (and {len(error.errors()) - 1} more problem(s))"
    return InvalidArgument(message, field=field)
