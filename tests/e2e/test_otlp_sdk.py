"""The official SDK's OpenTelemetry export, unchanged, drives automatic degradation detection on ``mldiag up``.

A JAX loop records its step time with ``record_metrics``; the SDK's OTLP/gRPC
exporter (its ``[otel]`` extra) sends it to ``OTEL_EXPORTER_OTLP_ENDPOINT``, the
address ``mldiag up`` prints; the run id travels as the resource's
``host.name``. A 30 % slowdown opens a monitored event, with no code of ours in
the workload.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from capture_support import ControlPlane, mldiag_json, wait_for

pytestmark = pytest.mark.slow

MLDIAG_UP_ARGS = ("--otlp-port", "0")
WORKLOAD = Path(__file__).parent / "workloads" / "otlp_step_time_workload.py"
HEALTHY_STEPS, SLOW_STEPS = 50, 25  # past the analyzer's warm-up (5 skipped, 30 for the baseline, a 7-point window)


def test_a_30_percent_slowdown_recorded_by_the_sdk_opens_a_monitored_event(control_plane: ControlPlane):
    endpoint = re.search(r"OTEL_EXPORTER_OTLP_ENDPOINT=(\S+)", control_plane.banner)[1]
    env = {**os.environ, "DIAGON_BASE_URL": control_plane.url, "JAX_PLATFORMS": "cpu",
           "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_METRIC_EXPORT_INTERVAL": "50"}
    workload = subprocess.run(
        [sys.executable, str(WORKLOAD), "--name", "otlp-e2e", "--gcs-path", str(control_plane.bucket_folder),
         "--healthy", str(HEALTHY_STEPS), "--slow", str(SLOW_STEPS), "--pace", "0.12"],
        env=env, capture_output=True, text=True, timeout=300)
    assert workload.returncode == 0 and "done" in workload.stdout, workload.stderr[-3000:]
    run = re.search(r"registered run (\S+)", workload.stdout)[1]

    def events() -> list[dict]:
        return mldiag_json(control_plane, "monitored-events", "list", "--machine-learning-run", run)

    (event,) = wait_for(events, "the analyzer's event")
    assert event["type"] == "PERFORMANCE_DEGRADATION" and event["startTime"]
    (report,) = event["analyzerReports"]
    assert report["analyzer"] == "mldiag-degradation" and report["detectionState"] == "DETECTED"
    assert "above the baseline" in report["details"]
    assert ("POST", "/v1/metrics") not in control_plane.requests()  # it came over gRPC
