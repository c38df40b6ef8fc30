"""Reading requests and writing responses the way Google's REST APIs do.

Query parameters are accepted in both spellings Google accepts
(``update_mask`` and ``updateMask``). Bodies must be JSON objects no larger than
:data:`MAX_BODY_BYTES`, nested at most :data:`MAX_JSON_DEPTH` deep (what every
store can keep), with finite numbers only (Python's parser would take
``Infinity``, ``NaN`` and ``1e999``). Errors are ``{"error": {"code", "message", "status"}}``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from flask import Response, current_app, jsonify, request
from pydantic.alias_generators import to_camel
from werkzeug.exceptions import RequestEntityTooLarge

from mldiag.domain.errors import InvalidArgument
from mldiag.services.dependencies import Services
from mldiag.services.resources.listing import ListRequest

MAX_BODY_BYTES = 1024 * 1024
# Firestore keeps maps and arrays at most 20 deep; a body's own object is one level more than its document's.
MAX_JSON_DEPTH = 20
SERVICES = "mldiag.services"
# The app.config key naming the blueprints that check their callers themselves (the console, share links).
SELF_CHECKING_BLUEPRINTS = "mldiag.self_checking_blueprints"


def services() -> Services:
    return current_app.extensions[SERVICES]


def body_bytes() -> bytes:
    """The request's body, whole: 413 when it is over :data:`MAX_BODY_BYTES`, a chunked one too.

    A server that ends chunked bodies itself (``wsgi.input_terminated``) hands werkzeug a stream it reads
    up to the limit and no further; one byte more left in it means the body was cut, never to be parsed.
    """
    data = request.get_data(cache=True)  # over MAX_CONTENT_LENGTH: werkzeug answers 413
    if len(data) >= MAX_BODY_BYTES and request.content_length is None and request.environ["wsgi.input"].read(1):
        raise RequestEntityTooLarge()
    return data


def json_body() -> dict[str, Any]:
    """The request's JSON object (``{}`` when empty); a clear 400 for anything else."""
    data = body_bytes()
    if not data.strip():
        return {}
    try:
        body = json.loads(data, parse_constant=_refuse_constant, parse_float=_finite)
    except (ValueError, RecursionError) as error:
        raise InvalidArgument(f"the request body is not valid JSON ({error})", field="body") from None
    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a JSON object", field="body")
    _check_depth(body)
    return body


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _check_depth(body: dict[str, Any]) -> None:
    """Refuse objects and arrays nested deeper than :data:`MAX_JSON_DEPTH`, naming where."""
    pending: list[tuple[Any, tuple[str, ...]]] = [(body, ())]
    while pending:
        value, path = pending.pop()
        if len(path) >= MAX_JSON_DEPTH:
            raise InvalidArgument(f"objects and arrays are nested more than {MAX_JSON_DEPTH} deep under "
                                  f"{'.'.join(path[:3])}...", field=path[0])
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        pending.extend((child, (*path, str(key))) for key, child in items if isinstance(child, (dict, list)))


def query(name: str, default: str = "") -> str:
    """A query parameter by its snake_case name, or its lowerCamelCase spelling."""
    return request.args.get(name) or request.args.get(to_camel(name)) or default


def query_bool(name: str) -> bool:
    value = query(name).lower()
    if value not in ("", "true", "false", "1", "0"):
        raise InvalidArgument(f"{value!r} is not true or false", field=name)
    return value in ("true", "1")


def list_request() -> ListRequest:
    raw_size = query("page_size", "0")
    try:
        page_size = int(raw_size)
    except ValueError:
        raise InvalidArgument(f"{raw_size!r} is not a number", field="pageSize") from None
    return ListRequest(
        filter=query("filter"), order_by=query("order_by"), page_size=page_size, page_token=query("page_token"),
    )


def ok(payload: dict[str, Any], status: int = 200) -> Response:
    response = jsonify(payload)
    response.status_code = status
    return response


def google_error(code: int, status: str, message: str, details: list[dict[str, Any]] | None = None) -> Response:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return ok({"error": error}, code)
