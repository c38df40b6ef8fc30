"""The official SDK's OpenTelemetry export, unchanged, drives automatic degradation detection on ``mldiag up``.

A JAX loop records its step time with ``record_metrics``; the SDK's OTLP/gRPC
exporter (its ``[otel]`` extra) sends it to ``OTEL_EXPORTER_OTLP_ENDPOINT``, the
address ``mldiag up`` prints; the run id travels as the resource's
``host.name``. A 30 % slowdown opens a monitored event and ``on_alert`` captures
the job's profiler server, with no code of ours in the workload.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from capture_support import ControlPlane, free_port, mldiag_json, profile_file, register_target, session, wait_for

pytestmark = pytest.mark.slow

MLDIAG_UP_ARGS = ("--otlp-port", "0")
WORKLOAD = Path(__file__).parent / "workloads" / "otlp_step_time_workload.py"
# Past the analyzer's warm-up (5 skipped, 30 for the baseline, a 7-point window); slow for long enough to be captured.
HEALTHY_STEPS, SLOW_STEPS = 50, 60


def test_a_30_percent_slowdown_recorded_by_the_sdk_opens_an_event_and_is_captured(control_plane: ControlPlane):
    endpoint = re.search(r"OTEL_EXPORTER_OTLP_ENDPOINT=(\S+)", control_plane.banner)[1]
    env = {**os.environ, "DIAGON_BASE_URL": control_plane.url, "JAX_PLATFORMS": "cpu",
           "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_METRIC_EXPORT_INTERVAL": "50"}
    port = free_port()
    with subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--name", "otlp-e2e", "--gcs-path", str(control_plane.bucket_folder),
         "--healthy", str(HEALTHY_STEPS), "--slow", str(SLOW_STEPS), "--pace", "0.12", "--profiler-port", str(port)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as workload:
        try:
            registered = workload.stdout.readline()
            assert registered.startswith("registered run "), workload.stderr.read()[-3000:]
            run = registered.split()[-1]
            register_target(control_plane, run, "worker-0", port)
            mldiag_json(control_plane, "machine-learning-run", "set-auto-capture", run, "--duration", "1s")
            workload.stdin.write("train\n")
            workload.stdin.flush()

            def events() -> list[dict]:
                return mldiag_json(control_plane, "monitored-events", "list", "--machine-learning-run", run)

            (event,) = wait_for(events, "the analyzer's event", timeout_s=120)
            assert event["type"] == "PERFORMANCE_DEGRADATION" and event["startTime"]
            (report,) = event["analyzerReports"]
            assert report["analyzer"] == "mldiag-degradation" and report["detectionState"] == "DETECTED"
            assert "above the baseline" in report["details"]

            event = wait_for(lambda: (e := events()[0])["profilerSessions"] and e, "on_alert's capture")
            (session_name,) = event["profilerSessions"]
            session_id = session_name.rsplit("/", 1)[1]
            captured = wait_for(lambda: (s := session(control_plane, run, session_id))["targetSessions"]
                                .get("worker-0", {}).get("sessionPhase") not in (None, "ACTIVE") and s,
                                "the automatic capture")
            assert captured["autoCaptured"] is True and captured["monitoredEvents"] == [event["name"]]
            assert captured["targetSessions"]["worker-0"]["sessionPhase"] == "SUCCEEDED"
            assert profile_file(control_plane, run, session_id, "worker-0").stat().st_size > 10_000
            out, err = workload.communicate(timeout=300)
            assert workload.returncode == 0 and "done" in out, err[-3000:]
        finally:
            workload.kill()
    assert ("POST", "/v1/metrics") not in control_plane.requests()  # it came over gRPC
