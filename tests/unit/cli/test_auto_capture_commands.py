"""CLI → API → services for automatic capture: the policy, metrics ingest, and what monitored-events shows."""

from __future__ import annotations

import json
import random

import yaml

from mldiag.config import MONITORING_ALERTS


def _json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_set_auto_capture_round_trips(mldiag, server):
    mldiag("machine-learning-run", "create", "r1")
    policy = _json(mldiag("machine-learning-run", "set-auto-capture", "r1", "--cooldown", "5m", "--duration",
                          "1500ms", "--max-per-hour", "2", "--format", "json"))
    assert policy == {"enabled": True, "cooldown": "300.000s", "duration": "1.500s", "maxPerHour": 2}
    disabled = _json(mldiag("machine-learning-run", "set-auto-capture", "r1", "--disable", "--format", "json"))
    assert disabled["enabled"] is False


def test_set_auto_capture_refuses_bad_values(mldiag):
    mldiag("machine-learning-run", "create", "r1")
    assert mldiag("machine-learning-run", "set-auto-capture", "r1", "--cooldown", "soon").exit_code == 2
    assert mldiag("machine-learning-run", "set-auto-capture", "ghost").exit_code == 1


def test_report_metrics_opens_an_alert(mldiag, server, tmp_path):
    mldiag("machine-learning-run", "create", "r1")
    rng = random.Random(0)
    times = [0.2 * (1 + rng.uniform(-0.05, 0.05)) for _ in range(60)] + [0.3] * 15
    points = tmp_path / "points.jsonl"
    points.write_text("\n".join(json.dumps({"step": i, "stepTimeSeconds": t}) for i, t in enumerate(times)))
    reported = _json(mldiag("machine-learning-run", "report-metrics", "r1", str(points), "--format", "json"))
    (alert,) = reported["alerts"]
    assert alert["monitoredEventId"] == "degradation-1"
    assert len(server.services.bus.published[MONITORING_ALERTS]) == 1


def test_bad_metrics_are_refused_with_the_field(mldiag, tmp_path):
    mldiag("machine-learning-run", "create", "r1")
    points = tmp_path / "points.jsonl"
    points.write_text(json.dumps({"step": 1, "stepTimeSeconds": -1}))
    result = mldiag("machine-learning-run", "report-metrics", "r1", str(points))
    assert result.exit_code == 1 and "points.0.stepTimeSeconds" in result.output
    points.write_text("{nope")
    assert mldiag("machine-learning-run", "report-metrics", "r1", str(points)).exit_code == 2


def test_monitored_event_describe_shows_suppressions(mldiag, server):
    from mldiag.entrypoints import handlers
    from mldiag.domain import MachineLearningRun
    from mldiag.domain.envelopes import encode_json

    services = server.services
    mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles")
    name = f"projects/{services.settings.project}/locations/{services.settings.location}/machineLearningRuns/r1"
    assert isinstance(services.runs.get(name), MachineLearningRun)
    message = {"run": name, "monitoredEventId": "e1", "monitoredEvent": {
        "analyzerReports": [{"analyzer": "test", "detectionState": "DETECTED"}]}}
    services.bus.subscribe(MONITORING_ALERTS, lambda e: handlers.on_alert(services, e), name="on_alert")
    for _ in range(3):
        services.bus.publish(MONITORING_ALERTS, encode_json(message))
    services.bus.drain()
    described = mldiag("monitored-events", "describe", "e1", "--machine-learning-run", "r1")
    assert described.exit_code == 0, described.output
    event = yaml.safe_load(described.stdout)
    assert event["suppressedCount"] == 3
    assert event["suppressions"][0]["reason"].startswith("capture failed: run r1 has no active profiler targets")
