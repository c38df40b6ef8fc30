"""``/v1``: the routes the official SDK calls in self-hosted mode (see
:mod:`mldiag.services.resources.self_hosted` for the contract)."""

from __future__ import annotations

from flask import Blueprint, Response, g

from mldiag.entrypoints.http.rest import json_body, ok, query, query_bool, services
from mldiag.services.resources import self_hosted

blueprint = Blueprint("self_hosted", __name__, url_prefix="/v1")


@blueprint.patch("/machineLearningRuns")
def upsert_by_logical_id() -> Response:
    run = self_hosted.upsert(services(), json_body(), query("update_mask"), g.caller,
                             allow_missing=query_bool("allow_missing"))
    return ok(self_hosted.to_wire(run))


@blueprint.patch("/machineLearningRuns/<id:run>")
def update_run(run: str) -> Response:
    updated = self_hosted.upsert(services(), json_body(), query("update_mask"), g.caller, run_id=run,
                                 allow_missing=query_bool("allow_missing"))
    return ok(self_hosted.to_wire(updated))


@blueprint.get("/agent-info")
def agent_info() -> Response:
    return ok(self_hosted.agent_info(services()))
