"""``/v1alpha`` capture routes: captures, continuous profiling, and the node agent's pull protocol.

A capture is a custom method on the sessions collection,
``POST .../profilerSessions:capture?profiler_session_id=S``, rather than a
plain create: it creates the session *and* starts work on the targets, and
answers with an operation that stays running until every target is done
(poll ``operations/O``). Continuous profiling is a pair of custom methods on
the run, as gcloud's verbs are. The agent routes are described in
:mod:`mldiag.services.capture.agents`.
"""

from __future__ import annotations

from flask import Blueprint, Response

from mldiag.domain.names import SESSIONS, TARGETS, LocationName, RunName
from mldiag.entrypoints.http.rest import json_body, ok, query, services
from mldiag.services.capture import agents
from mldiag.services.capture import requests as capture_requests

blueprint = Blueprint("capture", __name__, url_prefix="/v1alpha/projects/<id:project>/locations/<id:location>")
RUN = "/machineLearningRuns/<id:run>"


def _run(project: str, location: str, run: str) -> RunName:
    return LocationName(project, location).run(run)


@blueprint.post(f"{RUN}/{SESSIONS}:capture")
def capture_session(project: str, location: str, run: str) -> Response:
    request = capture_requests.parse(capture_requests.CaptureRequest, json_body())
    operation = capture_requests.capture(services(), _run(project, location, run), query("profiler_session_id"), request)
    return ok(operation.to_json_dict())


@blueprint.post(f"{RUN}:startContinuousProfiling")
def start_continuous_profiling(project: str, location: str, run: str) -> Response:
    request = capture_requests.parse(capture_requests.ContinuousRequest, json_body())
    return ok(capture_requests.start_continuous(services(), _run(project, location, run), request).to_json_dict())


@blueprint.post(f"{RUN}:stopContinuousProfiling")
def stop_continuous_profiling(project: str, location: str, run: str) -> Response:
    return ok(capture_requests.stop_continuous(services(), _run(project, location, run)).to_json_dict())


@blueprint.post(f"{RUN}/{TARGETS}/<id:target>:heartbeat")
def heartbeat(project: str, location: str, run: str, target: str) -> Response:
    return ok(agents.heartbeat(services(), _run(project, location, run), target, json_body()).to_json_dict())


@blueprint.post("/captureTasks:claim")
def claim_tasks(project: str, location: str) -> Response:
    return ok({"tasks": agents.claim(services(), LocationName(project, location), json_body())})


@blueprint.post("/captureTasks:complete")
def complete_task(project: str, location: str) -> Response:
    return ok(agents.complete(services(), LocationName(project, location), json_body()).to_json_dict())
