"""``/v1alpha``: runs, profiler targets and sessions, monitored events and operations,
shaped like Google's API (resource names, ``update_mask``, etags, paging, operations)."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

from flask import Blueprint, Response, g

from mldiag.analysis.regression import Thresholds
from mldiag.domain.errors import InvalidArgument
from mldiag.domain.names import EVENTS, SESSIONS, TARGETS, LocationName, RunName, parse_child
from mldiag.domain.resources import Resource
from mldiag.domain.types import parse_duration
from mldiag.domain.clock import format_timestamp
from mldiag.entrypoints.http.rest import json_body, list_request, ok, query, query_bool, services
from mldiag.services.dependencies import Services
from mldiag.services.repository import Page, Repository
from mldiag.services.resources import comparison, operations, reanalysis, runs, sessions, targets
from mldiag.services.resources.listing import list_page

blueprint = Blueprint("v1alpha", __name__, url_prefix="/v1alpha/projects/<id:project>/locations/<id:location>")
RUNS = "/machineLearningRuns"
RUN = RUNS + "/<id:run>"


def _location(project: str, location: str) -> LocationName:
    return LocationName(project, location)


def _run(project: str, location: str, run: str) -> RunName:
    return _location(project, location).run(run)


def _existing_run(project: str, location: str, run: str) -> RunName:
    """The run's name; NOT_FOUND when there is no such run (an empty list would hide a mistyped run)."""
    name = _run(project, location, run)
    services().runs.get(str(name))
    return name


def _done(target: str, verb: str, resource: Resource | None) -> Response:
    response = resource.to_json_dict() if resource is not None else None
    return ok(operations.completed(services(), target, verb, response).to_json_dict())


def _page(page: Page, collection: str) -> Response:
    payload: dict = {collection: [item.to_json_dict() for item in page.items]}
    if page.next_page_token:
        payload["nextPageToken"] = page.next_page_token
    return ok(payload)


def _list(repository: Repository, parent: str) -> Response:
    return _page(list_page(repository, parent, list_request()), repository.collection)


# --- runs ---------------------------------------------------------------------


@blueprint.post(RUNS)
def create_run(project: str, location: str) -> Response:
    parent = _location(project, location)
    run = runs.create(services(), parent, query("machine_learning_run_id"), json_body(),
                      registered_by=g.caller.principal)
    return _done(run.name, "create", run)


@blueprint.get(RUNS)
def list_runs(project: str, location: str) -> Response:
    return _list(services().runs, str(_location(project, location)))


@blueprint.get(RUN)
def get_run(project: str, location: str, run: str) -> Response:
    return ok(services().runs.get(str(_run(project, location, run))).to_json_dict())


@blueprint.patch(RUN)
def update_run(project: str, location: str, run: str) -> Response:
    name = _run(project, location, run)
    updated = runs.update(services(), name, json_body(), query("update_mask"),
                          allow_missing=query_bool("allow_missing"), registered_by=g.caller.principal)
    return _done(updated.name, "update", updated)


@blueprint.delete(RUN)
def delete_run(project: str, location: str, run: str) -> Response:
    name = _run(project, location, run)
    runs.delete(services(), name, etag=query("etag"))
    return _done(str(name), "delete", None)


# --- profiler targets -----------------------------------------------------------


@blueprint.post(RUN + "/" + TARGETS)
def create_target(project: str, location: str, run: str) -> Response:
    target = targets.create(services(), _run(project, location, run), query("profiler_target_id"), json_body())
    return _done(target.name, "create", target)


@blueprint.delete(RUN + "/" + TARGETS + "/<id:target>")
def delete_target(project: str, location: str, run: str, target: str) -> Response:
    name = str(_run(project, location, run).child(TARGETS, target))
    targets.delete(services(), name, etag=query("etag"))
    return _done(name, "delete", None)


# --- profiler sessions ----------------------------------------------------------


@blueprint.post(RUN + "/" + SESSIONS)
def create_session(project: str, location: str, run: str) -> Response:
    session = sessions.create(services(), _run(project, location, run), query("profiler_session_id"), json_body())
    return _done(session.name, "create", session)


@blueprint.patch(RUN + "/" + SESSIONS + "/<id:session>")
def update_session(project: str, location: str, run: str, session: str) -> Response:
    name = _run(project, location, run).child(SESSIONS, session)
    updated = sessions.update(services(), name, json_body(), query("update_mask"))
    return _done(updated.name, "update", updated)


@blueprint.post(RUN + "/" + SESSIONS + "/<id:session>:share")
def share_session(project: str, location: str, run: str, session: str) -> Response:
    name = _run(project, location, run).child(SESSIONS, session)
    raw_ttl = json_body().get("ttl", "3600s")
    try:
        ttl = parse_duration(raw_ttl)
    except ValueError as error:
        raise InvalidArgument(str(error), field="ttl") from None
    link = sessions.share(services(), name, ttl)
    return ok({
        "url": link.url,
        "expireTime": format_timestamp(link.expire_time),
        "reportUri": link.report_uri,
        "dashboardUri": link.dashboard_uri,
    })


@blueprint.post(RUN + "/" + SESSIONS + "/<id:session>:analyze")
def analyze_session(project: str, location: str, run: str, session: str) -> Response:
    name = _run(project, location, run).child(SESSIONS, session)
    return ok(reanalysis.reanalyze(services(), name).to_json_dict())


def _fraction(name: str, default: float) -> float:
    raw = query(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgument(f"{raw!r} is not a number (a fraction: 0.05 is 5 %)", field=name) from None
    if not 0 <= value < 100:
        raise InvalidArgument(f"{raw!r} is not a fraction from 0 up to 100", field=name)
    return value


@blueprint.get(RUN + "/" + SESSIONS + "/<id:session>:compare")
def compare_session(project: str, location: str, run: str, session: str) -> Response:
    """The session judged against ``baseline`` (an id in the same run, or a session's full name)."""
    run_name = _run(project, location, run)
    baseline = query("baseline")
    if not baseline:
        raise InvalidArgument("baseline is required: the session to compare with", field="baseline")
    baseline_name = parse_child(baseline, SESSIONS) if "/" in baseline else run_name.child(SESSIONS, baseline)
    defaults = Thresholds()
    thresholds = Thresholds(
        max_step_time_regression=_fraction("max_step_time_regression", defaults.max_step_time_regression),
        max_memory_regression=_fraction("max_memory_regression", defaults.max_memory_regression))
    compared = comparison.compare_sessions(services(), str(baseline_name), str(run_name.child(SESSIONS, session)),
                                           thresholds)
    return ok(compared.to_json_dict())


# --- reads of a run's children, and operations ---------------------------------


def _add_child_reads(collection: str, repository: Callable[[Services], Repository]) -> None:
    """``GET .../{collection}`` (list) and ``GET .../{collection}/{id}`` for one kind of child of a run."""

    def list_children(project: str, location: str, run: str) -> Response:
        parent = _existing_run(project, location, run)
        return _list(repository(services()), str(parent))

    def get_child(project: str, location: str, run: str, child: str) -> Response:
        name = _existing_run(project, location, run).child(collection, child)
        return ok(repository(services()).get(str(name)).to_json_dict())

    blueprint.add_url_rule(f"{RUN}/{collection}", f"list_{collection}", list_children, methods=["GET"])
    blueprint.add_url_rule(f"{RUN}/{collection}/<id:child>", f"get_{collection}", get_child, methods=["GET"])


_add_child_reads(TARGETS, attrgetter("targets"))
_add_child_reads(SESSIONS, attrgetter("sessions"))
_add_child_reads(EVENTS, attrgetter("monitored_events"))


@blueprint.get("/operations/<id:operation>")
def get_operation(project: str, location: str, operation: str) -> Response:
    name = _location(project, location).operation(operation)
    return ok(operations.get(services(), name).to_json_dict())
