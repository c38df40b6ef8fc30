"""OTLP metrics in: the official SDK's gauges, over OTLP/HTTP (protobuf, JSON) and OTLP/gRPC, feed the analyzer."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import logging
import random

import grpc
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as service
from opentelemetry.proto.common.v1 import common_pb2 as common
from opentelemetry.proto.metrics.v1 import metrics_pb2 as otlp_metrics

from mldiag.entrypoints.http.app import create_app
from mldiag.entrypoints.http.rest import MAX_BODY_BYTES
from mldiag.config import MONITORING_ALERTS
from mldiag.domain.degradation import DetectorParams
from mldiag.domain import MachineLearningRun
from mldiag.services import unit_of_work
from mldiag.services.monitoring.metrics import DETECTORS, set_detector_params
from mldiag.services.monitoring.otlp import export
from mldiag.local.otlp_grpc import SERVICE, OtlpGrpcServer

RUN_ID = "r1"
RUN = f"projects/p/locations/l/machineLearningRuns/{RUN_ID}"
SECOND = 1_000_000_000
FAST = DetectorParams(skip_points=0, warmup_points=5, window_points=3)


@pytest.fixture
def run(embedded):
    embedded.runs.create(MachineLearningRun(name=RUN))
    set_detector_params(embedded, RUN, FAST)
    return RUN


def _attributes(values: dict) -> list:
    return [common.KeyValue(key=k, value=common.AnyValue(string_value=v)) for k, v in values.items()]


def sdk_export(step_times: list[float], *, start: int = 0, duty_cycle_percent: float | None = None,
               host_name: str = RUN_ID, unit: str = "", point_attributes: dict | None = None):
    """What the SDK's OTLP exporter sends: gauges, run id as ``host.name`` and the points' ``node_id``."""
    attributes = _attributes(point_attributes if point_attributes is not None else {"node_id": host_name})

    def gauge(name: str, values: list[float], metric_unit: str = "") -> otlp_metrics.Metric:
        return otlp_metrics.Metric(name=name, unit=metric_unit, gauge=otlp_metrics.Gauge(data_points=[
            otlp_metrics.NumberDataPoint(time_unix_nano=(start + i + 1) * SECOND, as_double=v, attributes=attributes)
            for i, v in enumerate(values)]))

    steps = [start + i for i in range(len(step_times))]
    metrics = [gauge("step_time", step_times, unit), gauge("training_step", steps),
               gauge("learning_rate", [0.1] * len(step_times))]
    if duty_cycle_percent is not None:
        metrics.append(gauge("tpu_duty_cycle", [duty_cycle_percent] * len(step_times)))
    return service.ExportMetricsServiceRequest(resource_metrics=[otlp_metrics.ResourceMetrics(
        resource={"attributes": _attributes({"service.name": "diagon_sdk_workload", "host.name": host_name})},
        scope_metrics=[otlp_metrics.ScopeMetrics(metrics=metrics)])])


def with_token(services):
    return dataclasses.replace(services, settings=services.settings.model_copy(update={"api_token": "s3cret"}))


def fed(services) -> list:
    """The points the run's detector took, oldest first (the baseline's sample, then the recent window)."""
    state = DETECTORS.read(services, RUN).state
    return state.sample + state.recent


def alerts(services) -> list[dict]:
    return [json.loads(m.data) for m in services.bus.published.get(MONITORING_ALERTS, [])]


def slowdown_series() -> list[float]:
    rng = random.Random(0)
    return [0.2 * (1 + rng.uniform(-0.02, 0.02)) for _ in range(12)] + [0.26] * 6


def test_a_30_percent_slowdown_in_sdk_gauges_opens_a_monitored_event(embedded, run):
    series = slowdown_series()
    for start in range(len(series)):  # the SDK's periodic reader sends one gauge value per export
        result = export(embedded, sdk_export(series[start:start + 1], start=start))
        assert result.rejected == 0
    sent = alerts(embedded)
    assert [a["monitoredEvent"]["analyzerReports"][0]["detectionState"] for a in sent] == ["DETECTED"]
    assert sent[0]["run"] == RUN
    state = DETECTORS.read(embedded, RUN).state
    assert state.seen == len(series) and state.recent[-1].step == len(series) - 1


def test_duty_cycle_in_percent_and_step_time_units_are_converted(embedded, run):
    export(embedded, sdk_export([250.0] * 3, duty_cycle_percent=87.5, unit="ms"))
    assert [(p.step_time_seconds, p.duty_cycle) for p in fed(embedded)] == [(0.25, 0.875)] * 3


def test_an_explicit_run_attribute_wins_over_the_sdk_host_name(embedded, run):
    request = sdk_export([0.2], host_name="some-machine", point_attributes={"mldiag.run": RUN})
    assert export(embedded, request).rejected == 0
    assert DETECTORS.read(embedded, RUN).state.seen == 1


def test_points_of_unknown_runs_or_units_are_rejected_without_failing_the_rest(embedded, run):
    request = sdk_export([0.2, 0.2], host_name="not-a-run")
    request.resource_metrics.extend(sdk_export([0.2]).resource_metrics)
    result = export(embedded, request)
    assert result.rejected == 2 and "not-a-run not found" in result.error_message
    assert DETECTORS.read(embedded, RUN).state.seen == 1
    result = export(embedded, sdk_export([0.2], unit="fortnights"))
    assert result.rejected == 1 and "unit 'fortnights'" in result.error_message


def test_delta_histograms_count_as_their_mean_and_cumulative_ones_are_rejected(embedded, run):
    def histogram(temporality: int) -> service.ExportMetricsServiceRequest:
        point = otlp_metrics.HistogramDataPoint(time_unix_nano=SECOND, count=4, sum=1.0,
                                                attributes=_attributes({"node_id": RUN_ID}))
        metric = otlp_metrics.Metric(name="step_time", unit="s", histogram=otlp_metrics.Histogram(
            data_points=[point], aggregation_temporality=temporality))
        return service.ExportMetricsServiceRequest(resource_metrics=[otlp_metrics.ResourceMetrics(
            scope_metrics=[otlp_metrics.ScopeMetrics(metrics=[metric])])])

    assert export(embedded, histogram(otlp_metrics.AGGREGATION_TEMPORALITY_DELTA)).rejected == 0
    assert fed(embedded)[-1].step_time_seconds == 0.25
    result = export(embedded, histogram(otlp_metrics.AGGREGATION_TEMPORALITY_CUMULATIVE))
    assert result.rejected == 1 and "cumulative" in result.error_message


def test_a_gauge_exported_again_before_the_next_step_is_fed_once(embedded, run):
    for _ in range(3):  # the periodic reader re-exports the last value until the workload sets it anew
        export(embedded, sdk_export([0.2], start=4))
    export(embedded, sdk_export([0.2], start=5))
    assert [p.step for p in fed(embedded)] == [4, 5]


# OTLP/HTTP


def post(client, body: bytes, content_type: str, **headers):
    return client.post("/v1/metrics", data=body, headers={"Content-Type": content_type, **headers})


def test_http_protobuf_and_json_bodies_feed_the_analyzer(embedded, run):
    client = create_app(embedded).test_client()
    series = slowdown_series()
    for start, step_time in enumerate(series):
        request = sdk_export([step_time], start=start)
        if start % 2:
            response = post(client, json_format.MessageToJson(request).encode(), "application/json")
            assert response.status_code == 200 and response.get_json() == {}
        else:
            response = post(client, request.SerializeToString(), "application/x-protobuf")
            assert response.status_code == 200 and response.content_type == "application/x-protobuf"
            assert not service.ExportMetricsServiceResponse.FromString(response.data).HasField("partial_success")
    assert len(alerts(embedded)) == 1


def test_http_gzip_bodies_and_partial_success(embedded, run):
    client = create_app(embedded).test_client()
    body = gzip.compress(sdk_export([0.2], host_name="elsewhere").SerializeToString())
    response = post(client, body, "application/x-protobuf", **{"Content-Encoding": "gzip"})
    answer = service.ExportMetricsServiceResponse.FromString(response.data)
    assert response.status_code == 200 and answer.partial_success.rejected_data_points == 1
    response = post(client, json_format.MessageToJson(sdk_export([0.2], host_name="elsewhere")).encode(),
                    "application/json")
    assert response.get_json()["partialSuccess"]["rejectedDataPoints"] == "1"


@pytest.mark.parametrize(("body", "content_type", "headers", "status", "says"), [
    (b"\xff\xff\xff", "application/x-protobuf", {}, 400, "not an OTLP ExportMetricsServiceRequest"),
    (b'{"resourceMetrics": 7}', "application/json", {}, 400, "not OTLP/JSON metrics"),
    (b"not gzip", "application/x-protobuf", {"Content-Encoding": "gzip"}, 400, "not valid gzip"),
    (bytes.fromhex("1f8b0800") + b"garbage", "application/x-protobuf", {"Content-Encoding": "gzip"}, 400,
     "not valid gzip"),
    (gzip.compress(b"\0" * 64)[:-12], "application/x-protobuf", {"Content-Encoding": "gzip"}, 400, "ends before"),
    (b"{}", "application/json", {"Content-Encoding": "br"}, 400, "'br' is not supported"),
    (b"x", "text/plain", {}, 415, "not text/plain"),
    (gzip.compress(b"\0" * (5 * 1024 * 1024)), "application/x-protobuf", {"Content-Encoding": "gzip"}, 400,
     "over the 4194304-byte limit"),
])
def test_http_bad_bodies_get_one_line(embedded, run, body, content_type, headers, status, says):
    response = post(create_app(embedded).test_client(), body, content_type, **headers)
    message = response.get_json()["error"]["message"]
    assert response.status_code == status and says in message and "\n" not in message


def _chunked_export(points: int) -> bytes:
    return sdk_export([0.2] * points, host_name="no-such-run").SerializeToString()


@pytest.mark.parametrize(("points", "status"), [(17000, 413), (100, 200)])
def test_http_a_chunked_body_over_the_limit_is_refused_never_cut_and_parsed(embedded, run, points, status):
    """As a server that ends chunked bodies itself hands them on (the functions framework's, in the cloud)."""
    body = _chunked_export(points)
    assert (len(body) > MAX_BODY_BYTES) == (status == 413)
    response = create_app(embedded).test_client().post(
        "/v1/metrics", input_stream=io.BytesIO(body), environ_overrides={"wsgi.input_terminated": True},
        headers={"Content-Type": "application/x-protobuf", "Transfer-Encoding": "chunked"})
    assert response.status_code == status, response.data[:200]
    if status == 413:
        assert "over the 1048576-byte limit" in response.get_json()["error"]["message"]
    else:
        assert service.ExportMetricsServiceResponse.FromString(response.data).partial_success.rejected_data_points \
            == points


def test_http_needs_the_api_token_when_one_is_configured(embedded, run):
    services = with_token(embedded)
    client = create_app(services).test_client()
    body = sdk_export([0.2]).SerializeToString()
    assert post(client, body, "application/x-protobuf").status_code == 401
    assert post(client, body, "application/x-protobuf", Authorization="Bearer wrong").status_code == 403
    assert post(client, body, "application/x-protobuf", Authorization="Bearer s3cret").status_code == 200


# OTLP/gRPC


@pytest.fixture
def grpc_export(embedded):
    servers = []

    def call(services, request, metadata=()):
        server = OtlpGrpcServer(services, "127.0.0.1", 0)
        server.start()
        servers.append(server)
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            method = channel.unary_unary(f"/{SERVICE}/Export", request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=service.ExportMetricsServiceResponse.FromString)
            return method(request, metadata=metadata, timeout=10)

    yield call
    for server in servers:
        server.stop(0)


def test_grpc_export_feeds_the_analyzer_and_checks_the_token(embedded, run, grpc_export):
    answer = grpc_export(embedded, sdk_export([0.2, 0.2], host_name="elsewhere"))
    assert answer.partial_success.rejected_data_points == 2
    grpc_export(embedded, sdk_export([0.2]))
    assert DETECTORS.read(embedded, RUN).state.seen == 1
    guarded = with_token(embedded)
    with pytest.raises(grpc.RpcError) as refused:
        grpc_export(guarded, sdk_export([0.2]))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    grpc_export(guarded, sdk_export([0.2], start=1), metadata=(("authorization", "Bearer s3cret"),))
    assert DETECTORS.read(embedded, RUN).state.seen == 2



def _grpc_raw_export(server: OtlpGrpcServer, body: bytes, metadata=()) -> bytes:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        return channel.unary_unary(f"/{SERVICE}/Export")(body, metadata=metadata, timeout=10)


@pytest.mark.parametrize(("metadata", "code"), [
    ((), grpc.StatusCode.UNAUTHENTICATED),
    ((("authorization", "Bearer wrong"),), grpc.StatusCode.PERMISSION_DENIED),
    ((("authorization", "Bearer s3cret"),), grpc.StatusCode.INVALID_ARGUMENT),
])
def test_grpc_checks_the_credential_before_it_parses_and_logs_no_traceback(embedded, run, caplog, metadata, code):
    server = OtlpGrpcServer(with_token(embedded), "127.0.0.1", 0)
    server.start()
    try:
        with pytest.raises(grpc.RpcError) as refused:
            _grpc_raw_export(server, b"\xff\xff\xff", metadata)
    finally:
        server.stop(0)
    assert refused.value.code() == code
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        assert "not an OTLP ExportMetricsServiceRequest" in refused.value.details()
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_value_that_is_not_finite_is_invalid_argument_over_http_and_grpc(embedded, run, grpc_export, value):
    body = json_format.MessageToDict(sdk_export([0.2]))
    body["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"][0]["asDouble"] = value
    response = post(create_app(embedded).test_client(), json.dumps(body).encode(), "application/json")
    assert response.status_code == 400 and "finite number" in response.get_json()["error"]["message"]
    request = sdk_export([0.2])
    request.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0].as_double = float(value)
    with pytest.raises(grpc.RpcError) as refused:
        grpc_export(embedded, request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert DETECTORS.read(embedded, RUN).state.seen == 0


def test_an_export_is_linear_in_its_points(embedded, run):
    """A request of 16x the points costs about 16x as much, nowhere near the 256x of a quadratic ingest."""
    import time

    def seconds(points: int) -> float:
        request = sdk_export([0.2] * points, duty_cycle_percent=90.0, host_name="no-such-run")
        started = time.perf_counter()
        export(embedded, request)
        return time.perf_counter() - started

    seconds(500)
    # Far apart, so that a busy machine's noise on either side cannot pass a quadratic cost or fail a linear one.
    small, large = min(seconds(1000) for _ in range(3)), min(seconds(16000) for _ in range(2))
    assert large < 64 * small, (small, large)


def test_a_step_time_summary_is_rejected_with_its_reason(embedded, run):
    summary = otlp_metrics.Metric(name="step_time", summary=otlp_metrics.Summary(data_points=[
        otlp_metrics.SummaryDataPoint(time_unix_nano=SECOND, count=2, sum=0.4)]))
    result = export(embedded, service.ExportMetricsServiceRequest(resource_metrics=[otlp_metrics.ResourceMetrics(
        scope_metrics=[otlp_metrics.ScopeMetrics(metrics=[summary])])]))
    assert result.rejected == 1 and "summary metrics are not used" in result.error_message


def test_a_run_attribute_may_give_the_display_name_one_run_has(embedded, run):
    unit_of_work.change(embedded, lambda unit: unit.runs.update(
        RUN, lambda run: setattr(run, "display_name", "My Experiment")))
    request = sdk_export([0.2, 0.2], host_name="some-machine", point_attributes={"mldiag.run": "My Experiment"})
    assert export(embedded, request).rejected == 0
    assert DETECTORS.read(embedded, RUN).state.seen == 2


def test_a_display_name_several_runs_share_is_rejected_naming_them(embedded, run):
    unit_of_work.change(embedded, lambda unit: unit.runs.update(
        RUN, lambda run: setattr(run, "display_name", "shared")))
    embedded.runs.create(MachineLearningRun(name=f"{RUN}-again", display_name="shared"))
    result = export(embedded, sdk_export([0.2], point_attributes={"mldiag.run": "shared"}))
    assert result.rejected == 1 and "r1" in result.error_message and "r1-again" in result.error_message
    assert DETECTORS.read(embedded, RUN).state.seen == 0
