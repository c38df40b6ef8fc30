"""The Flask app: routes, the credential check, limits and Google-shaped errors.

Every route parses its request (``mldiag.entrypoints.http.rest``) and calls a service; the
app adds what all routes share: a 1 MiB body limit, refusal of ``.``/``..``
path segments, of requests to a host name not its own when it knows its names,
and of mutations a web page could forge (:mod:`mldiag.entrypoints.http.origin`), the SDK's
capability URL (:mod:`mldiag.entrypoints.http.capability`), the :class:`~mldiag.entrypoints.http.auth.Guard`
before any route runs (its caller in ``g.caller``; the alert webhooks' own token
for :mod:`mldiag.entrypoints.http.alerts`), and
one error shape for domain errors, HTTP errors and bugs alike (the last logged,
never echoed).
"""

from __future__ import annotations

import time

import structlog
from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException
from werkzeug.routing import BaseConverter

from mldiag import bootstrap
from mldiag.domain.callers import SDK_CAPABILITY
from mldiag.domain.errors import AlreadyExists, InvalidArgument, MldiagError, NotFound, PermissionDenied
from mldiag.entrypoints import console
from mldiag.entrypoints.http import alerts, capture, fleet, monitoring, operator, otlp, self_hosted, share, v1alpha
from mldiag.entrypoints.http.auth import Guard
from mldiag.entrypoints.http.capability import ENVIRON_KEY, REDACTED, VALID, CapabilityPrefix
from mldiag.entrypoints.http.origin import JSON_ONLY, MUTATING, HostNames, refuse_browser_forgery
from mldiag.entrypoints.http.rest import MAX_BODY_BYTES, SELF_CHECKING_BLUEPRINTS, SERVICES, google_error
from mldiag.services.dependencies import Services

log = structlog.get_logger(__name__)

_HTTP_STATUS = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    405: "UNIMPLEMENTED", 409: "ABORTED", 412: "FAILED_PRECONDITION", 413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE",
}
_BODY_TYPES = {otlp.blueprint.name: otlp.BODY_TYPES}  # routes that take more than JSON


def _admit_capability(capability: str) -> None:
    """A call through ``/sdk/<secret>``: only the SDK's routes, only with the right secret."""
    if request.blueprint != self_hosted.blueprint.name:
        raise NotFound("the SDK's capability URL serves the SDK's /v1 routes only")
    if capability != VALID:
        raise PermissionDenied("the SDK capability in the URL is not valid for this control plane")
    g.caller = SDK_CAPABILITY


def _logged_path() -> str:
    return (REDACTED if ENVIRON_KEY in request.environ else "") + share.logged_path(request.path)


class IdConverter(BaseConverter):
    """A path segment that can be a resource id: no ``/`` and no ``:`` (custom methods follow one)."""

    regex = r"[^/:]+"


def create_app(services: Services | None = None, host_names: HostNames | None = None) -> Flask:
    """The control plane over ``services`` (the process-wide ones when omitted).

    With ``host_names`` (``mldiag up``), a request naming any other host is refused.
    """
    app = Flask("mldiag")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.json.sort_keys = False
    app.url_map.converters["id"] = IdConverter
    app.url_map.strict_slashes = False
    resolved = services or bootstrap.services()
    app.extensions[SERVICES] = resolved
    guard = Guard(resolved.settings)

    @app.before_request
    def screen() -> None:
        g.started = time.perf_counter()
        if host_names is not None:
            host_names.check(request.host)
        segments = request.path.split("/")
        if any(s in (".", "..") or "\\" in s or "\x00" in s for s in segments):
            raise InvalidArgument("the path has a segment that is not allowed", field="path")
        capability = request.environ.get(ENVIRON_KEY)
        self_checking = app.config[SELF_CHECKING_BLUEPRINTS]
        if capability or request.blueprint not in self_checking:
            if request.method in MUTATING:
                refuse_browser_forgery(request, _BODY_TYPES.get(request.blueprint or "", JSON_ONLY))
        if capability:
            _admit_capability(capability)
        elif request.blueprint == alerts.blueprint.name:
            g.caller = guard.check_alert_sender(request.headers.get("Authorization", ""))
        elif request.blueprint not in self_checking:
            g.caller = guard.check(request.method, request.headers.get("Authorization", ""),
                                   operator_route=request.blueprint == operator.blueprint.name)

    @app.after_request
    def record(response: Response) -> Response:
        log.info("request", method=request.method, path=_logged_path(), status=response.status_code,
                 ms=round((time.perf_counter() - g.get("started", time.perf_counter())) * 1000, 1))
        return response

    @app.errorhandler(MldiagError)
    def domain_error(error: MldiagError) -> Response:
        details = None
        if isinstance(error, AlreadyExists) and error.resource_name:
            details = [{"@type": "type.googleapis.com/google.rpc.ResourceInfo", "resourceName": error.resource_name}]
        return google_error(error.http_code, error.status, str(error), details)

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        code = error.code or 500
        message = error.description or error.name
        if code == 413:
            message = f"the request body is over the {MAX_BODY_BYTES}-byte limit"
        return google_error(code, _HTTP_STATUS.get(code, "UNKNOWN"), message)

    @app.errorhandler(Exception)
    def internal_error(error: Exception) -> Response:
        log.exception("request failed", method=request.method, path=_logged_path())
        return google_error(500, "INTERNAL", "internal error; the server log has the details")

    app.register_blueprint(v1alpha.blueprint)
    app.register_blueprint(alerts.blueprint)
    app.register_blueprint(capture.blueprint)
    app.register_blueprint(fleet.blueprint)
    app.register_blueprint(monitoring.blueprint)
    app.register_blueprint(operator.blueprint)
    app.register_blueprint(otlp.blueprint)
    app.register_blueprint(self_hosted.blueprint)
    app.register_blueprint(share.blueprint)
    app.config[SELF_CHECKING_BLUEPRINTS] = {share.blueprint.name}
    console.register(app)
    app.wsgi_app = CapabilityPrefix(app.wsgi_app, resolved.settings.sdk_capability if guard.mode != "open" else "")
    return app
