"""``/v1alpha`` operator routes: the event archive, replay, dead letters, and the installation's status.

They belong to the installation rather than to a project and location:

* ``GET /v1alpha/events?type=&function=&outcome=&since=&until=&limit=`` — archived events, newest first;
* ``GET /v1alpha/events/{function:id or id}`` — one, with its raw CloudEvent;
* ``POST /v1alpha/events:replay`` — ``{"events": [...], <the same filters>, "dryRun", "to": "local"|"topic"}``;
* ``POST /v1alpha/events:prune`` — delete records past their retention;
* ``GET /v1alpha/deadLetters?limit=`` and ``GET /v1alpha/status``;
* ``GET /v1alpha/agentConfig`` — where node agents upload (:mod:`mldiag.services.capture.agents`).

Every one of them, reads included, needs the credential when the control plane
asks for one (:mod:`mldiag.entrypoints.http.auth`): raw events carry payloads and errors,
and the status and the agents' configuration name where the data lives — operator
data, not resources.
"""

from __future__ import annotations

from dataclasses import asdict

from flask import Blueprint, Response, request

from mldiag.domain.errors import InvalidArgument
from mldiag.entrypoints.handlers import EVENT_HANDLERS
from mldiag.entrypoints.http.rest import json_body, ok, services
from mldiag.services.capture import agents
from mldiag.services.operator import archive

blueprint = Blueprint("operator", __name__, url_prefix="/v1alpha")


@blueprint.get("/events")
def list_events() -> Response:
    query = archive.parse(archive.EventQuery, request.args.to_dict())
    return ok({"events": [record.to_json_dict() for record in archive.list_events(services(), query)]})


@blueprint.get("/events/<path:event>")
def get_event(event: str) -> Response:
    return ok(archive.show_event(services(), event))


@blueprint.post("/events:replay")
def replay_events() -> Response:
    replay = archive.parse(archive.ReplayRequest, json_body())
    return ok({"results": [asdict(result) for result in archive.replay(services(), replay, EVENT_HANDLERS)]})


@blueprint.post("/events:prune")
def prune_events() -> Response:
    return ok({"pruned": services().events.prune()})


@blueprint.get("/deadLetters")
def dead_letters() -> Response:
    raw_limit = request.args.get("limit", "100")
    try:
        limit = int(raw_limit)
    except ValueError:
        raise InvalidArgument(f"{raw_limit!r} is not a number", field="limit") from None
    return ok({"deadLetters": archive.dead_letters(services(), limit)})


@blueprint.get("/status")
def status() -> Response:
    return ok(archive.status(services()))


@blueprint.get("/agentConfig")
def agent_config() -> Response:
    return ok(agents.agent_config(services().settings))
