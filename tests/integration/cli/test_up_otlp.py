"""``mldiag up`` takes OTLP metrics over gRPC on its own port and over HTTP on the API's, and says where."""

from __future__ import annotations

import time
import urllib.request

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as service
from opentelemetry.proto.common.v1 import common_pb2 as common
from opentelemetry.proto.metrics.v1 import metrics_pb2 as otlp_metrics
from typer.testing import CliRunner
from up_process_support import UpProcess

from mldiag.cli.main import app
from mldiag.local.otlp_grpc import SERVICE

RUN_ID = "otlp-run"


def step_time_export(run_id: str) -> service.ExportMetricsServiceRequest:
    point = otlp_metrics.NumberDataPoint(time_unix_nano=time.time_ns(), as_double=0.2)
    resource = {"attributes": [common.KeyValue(key="host.name", value=common.AnyValue(string_value=run_id))]}
    return service.ExportMetricsServiceRequest(resource_metrics=[otlp_metrics.ResourceMetrics(
        resource=resource, scope_metrics=[otlp_metrics.ScopeMetrics(metrics=[otlp_metrics.Metric(
            name="step_time", unit="s", gauge=otlp_metrics.Gauge(data_points=[point]))])])])


def test_an_otlp_port_asked_for_and_taken_is_one_line(tmp_path, taken_port):
    result = CliRunner().invoke(app, ["up", "--port", "0", "--otlp-port", str(taken_port),
                                      "--data", str(tmp_path / "data")])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"mldiag up: cannot listen for OTLP/gRPC on 127.0.0.1:{taken_port} (Address already in use); choose "
        "another with --otlp-port, 0 for a free one, or --no-otlp"]


def test_mldiag_up_takes_otlp_over_grpc_and_http_for_its_runs(tmp_path, taken_port):
    # The default port taken (by another mldiag up, say): mldiag up runs without OTLP/gRPC and says so.
    up = UpProcess.start(tmp_path / "data", "import mldiag.local.otlp_grpc as grpc_server",
                         f"grpc_server.DEFAULT_PORT = {taken_port}")
    try:
        up.wait_for("Stop with Ctrl-C")
        assert f"OTLP/gRPC is off: cannot listen for OTLP/gRPC on 127.0.0.1:{taken_port} (Address already in use)" \
            in next(line for line in up.lines if line.startswith("OTLP/gRPC"))
    finally:
        up.stop()
    assert up.process.returncode == 0

    up = UpProcess.start(tmp_path / "data", "import mldiag.local.otlp_grpc as grpc_server",
                         "grpc_server.DEFAULT_PORT = 0")
    try:
        url = up.wait_for("mldiag control plane at ").split(" at ", 1)[1].split()[0]
        endpoint = up.wait_for("OTEL_EXPORTER_OTLP_ENDPOINT=").split("=", 1)[1]
        up.wait_for("Stop with Ctrl-C")
        created = urllib.request.Request(
            f"{url}/v1alpha/projects/local-project/locations/local/machineLearningRuns?machineLearningRunId={RUN_ID}",
            data=b"{}", headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(created, timeout=30).close()

        with grpc.insecure_channel(endpoint.removeprefix("http://")) as channel:
            export = channel.unary_unary(f"/{SERVICE}/Export", request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=service.ExportMetricsServiceResponse.FromString)
            by_grpc = [export(step_time_export(run), timeout=30).partial_success.rejected_data_points
                       for run in (RUN_ID, "no-such-run")]
        posted = urllib.request.Request(f"{url}/v1/metrics", data=step_time_export(RUN_ID).SerializeToString(),
                                        headers={"Content-Type": "application/x-protobuf"}, method="POST")
        with urllib.request.urlopen(posted, timeout=30) as response:
            by_http = service.ExportMetricsServiceResponse.FromString(response.read())
    finally:
        up.stop()
    assert by_grpc == [0, 1]
    assert not by_http.HasField("partial_success")
    assert up.process.returncode == 0
