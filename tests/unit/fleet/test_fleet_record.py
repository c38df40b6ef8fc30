"""The fleet record of an analysis: the attribution summed per cause, the lost time, the costed findings, the labels."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from mldiag.analysis.evidence import Analysis
from mldiag.domain import Kind, MachineLearningRun, ProfilerSession
from mldiag.domain.fleet import FleetRecord
from mldiag.domain.resources import AnalysisStatus, Finding, FindingCategory, Priority
from mldiag.services.fleet import fleet_record

RUN = "projects/p/locations/l/machineLearningRuns/run1"
SESSION = f"{RUN}/profilerSessions/s1"
WHEN = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def degraded(demo_analyses) -> Analysis:
    return Analysis.model_validate_json(demo_analyses["demo_degraded"])


def _session(**fields) -> ProfilerSession:
    return ProfilerSession(name=SESSION, kind=Kind.KIND_PROGRAMMATIC,
                           analysis=AnalysisStatus(generation_set="g1"), **fields)


def _run() -> MachineLearningRun:
    return MachineLearningRun(name=RUN, display_name="llama", labels={"team": "infra", "job": "pretrain"})


def test_the_attribution_is_the_hosts_parts_summed_per_cause(degraded):
    record = fleet_record(degraded, _session(), _run(), WHEN)

    parts: dict[str, float] = {}
    for host in degraded.hosts:
        for part in host.attribution.parts:
            parts[part.cause.value] = parts.get(part.cause.value, 0.0) + part.ms
    assert {cause.cause: cause.ms for cause in record.attribution} == pytest.approx(parts)
    assert record.loop_ms == pytest.approx(sum(host.attribution.loop_ms for host in degraded.hosts))
    assert sum(cause.share for cause in record.attribution) == pytest.approx(1.0, abs=0.02)
    assert [cause.ms for cause in record.attribution] == sorted((c.ms for c in record.attribution), reverse=True)
    lost = [cause for cause in record.attribution if cause.cause != "device_compute"]
    assert record.lost_ms == pytest.approx(sum(cause.ms for cause in lost)) and record.lost_ms > 0
    assert record.lost_share == pytest.approx(record.lost_device_ms / record.loop_device_ms)


def test_the_record_names_the_session_its_run_and_what_ran(degraded):
    record = fleet_record(degraded, _session(), _run(), WHEN)

    assert (record.record_id, record.run, record.run_display_name, record.generation_set) == (
        f"{SESSION}@g1", RUN, "llama", "g1")
    assert record.labels[0].model_dump() == {"key": "job", "value": "pretrain"}
    assert [label.key for label in record.labels] == ["job", "team"]
    assert record.capture_kind == "programmatic" and record.status == degraded.status.value
    assert record.framework == "jax" and record.device_kind == "cpu"
    assert record.host_count == len(degraded.hosts) == 1
    assert record.step_time_ms == degraded.metrics.step_time_ms
    distribution = degraded.hosts[0].step_ms
    assert (record.step_time_median_ms, record.step_time_p90_ms, record.step_time_max_ms) == (
        distribution.median, distribution.p90, distribution.max)
    assert record.analyzed_at == WHEN


def test_an_automatic_capture_and_a_deleted_run_are_recorded_as_such(degraded):
    record = fleet_record(degraded, _session(auto_captured=True), None, WHEN)

    assert (record.capture_kind, record.run, record.run_display_name, record.labels) == ("automatic", RUN, "", [])


def test_p0_and_p1_findings_carry_the_time_of_the_causes_their_category_names(degraded):
    findings = [Finding(priority=Priority.P0, category=FindingCategory.INPUT_BOUND, title="Host-bound", what="w"),
                Finding(priority=Priority.P1, category=FindingCategory.MEMORY, title="Big temporaries", what="w"),
                Finding(priority=Priority.P2, category=FindingCategory.OTHER, title="Minor", what="w")]
    analysis = degraded.model_copy(update={"findings": findings})

    record = fleet_record(analysis, _session(), _run(), WHEN)

    by_cause = {cause.cause: cause.ms for cause in record.attribution}
    host_bound, memory = record.findings
    assert host_bound.cost_ms == pytest.approx(by_cause.get("host_work", 0) + by_cause.get("waiting", 0))
    assert host_bound.cost_share == pytest.approx(host_bound.cost_ms / record.loop_ms)
    assert (memory.priority, memory.cost_ms, memory.cost_share) == ("P1", None, None)
    assert record.top_finding == "P0 Host-bound"


def test_the_row_is_flat_json_that_reads_back_as_the_same_record(degraded):
    record = fleet_record(degraded, _session(create_time=WHEN), _run(), WHEN)

    row = json.loads(json.dumps(record.row()))

    assert row["analyzed_at"] == "2025-03-01T12:00:00.000000Z" and row["schema_version"] == 1
    assert FleetRecord.model_validate(row) == record
