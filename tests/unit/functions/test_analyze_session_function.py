"""CloudEvent contract of functions/analyze_session: Pub/Sub pushes posted to the real functions-framework app."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from functions_framework import create_app

from mldiag.entrypoints import handlers
from mldiag.config import ANALYSIS_REQUESTS
from mldiag.domain import AnalysisState
from mldiag.domain.envelopes import storage_finalized_event

FUNCTIONS = Path(__file__).resolve().parents[3] / "functions"
PROFILE = Path(__file__).resolve().parents[2] / "fixtures" / "profiles" / "input_bound"
OBJECT = "run1/plugins/profile/s1/host0.xplane.pb"
SESSION = "projects/p/locations/l/machineLearningRuns/run1/profilerSessions/s1"


@pytest.fixture
def services(function_services):
    return function_services(MLDIAG_BUCKET="profiles", MLDIAG_SETTLE_SECONDS="0")


def _push(payload: dict, message_id: str = "analysis-1") -> dict:
    return {
        "specversion": "1.0", "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "source": f"//pubsub.googleapis.com/projects/p/topics/{ANALYSIS_REQUESTS}", "id": message_id,
        "datacontenttype": "application/json",
        "data": {"message": {"data": base64.b64encode(json.dumps(payload).encode()).decode(),
                             "attributes": {"session": payload.get("session", "")}, "messageId": message_id},
                 "subscription": f"projects/p/subscriptions/analyze_session-{ANALYSIS_REQUESTS}"},
    }


def _post(body: dict):
    app = create_app("analyze_session", str(FUNCTIONS / "analyze_session" / "main.py"), "cloudevent")
    return app.test_client().post("/", data=json.dumps(body), headers={"Content-Type": "application/cloudevents+json"})


@pytest.mark.slow
def test_an_analysis_request_push_analyses_the_session(services):
    written = services.blobs.write_bytes(f"gs://profiles/{OBJECT}",
                                         next(PROFILE.rglob("*.xplane.pb")).read_bytes())
    handlers.register_session(services, storage_finalized_event(
        {"bucket": "profiles", "name": OBJECT, "generation": written.generation, "size": str(written.size)}))
    (request,) = services.bus.published[ANALYSIS_REQUESTS]  # settled at once: the window is 0 s

    response = _post(_push(json.loads(request.data)))

    assert response.status_code == 200
    analysis = services.sessions.get(SESSION).analysis
    assert analysis.state is AnalysisState.DONE
    assert services.blobs.stat(analysis.report_uri).size > 0
    assert services.events.get("analyze_session", "analysis-1").outcome.value == "ok"


def test_a_malformed_request_is_acknowledged_and_recorded(services):
    response = _post(_push({"session": SESSION}, message_id="bad-1"))
    assert response.status_code == 200
    record = services.events.get("analyze_session", "bad-1")
    assert record.outcome.value == "rejected" and "generationSet" in record.error
