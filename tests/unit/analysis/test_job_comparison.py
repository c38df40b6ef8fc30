"""An auto-captured session's report says what changed against the run's earlier OPTIMAL session."""

from __future__ import annotations

import json

import pytest
from analysis_support import xplane

from mldiag.config import ANALYSIS_REQUESTS
from mldiag.domain import AnalysisState, Kind, MachineLearningRun, ProfilerSession
from mldiag.domain.envelopes import pubsub_cloud_event, storage_finalized_event
from mldiag.entrypoints import handlers
from mldiag.services.registration import Registrar

RUN = "projects/p/locations/l/machineLearningRuns/run1"


def _land(services, session_id: str, fixture: str) -> None:
    uri = f"gs://profiles/run1/plugins/profile/{session_id}/host0.xplane.pb"
    written = services.blobs.write_bytes(uri, xplane(fixture).read_bytes())
    handlers.register_session(services, storage_finalized_event({
        "bucket": "profiles", "name": uri.removeprefix("gs://profiles/"), "generation": written.generation,
        "size": str(written.size)}))


def _analyse_latest_request(services) -> None:
    message = services.bus.published[ANALYSIS_REQUESTS][-1]
    event = pubsub_cloud_event(project="p", topic=ANALYSIS_REQUESTS, subscription="analyze_session",
                               message=message, published=services.now())
    handlers.analyze_session(services, event)


def _analysis_json(services, session_id: str) -> dict:
    session = services.sessions.get(f"{RUN}/profilerSessions/{session_id}")
    assert session.analysis.state is AnalysisState.DONE, session.analysis.error
    return json.loads(services.blobs.read_bytes(session.analysis.analysis_uri))


@pytest.mark.slow
def test_auto_captured_session_is_compared_with_the_earlier_healthy_one(embedded, clock):
    embedded.runs.create(MachineLearningRun(name=RUN, artifacts={"gcsPath": "gs://profiles"}))
    _land(embedded, "healthy", "compute_bound")
    clock.advance(embedded.settings.settle_seconds + 1)
    Registrar(embedded).settle_due()
    _analyse_latest_request(embedded)
    assert _analysis_json(embedded, "healthy")["comparison"] is None

    clock.advance(600)
    embedded.sessions.create(ProfilerSession(name=f"{RUN}/profilerSessions/auto-degradation-1",
                                             kind=Kind.KIND_ON_DEMAND, profiler_targets=["host0"],
                                             auto_captured=True))
    _land(embedded, "auto-degradation-1", "input_bound")  # every expected host is in: requested at once
    _analyse_latest_request(embedded)

    comparison = _analysis_json(embedded, "auto-degradation-1")["comparison"]
    assert comparison["baseline_session"] == f"{RUN}/profilerSessions/healthy"
    assert comparison["headline"][0].startswith("Step time")
    assert "against the healthy session healthy" in comparison["headline"][0]
    page = embedded.blobs.read_bytes(
        embedded.sessions.get(f"{RUN}/profilerSessions/auto-degradation-1").analysis.report_uri).decode()
    assert 'id="what-changed"' in page and "What changed" in page
