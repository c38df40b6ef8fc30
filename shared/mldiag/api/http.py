"""Reading requests and writing responses the way Google's REST APIs do.

Query parameters are accepted in both spellings Google accepts
(``update_mask`` and ``updateMask``). Bodies must be JSON objects no larger than
:data:`MAX_BODY_BYTES`. Errors are ``{"error": {"code", "message", "status"}}``.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Response, current_app, jsonify, request
from pydantic.alias_generators import to_camel

from mldiag.bootstrap import Services
from mldiag.domain.errors import InvalidArgument
from mldiag.services.listing import ListRequest

MAX_BODY_BYTES = 1024 * 1024
SERVICES = "mldiag.services"


def services() -> Services:
    return current_app.extensions[SERVICES]


def json_body() -> dict[str, Any]:
    """The request's JSON object (``{}`` when empty); a clear 400 for anything else."""
    data = request.get_data(cache=True)  # over MAX_CONTENT_LENGTH: werkzeug answers 413
    if not data.strip():
        return {}
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise InvalidArgument(f"the request body is not valid JSON ({error})", field="body") from None
    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a JSON object", field="body")
    return body


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
