"""OpenTelemetry metrics in: OTLP exports of step time and duty cycle feed the degradation analyzer.

The official SDK (``google-cloud-mldiagnostics`` with its ``[otel]`` extra)
exports what ``metrics.record(...)`` records as OTLP gauges named after its
``MetricType``: ``step_time`` in seconds, ``tpu_duty_cycle`` and
``gpu_duty_cycle`` in percent, each point tagged ``node_id`` = the run id,
under a resource whose ``host.name`` is the run id too. This module reads an
``ExportMetricsServiceRequest`` (protobuf or OTLP/JSON), finds each point's
run, and feeds the run's step times to :func:`mldiag.services.monitoring.metrics.report_metrics`,
exactly as ``:reportMetrics`` does, so a degradation opens a monitored event
and an automatic capture follows with nothing but the exporter's endpoint set.

Which run: the point's or the resource's ``mldiag.run`` attribute (a run's
resource name, its id, or a display name one run has, as the CLI reads a run),
else the point's ``node_id``, else the resource's ``host.name``; an id or a
display name is a run of the configured project and location. Values:
gauges and sums as they are, histograms with delta temporality as their mean
(``sum / count``); a cumulative histogram's mean covers the whole run, which
would hide a slowdown, so its points are rejected. Units follow the data
point's metric (``s``, ``ms``, ``us``, ``ns``; ``%`` or ``1`` for duty cycle),
the SDK's own unit when the metric has none. The SDK's ``training_step`` gauge
numbers the points; as a gauge is exported again every interval until it is
set anew, a step the analyzer has had is not fed twice. A duty-cycle point accompanies
the run's step-time point nearest in time within the same export; a duty
cycle alone cannot make a point, since the analyzer judges step time first.

Points the analyzer cannot use (an unknown run, a bad unit, a non-positive
step time) are counted and explained in the OTLP ``partial_success``, as the
protocol asks, and never fail the rest of the export; other metrics are
ignored. The protobuf classes come from ``opentelemetry-proto``, imported on
first use so that nothing else pays for them.
"""

from __future__ import annotations

import bisect
import json
import math
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from mldiag.domain.degradation import MetricPoint
from mldiag.domain.errors import InvalidArgument, MldiagError
from mldiag.domain.names import LocationName
from mldiag.services.dependencies import Configured, Publishing, Stored
from mldiag.services.monitoring import metrics
from mldiag.services.resources.runs import find_named

if TYPE_CHECKING:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
        ExportMetricsServiceResponse,
    )


class OtlpPorts(Stored, Publishing, Configured, Protocol):
    """What an OTLP export uses."""


STEP_TIME = "step_time"
DUTY_CYCLES = ("tpu_duty_cycle", "gpu_duty_cycle")
RUN_ATTRIBUTE = "mldiag.run"
SDK_POINT_RUN = "node_id"
SDK_RESOURCE_RUN = "host.name"
# Decoded requests are bounded as gRPC bounds messages by default; compressed bodies may not expand past it.
MAX_EXPORT_BYTES = 4 * 1024 * 1024
PROTOBUF = "application/x-protobuf"
JSON = "application/json"

_SECONDS_PER_UNIT = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_FRACTION_PER_UNIT = {"": 0.01, "%": 0.01, "1": 1.0}
_DELTA = 1  # AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA


def parse_request(body: bytes, content_type: str, content_encoding: str = "") -> ExportMetricsServiceRequest:
    """An ``ExportMetricsServiceRequest`` from an OTLP/HTTP body; :class:`InvalidArgument` when it is not one."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    body = _decompress(body, content_encoding.strip().lower())
    request = ExportMetricsServiceRequest()
    if content_type == PROTOBUF:
        from google.protobuf.message import DecodeError

        try:
            request.ParseFromString(body)
        except DecodeError as error:
            raise InvalidArgument(f"the body is not an OTLP ExportMetricsServiceRequest ({error})",
                                  field="body") from None
    elif content_type == JSON:
        from google.protobuf import json_format

        try:
            json_format.Parse(body, request, ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError, RecursionError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise InvalidArgument(f"the body is not OTLP/JSON metrics ({reason})", field="body") from None
    else:
        raise InvalidArgument(f"OTLP metrics come as {PROTOBUF} or {JSON}, not {content_type or 'untyped'}",
                              field="Content-Type")
    return request


def _decompress(body: bytes, encoding: str) -> bytes:
    if encoding in ("", "identity"):
        data = body
    elif encoding == "gzip":
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(body, MAX_EXPORT_BYTES + 1)
        except zlib.error as error:
            raise InvalidArgument(f"the body is not valid gzip ({error})", field="body") from None
        if not inflater.eof and len(data) <= MAX_EXPORT_BYTES:
            raise InvalidArgument("the body is not valid gzip (the stream ends before its end)", field="body")
    else:
        raise InvalidArgument(f"Content-Encoding {encoding!r} is not supported (gzip is)", field="Content-Encoding")
    if len(data) > MAX_EXPORT_BYTES:
        raise InvalidArgument(f"the decoded body is over the {MAX_EXPORT_BYTES}-byte limit", field="body")
    return data


@dataclass
class ExportResult:
    """What an export did: the alerts it caused, and the points it could not use and why (OTLP's partial success)."""

    alerts: list[dict[str, Any]] = field(default_factory=list)
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    def reject(self, count: int, reason: str) -> None:
        self.rejected += count
        if reason not in self.reasons:
            self.reasons.append(reason)

    @property
    def error_message(self) -> str:
        return "; ".join(self.reasons)

    def response(self) -> ExportMetricsServiceResponse:
        """The OTLP/HTTP and gRPC answer: the points rejected, and why."""
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

        response = ExportMetricsServiceResponse()
        if self.rejected:
            response.partial_success.rejected_data_points = self.rejected
            response.partial_success.error_message = self.error_message
        return response

    def response_json(self) -> dict[str, Any]:
        if not self.rejected:
            return {}
        return {"partialSuccess": {"rejectedDataPoints": str(self.rejected), "errorMessage": self.error_message}}


@dataclass(frozen=True)
class _Reading:
    run: str
    time_ns: int
    value: float


@dataclass
class _RunSeries:
    step_times: list[_Reading] = field(default_factory=list)
    duty_cycles: list[_Reading] = field(default_factory=list)
    steps: list[_Reading] = field(default_factory=list)


def _attributes(key_values: Iterable[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in key_values:
        kind = item.value.WhichOneof("value")
        if kind in ("string_value", "int_value", "double_value", "bool_value"):
            out[item.key] = getattr(item.value, kind)
    return out


def _run_reference(run: Any) -> str:
    """How an attribute value names its run: a resource name, else its last segment (an id or a display name)."""
    text = str(run).strip()
    return text if text.startswith("projects/") else text.rsplit("/", 1)[-1]


def _number_points(metric: Any) -> tuple[Iterable[Any], str]:
    """The metric's data points and '' or why they are unusable."""
    kind = metric.WhichOneof("data")
    if kind == "gauge":
        return metric.gauge.data_points, ""
    if kind == "sum":
        return metric.sum.data_points, ""
    if kind == "histogram":
        if metric.histogram.aggregation_temporality != _DELTA:
            return metric.histogram.data_points, f"{metric.name}: cumulative histograms are not used (export delta)"
        return metric.histogram.data_points, ""
    return (getattr(metric, kind).data_points if kind else ()), f"{metric.name}: {kind or 'empty'} metrics are not used"


def _value(point: Any) -> float | None:
    if hasattr(point, "count"):  # a histogram point
        return point.sum / point.count if point.count and point.HasField("sum") else None
    kind = point.WhichOneof("value")
    return float(getattr(point, kind)) if kind else None


def _readings(request: Any, result: ExportResult) -> dict[str, _RunSeries]:
    """Each run's readings, by the run's reference as the points give it."""
    series: dict[str, _RunSeries] = defaultdict(_RunSeries)
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == STEP_TIME:
                    scale, wanted = _SECONDS_PER_UNIT.get(metric.unit), "step_times"
                elif metric.name in DUTY_CYCLES:
                    scale, wanted = _FRACTION_PER_UNIT.get(metric.unit), "duty_cycles"
                elif metric.name == "training_step":
                    scale, wanted = 1.0, "steps"
                else:
                    continue
                points, unusable = _number_points(metric)
                points = list(points)
                if unusable or scale is None:
                    result.reject(len(points), unusable or f"{metric.name}: unit {metric.unit!r} is not known")
                    continue
                for point in points:
                    value = _value(point)
                    attributes = _attributes(point.attributes)
                    run = (attributes.get(RUN_ATTRIBUTE) or resource.get(RUN_ATTRIBUTE)
                           or attributes.get(SDK_POINT_RUN) or resource.get(SDK_RESOURCE_RUN))
                    if value is not None and not math.isfinite(value):
                        raise InvalidArgument(f"{metric.name}: a point's value must be a finite number, not {value}",
                                              field="value")
                    if value is None or run is None:
                        result.reject(1, f"{metric.name}: a point without a value or a run "
                                         f"({RUN_ATTRIBUTE}, {SDK_POINT_RUN} or {SDK_RESOURCE_RUN})")
                        continue
                    reference = _run_reference(run)
                    getattr(series[reference], wanted).append(_Reading(reference, point.time_unix_nano,
                                                                       value * scale))
    return series


class _Nearest:
    """The reading closest in time to a given time (the earlier of two as close), found by bisection."""

    def __init__(self, readings: list[_Reading]):
        self.readings = sorted(readings, key=lambda r: r.time_ns)
        self.times = [r.time_ns for r in self.readings]

    def __call__(self, time_ns: int) -> _Reading | None:
        after = bisect.bisect_left(self.times, time_ns)
        candidates = self.readings[max(0, after - 1): after + 1]
        return min(candidates, key=lambda r: abs(r.time_ns - time_ns), default=None)


def _metric_points(series: _RunSeries, result: ExportResult) -> list[MetricPoint]:
    points: list[MetricPoint] = []
    nearest_duty, nearest_step = _Nearest(series.duty_cycles), _Nearest(series.steps)
    for reading in sorted(series.step_times, key=lambda r: r.time_ns):
        duty = nearest_duty(reading.time_ns)
        step = nearest_step(reading.time_ns)
        if reading.value <= 0 or (duty is not None and not 0 <= duty.value <= 1):
            result.reject(1, f"{reading.run}: step time must be positive and duty cycle within 0-100 %")
            continue
        points.append(MetricPoint(
            step=int(step.value) if step else 0,
            time=datetime.fromtimestamp(reading.time_ns / 1e9, timezone.utc) if reading.time_ns else None,
            step_time_seconds=reading.value,
            duty_cycle=duty.value if duty else None,
        ))
    return points


def export(services: OtlpPorts, request: Any) -> ExportResult:
    """Feed an ``ExportMetricsServiceRequest``'s step times to each run's degradation analyzer."""
    result = ExportResult()
    location = LocationName(services.settings.project, services.settings.location)
    for reference, series in _readings(request, result).items():
        points = _metric_points(series, result)
        try:
            run = find_named(services, location, reference).name
        except MldiagError as error:  # an unknown run, or a display name several runs share
            result.reject(len(points), str(error))
            continue
        for batch in _batches(points):
            try:
                result.alerts.extend(metrics.report_metrics(services, run, batch, new_steps_only=bool(series.steps)))
            except MldiagError as error:  # an unknown run: the rest of the export still counts
                result.reject(len(batch), f"{run}: {error}")
    return result


def _batches(points: list[MetricPoint]) -> Iterator[list[MetricPoint]]:
    for start in range(0, len(points), metrics.MAX_POINTS_PER_REPORT):
        yield points[start: start + metrics.MAX_POINTS_PER_REPORT]


def response_body(result: ExportResult, content_type: str) -> bytes:
    """The OTLP/HTTP response body in the request's encoding."""
    if content_type == PROTOBUF:
        return result.response().SerializeToString()
    return json.dumps(result.response_json()).encode()
