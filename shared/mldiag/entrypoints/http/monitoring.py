"""``/v1alpha`` monitoring routes: metrics ingest for the degradation analyzer, auto-capture policy, notifications.

``POST .../machineLearningRuns/R:reportMetrics`` takes ``{"points": [{"step",
"stepTimeSeconds", "dutyCycle"?, "time"?}, ...]}`` and answers with the alerts
the report caused. ``POST ...:setAutoCapture`` and ``GET ...:getAutoCapture``
manage the run's storm control (cooldown, capture duration, hourly cap).
``POST ...:setNotifications`` (``{"webhookUrl", "webhookSecret", "webhookMode",
"slackUrl", "pagerdutyRoutingKey"}``) and ``GET ...:getNotifications`` name
where the run's notifications go; no answer ever carries a secret back.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response
from pydantic import BaseModel, Field, ValidationError

from mldiag.domain.degradation import DetectorParams, MetricPoint
from mldiag.domain.errors import invalid_argument
from mldiag.domain.names import LocationName
from mldiag.entrypoints.http.rest import json_body, ok, services
from mldiag.services import notifications
from mldiag.services.monitoring import auto_capture, metrics

blueprint = Blueprint("monitoring", __name__,
                      url_prefix="/v1alpha/projects/<id:project>/locations/<id:location>/machineLearningRuns")


class _Report(BaseModel):
    points: list[MetricPoint] = Field(max_length=metrics.MAX_POINTS_PER_REPORT)


def _parse(model: type[BaseModel], body: dict[str, Any]) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise invalid_argument(error) from None


def _run(project: str, location: str, run: str) -> str:
    return str(LocationName(project, location).run(run))


@blueprint.post("/<id:run>:reportMetrics")
def report_metrics(project: str, location: str, run: str) -> Response:
    report = _parse(_Report, json_body())
    alerts = metrics.report_metrics(services(), _run(project, location, run), report.points)
    return ok({"alerts": alerts})


@blueprint.post("/<id:run>:setDetectorParams")
def set_detector_params(project: str, location: str, run: str) -> Response:
    params = _parse(DetectorParams, json_body())
    return ok(metrics.set_detector_params(services(), _run(project, location, run), params).to_json_dict())


@blueprint.post("/<id:run>:setAutoCapture")
def set_auto_capture(project: str, location: str, run: str) -> Response:
    policy = _parse(auto_capture.AutoCapturePolicy, json_body())
    return ok(auto_capture.set_policy(services(), _run(project, location, run), policy).to_json_dict())


@blueprint.get("/<id:run>:getAutoCapture")
def get_auto_capture(project: str, location: str, run: str) -> Response:
    return ok(auto_capture.describe_state(services(), _run(project, location, run)))


@blueprint.post("/<id:run>:setNotifications")
def set_notifications(project: str, location: str, run: str) -> Response:
    route = _parse(notifications.NotificationRoute, json_body())
    return ok(notifications.set_route(services(), _run(project, location, run), route))


@blueprint.get("/<id:run>:getNotifications")
def get_notifications(project: str, location: str, run: str) -> Response:
    return ok(notifications.describe_route(services(), _run(project, location, run)))
