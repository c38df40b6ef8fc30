"""OTLP/HTTP metrics in: ``POST /v1/metrics``, protobuf or JSON, as the OpenTelemetry protocol defines it.

An OTLP exporter pointed at the control plane (``OTEL_EXPORTER_OTLP_ENDPOINT``)
posts here; with an API token it sends ``Authorization: Bearer <token>``
(``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>``). The answer is an
``ExportMetricsServiceResponse`` in the request's encoding (:mod:`mldiag.services.monitoring.otlp`).
"""

from __future__ import annotations

from flask import Blueprint, Response, request

from mldiag.entrypoints.http.rest import body_bytes, services
from mldiag.services.monitoring import otlp

blueprint = Blueprint("otlp", __name__, url_prefix="/v1")
BODY_TYPES = frozenset({otlp.PROTOBUF, otlp.JSON})


@blueprint.post("/metrics")
def export_metrics() -> Response:
    content_type = request.mimetype
    parsed = otlp.parse_request(body_bytes(), content_type,
                                request.headers.get("Content-Encoding", ""))
    result = otlp.export(services(), parsed)
    return Response(otlp.response_body(result, content_type), 200, content_type=content_type)
