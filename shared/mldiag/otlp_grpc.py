"""OTLP/gRPC metrics in for ``mldiag up``: ``opentelemetry.proto.collector.metrics.v1.MetricsService/Export``.

The official SDK's exporter speaks gRPC to ``OTEL_EXPORTER_OTLP_ENDPOINT``
(port 4317 by convention). Each call is checked as an HTTP ``POST`` would be
(:class:`mldiag.api.auth.Guard`, the token from the ``authorization`` metadata)
and handled by :func:`mldiag.otlp.export`; messages are bounded as OTLP/HTTP
bodies are.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

import structlog

from mldiag import otlp
from mldiag.api.auth import Guard
from mldiag.bootstrap import Services
from mldiag.domain.errors import InvalidArgument, MldiagError, PermissionDenied, Unauthenticated

log = structlog.get_logger(__name__)

SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"
DEFAULT_PORT = 4317
WORKERS = 4


class OtlpPortUnavailable(Exception):
    """The gRPC port cannot be bound; the message says which and what to do."""


def _status_of(error: MldiagError) -> Any:
    import grpc

    if isinstance(error, Unauthenticated):
        return grpc.StatusCode.UNAUTHENTICATED
    if isinstance(error, PermissionDenied):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(error, InvalidArgument):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.INTERNAL


class OtlpGrpcServer:
    """A gRPC server with the OTLP metrics service, on ``host:port`` (0: a free port)."""

    def __init__(self, services: Services, host: str, port: int):
        import grpc

        self.services = services
        self.guard = Guard(services.settings)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="mldiag-otlp"),
                                  options=[("grpc.max_receive_message_length", otlp.MAX_EXPORT_BYTES)])
        request_type = otlp.proto().ExportMetricsServiceRequest
        handler = grpc.unary_unary_rpc_method_handler(
            self._export, request_deserializer=request_type.FromString,
            response_serializer=lambda response: response.SerializeToString())
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {"Export": handler})])
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            self.port = self.server.add_insecure_port(address)
        except RuntimeError:
            self.port = 0
        if not self.port:
            raise OtlpPortUnavailable(f"cannot listen for OTLP/gRPC on {address} (in use, or not an address of "
                                      "this machine); choose another with --otlp-port, 0 for a free one, or --no-otlp")

    def _export(self, request: Any, context: Any) -> Any:
        metadata = dict(context.invocation_metadata())
        try:
            self.guard.check("POST", metadata.get("authorization", ""))
            result = otlp.export(self.services, request)
        except MldiagError as error:
            context.abort(_status_of(error), str(error))
        except Exception:
            log.exception("OTLP export failed")
            context.abort(_status_of(MldiagError()), "internal error; the server log has the details")
        return result.response()

    def start(self) -> None:
        self.server.start()

    def stop(self, grace_seconds: float = 5.0) -> None:
        self.server.stop(grace_seconds).wait()
