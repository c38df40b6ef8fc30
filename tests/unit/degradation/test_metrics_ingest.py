"""Metrics reports drive the stored detector and publish open/close MonitoredEvent messages."""

from __future__ import annotations

import json
import random

import pytest

from mldiag.config import MONITORING_ALERTS
from mldiag.domain.degradation import DetectorParams, MetricPoint
from mldiag.domain import InvalidArgument, MachineLearningRun, NotFound
from mldiag.services.monitoring.metrics import report_metrics, set_detector_params

RUN = "projects/p/locations/l/machineLearningRuns/r1"


@pytest.fixture
def run(embedded):
    return embedded.runs.create(MachineLearningRun(name=RUN))


def points(times, start=0):
    return [MetricPoint(step=start + i, step_time_seconds=t) for i, t in enumerate(times)]


def alerts(services):
    return [json.loads(m.data) for m in services.bus.published[MONITORING_ALERTS]]


def test_slowdown_opens_then_recovery_closes_one_event(embedded, run):
    rng = random.Random(0)
    healthy = [0.2 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(60)]
    slow = [0.26 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(30)]
    # Reported in small batches, as a training loop would; state persists between reports.
    series = healthy + slow + healthy[:30]
    for offset in range(0, len(series), 7):
        report_metrics(embedded, RUN, points(series[offset: offset + 7], offset))
    sent = alerts(embedded)
    assert [a["monitoredEvent"]["analyzerReports"][0]["detectionState"] for a in sent] == ["DETECTED", "NOT_DETECTED"]
    assert {a["monitoredEventId"] for a in sent} == {"degradation-1"}
    assert "above the baseline" in sent[0]["monitoredEvent"]["analyzerReports"][0]["details"]
    assert "endTime" in sent[1]["monitoredEvent"] and "startTime" not in sent[1]["monitoredEvent"]


def test_no_alert_during_warm_up_or_on_steady_runs(embedded, run):
    report_metrics(embedded, RUN, points([3.0, 2.0] + [0.2] * 100))
    assert alerts(embedded) == []


def test_parameters_are_per_run(embedded, run):
    set_detector_params(embedded, RUN, DetectorParams(step_time_slowdown=0.05, warmup_points=5, skip_points=0))
    report_metrics(embedded, RUN, points([0.2] * 20 + [0.22] * 10))
    assert len(alerts(embedded)) == 1


def test_bad_reports_are_refused(embedded, run):
    with pytest.raises(InvalidArgument):
        report_metrics(embedded, RUN, [])
    with pytest.raises(NotFound):
        report_metrics(embedded, RUN.replace("r1", "missing"), points([0.2]))
