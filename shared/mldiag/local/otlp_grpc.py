"""OTLP/gRPC metrics in for ``mldiag up``: ``opentelemetry.proto.collector.metrics.v1.MetricsService/Export``.

The official SDK's exporter speaks gRPC to ``OTEL_EXPORTER_OTLP_ENDPOINT``
(port 4317 by convention). Each call is checked as an HTTP ``POST`` would be
(:class:`mldiag.entrypoints.http.auth.Guard`, the token from the ``authorization`` metadata)
before its message is parsed, and handled by :func:`mldiag.services.monitoring.otlp.export`;
messages are bounded as OTLP/HTTP bodies are, and one that is not an export is ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import socket
from concurrent import futures
from typing import Any

import structlog

from mldiag.domain.errors import InvalidArgument, MldiagError, PermissionDenied, Unauthenticated
from mldiag.entrypoints.http.auth import Guard
from mldiag.services.dependencies import Services
from mldiag.services.monitoring import otlp

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


def _why_not_bindable(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound ('' if it can), asked first because gRPC's own failure says nothing
    and its core logs it to stderr."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds: TIME_WAIT is no obstacle
            probe.bind(address)
    except OSError as error:
        return error.strerror or str(error)
    return ""


class OtlpGrpcServer:
    """A gRPC server with the OTLP metrics service, on ``host:port`` (0: a free port)."""

    def __init__(self, services: Services, host: str, port: int):
        import grpc

        self.services = services
        self.guard = Guard(services.settings)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="mldiag-otlp"),
                                  options=[("grpc.max_receive_message_length", otlp.MAX_EXPORT_BYTES),
                                           ("grpc.so_reuseport", 0)])  # a second mldiag up must not share it
        # The message reaches _export as bytes: parsed only once the caller's credential has passed.
        handler = grpc.unary_unary_rpc_method_handler(
            self._export, response_serializer=lambda response: response.SerializeToString())
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {"Export": handler})])
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        reason = _why_not_bindable(host, port)
        try:
            self.port = 0 if reason else self.server.add_insecure_port(address)
        except RuntimeError:
            self.port = 0
        if not self.port:
            raise OtlpPortUnavailable(f"cannot listen for OTLP/gRPC on {address} ({reason or 'refused'}); choose "
                                      "another with --otlp-port, 0 for a free one, or --no-otlp")

    def _export(self, message: bytes, context: Any) -> Any:
        metadata = dict(context.invocation_metadata())
        try:
            self.guard.check("POST", metadata.get("authorization", ""))
            result = otlp.export(self.services, otlp.parse_request(message, otlp.PROTOBUF))
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
