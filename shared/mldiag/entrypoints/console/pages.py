"""``/ui``: the web console, server-rendered pages over the same services as the API.

Pages: the runs of this deployment's location, a run (its targets, continuous
profiling, sessions, a chart of their step time and health, and monitored
events), a session (its targets' phases, tracer levels, analysis and links),
two sessions of a run compared side by side (:mod:`mldiag.analysis.regression`), and the
fleet: runs ranked by the accelerator time they lost over a window, split by cause
(``?since=7d``, ``?label=team=infra``; :func:`mldiag.services.fleet.top_waste`). Forms post to the capture, share
and re-analysis services and answer with a redirect back to the page (or the page with
the error, when the service refused). A URL names a run by its id or by a
display name one run has, as the CLI does. The sessions table of a run refreshes
itself while a capture or an analysis is under way (``console.js`` fetches
``.../sessions``, the same table rendered alone).

Reports are served from the bucket by routes that can only name the
``summary.html`` or ``analysis.json`` a stored session's analysis (its latest,
or one of its earlier analyses) recorded under ``<session folder>/mldiag/``,
with a sandboxing Content-Security-Policy: a report holds strings from the
profile and must not run as the console's origin.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, Response, current_app, g, redirect, render_template, request, url_for
from werkzeug.datastructures import MultiDict

from mldiag.domain.errors import InvalidArgument, MldiagError, NotFound, ResourceExhausted, Unauthenticated
from mldiag.domain.names import SESSIONS, LocationName, RunName, is_id, parse_run
from mldiag.domain.resources import (
    AnalysisState,
    AnalysisStatus,
    DeviceTracerLevel,
    HostTracerLevel,
    Kind,
    ProfilerSession,
    ProfilerTarget,
    PythonTracerLevel,
    RunPhase,
    SessionPhase,
)
from mldiag.domain.types import parse_duration
from mldiag.entrypoints.console import security
from mldiag.entrypoints.console.charts import fleet_ranking, step_time_chart
from mldiag.entrypoints.console.formatting import FILTERS
from mldiag.entrypoints.http.auth import Guard
from mldiag.entrypoints.http.rest import services
from mldiag.services import fleet
from mldiag.services.capture import requests as capture_requests
from mldiag.services.resources import comparison, reanalysis, sessions
from mldiag.services.resources.listing import ListRequest, list_page
from mldiag.services.resources.runs import find_named

blueprint = Blueprint("ui", __name__, url_prefix="/ui", template_folder="templates",
                      static_folder="static")
RUN = "/runs/<id:run>"
SESSION = RUN + "/sessions/<id:session>"
RUNS_PER_PAGE = 25
SESSIONS_PER_PAGE = 50
EVENTS_PER_RUN = 50
FLEET_RUNS_SHOWN = 50
FLEET_WINDOWS = ("1d", "7d", "30d", "90d")
DEFAULT_FLEET_WINDOW = "7d"
MAX_TARGETS_SHOWN = 1000
MAX_REPORT_BYTES = 32 * 1024 * 1024
REPORT_FILES = {"summary.html": "text/html; charset=utf-8", "analysis.json": "application/json"}
REPORT_FILE = "/report/<any('summary.html', 'analysis.json'):file>"
_ANALYSING = (AnalysisState.PENDING, AnalysisState.RUNNING)
_SIGN_IN_THROTTLE = "mldiag.entrypoints.console.sign_in_throttle"
SHARE_TTLS = {"1 hour": timedelta(hours=1), "1 day": timedelta(days=1), "7 days": timedelta(days=7)}
DEFAULT_SHARE_TTL = "1 day"
_TRACER_LEVELS = {  # the capture form's choices: every level but UNSPECIFIED
    field: [level for level in levels if not level.value.endswith("_UNSPECIFIED")]
    for field, levels in (("hostTracerLevel", HostTracerLevel), ("deviceTracerLevel", DeviceTracerLevel),
                          ("pythonTracerLevel", PythonTracerLevel))
}
NOTICES = {
    "capture": "Capture requested: session {session}. Its targets' phases update below.",
    "snapshot": "Snapshot requested: session {session}.",
    "continuous-started": "Continuous profiling is starting on the selected targets.",
    "continuous-stopped": "Continuous profiling is stopping.",
    "analysis": "Analysis requested: session {session}. Its state updates below.",
}
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


@blueprint.record_once
def _set_up(state: Any) -> None:
    state.app.jinja_env.filters.update(FILTERS)
    state.app.extensions[_SIGN_IN_THROTTLE] = security.SignInThrottle()


# --- credentials, forgery checks and headers -------------------------------------


def _auth() -> security.ConsoleAuth:
    return security.ConsoleAuth(Guard(services().settings))


@blueprint.before_request
def screen() -> None:
    g.csrf_token = request.cookies.get(security.CSRF_COOKIE) or security.new_csrf_token()
    g.console_auth = auth = _auth()
    authorization = request.headers.get("Authorization", "")
    auth.check_read(authorization)
    g.may_act = auth.may_act(authorization, request.cookies.get(security.SIGN_IN_COOKIE, ""))
    if request.method == "POST":
        security.check_form_origin(request.cookies.get(security.CSRF_COOKIE, ""),
                                   request.form.get(security.CSRF_FIELD, ""),
                                   request.headers.get("Sec-Fetch-Site", ""))


@blueprint.after_request
def protect(response: Response) -> Response:
    if "csrf_token" in g and request.cookies.get(security.CSRF_COOKIE) != g.csrf_token:
        response.set_cookie(security.CSRF_COOKIE, g.csrf_token, httponly=True, samesite="Strict",
                            secure=request.is_secure, path=blueprint.url_prefix)
    response.headers.setdefault("Content-Security-Policy", PAGE_POLICY)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    if request.endpoint != "ui.static":
        response.headers["Cache-Control"] = "no-store"  # pages carry the form token and live state
    return response


@blueprint.app_context_processor
def page_context() -> dict[str, Any]:
    settings = services().settings
    return {
        "csrf_field": security.CSRF_FIELD,
        "csrf_token": g.get("csrf_token", ""),
        "may_act": g.get("may_act", False),
        "auth_mode": g.console_auth.mode if "console_auth" in g else "open",
        "project": settings.project,
        "location": settings.location,
    }


@blueprint.errorhandler(MldiagError)
def show_error(error: MldiagError) -> tuple[str, int]:
    # Named ``problem``, not ``error``: the base layout would show an ``error`` again in its alert box.
    return render_template("console/error.html", problem=error, code=error.http_code,
                           sign_in=isinstance(error, Unauthenticated)), error.http_code


def _require_action_rights() -> None:
    g.console_auth.check_action(request.headers.get("Authorization", ""),
                                request.cookies.get(security.SIGN_IN_COOKIE, ""))


# --- reads -----------------------------------------------------------------------


def _location() -> LocationName:
    settings = services().settings
    return LocationName(settings.project, settings.location)


def _run_name(run: str) -> RunName:
    """The run the URL names: its id, or a display name one run has (as the CLI reads a run)."""
    return parse_run(find_named(services(), _location(), run).name)


def _targets(run_name: str) -> list[ProfilerTarget]:
    return services().targets.list(run_name, page_size=MAX_TARGETS_SHOWN).items


def home() -> Response:
    """``/`` of the control plane: where a person opening its URL wants to be."""
    return redirect(url_for("ui.runs"))


@blueprint.get("/")
def runs() -> str:
    phase = request.args.get("phase", "")
    phases = [p.value for p in RunPhase if p is not RunPhase.RUN_PHASE_UNSPECIFIED]
    if phase not in phases:
        phase = ""
    page = list_page(services().runs, str(_location()), ListRequest(
        filter=f"runPhase = {phase}" if phase else "", page_size=RUNS_PER_PAGE,
        page_token=request.args.get("page", "")))
    return render_template("console/runs.html", runs=page.items, next_page=page.next_page_token,
                           targets={run.name: _targets(run.name) for run in page.items},
                           phase=phase, phases=phases)


@blueprint.get("/fleet")
def fleet_page() -> str:
    """Runs by the accelerator time they lost in the window (``since``), only those with ``label`` (key=value)."""
    since = request.args.get("since", DEFAULT_FLEET_WINDOW).strip()
    label = request.args.get("label", "").strip()
    try:
        window = parse_duration(since)
    except ValueError as error:
        raise InvalidArgument(str(error), field="since") from None
    answer = fleet.top_waste(services(), window, label, FLEET_RUNS_SHOWN)
    return render_template("console/fleet.html", ranking=fleet_ranking(answer, fleet.LOST_CAUSES), since=since,
                           label=label, windows=FLEET_WINDOWS, dialect=answer["dialect"])


def _sessions_context(run_name: str) -> dict[str, Any]:
    """The run's sessions table: a page of sessions, and how many are still capturing or being analysed."""
    page = list_page(services().sessions, run_name, ListRequest(
        page_size=SESSIONS_PER_PAGE, page_token=request.args.get("sessions_page", "")))
    busy = sum(1 for s in page.items if s.session_phase is SessionPhase.ACTIVE or s.analysis.state in _ANALYSING)
    return {"sessions": page.items, "next_sessions_page": page.next_page_token, "busy": busy}


def _render_run(run: str, *, error: MldiagError | None = None, form: MultiDict | None = None) -> tuple[str, int]:
    run_name = _run_name(run)
    loaded = services().runs.get(str(run_name))
    events = list_page(services().monitored_events, str(run_name), ListRequest(page_size=EVENTS_PER_RUN)).items
    listed = _sessions_context(str(run_name))
    analysed = [s.id for s in listed["sessions"] if s.analysis.state is AnalysisState.DONE]
    return render_template(
        "console/run.html", run=loaded, targets=_targets(str(run_name)), events=events, notice=_notice(run_name),
        error=error, form=form or MultiDict(), levels=_TRACER_LEVELS, chart=step_time_chart(listed["sessions"]),
        analysed=analysed, **listed,
    ), error.http_code if error else 200


@blueprint.get(RUN)
def run(run: str) -> tuple[str, int]:
    return _render_run(run)


@blueprint.get(RUN + "/sessions")
def run_sessions(run: str) -> str:
    """The run's sessions table alone: what the run page fetches to refresh it."""
    run_name = _run_name(run)
    loaded = services().runs.get(str(run_name))
    return render_template("console/_sessions.html", run=loaded, **_sessions_context(str(run_name)))


@blueprint.get(RUN + "/compare")
def compare(run: str) -> str:
    """Two of the run's sessions side by side: the candidate judged against the baseline, as ``mldiag compare``."""
    run_name = _run_name(run)
    loaded = services().runs.get(str(run_name))
    baseline, candidate = request.args.get("baseline", ""), request.args.get("candidate", "")
    if not is_id(baseline) or not is_id(candidate):
        raise InvalidArgument("choose two sessions of the run to compare")
    compared = comparison.compare_sessions(services(), str(run_name.child(SESSIONS, baseline)),
                                           str(run_name.child(SESSIONS, candidate)))
    return render_template("console/compare.html", run=loaded, baseline=baseline, candidate=candidate,
                           verdict=compared.verdict)


def _render_session(run: str, session: str, *, error: MldiagError | None = None,
                    share: sessions.ShareLink | None = None) -> tuple[str, int]:
    run_name = _run_name(run)
    loaded_run = services().runs.get(str(run_name))
    loaded = services().sessions.get(str(run_name.child(SESSIONS, session)))
    return render_template("console/session.html", run=loaded_run, session=loaded, error=error, share=share,
                           ttls=list(SHARE_TTLS), default_ttl=DEFAULT_SHARE_TTL), error.http_code if error else 200


@blueprint.get(SESSION)
def session(run: str, session: str) -> tuple[str, int]:
    return _render_session(run, session)


@blueprint.get(SESSION + REPORT_FILE)
def report(run: str, session: str, file: str) -> Response:
    """The session's latest report file: what its current analysis recorded."""
    stored = services().sessions.get(str(_run_name(run).child(SESSIONS, session)))
    if not stored.analysis.report_uri:
        raise NotFound(f"session {session} has no report yet (analysis {stored.analysis.state.value})")
    return _report_file(stored, stored.analysis, file)


@blueprint.get(SESSION + "/earlier/<generation_set>" + REPORT_FILE)
def earlier_report(run: str, session: str, generation_set: str, file: str) -> Response:
    """A report file of an earlier analysis, of files a rerun replaced since."""
    stored = services().sessions.get(str(_run_name(run).child(SESSIONS, session)))
    kept = stored.earlier_analysis(generation_set)
    if kept is None or not kept.report_uri:
        raise NotFound(f"session {session} has no earlier report of the files {generation_set}")
    return _report_file(stored, kept, file)


def _report_file(stored: ProfilerSession, analysis: AnalysisStatus, file: str) -> Response:
    """``file`` as the analysis recorded it, read only from under ``<session folder>/mldiag/``."""
    uri = analysis.report_uri if file == "summary.html" else analysis.analysis_uri
    reports = f"{stored.storage_folder_uri.rstrip('/')}/mldiag/"
    if not stored.storage_folder_uri or not uri.startswith(reports):
        raise NotFound(f"session {stored.id} has no {file} stored with its report")
    content = services().blobs.read_bytes(uri, max_bytes=MAX_REPORT_BYTES)
    response = Response(content, content_type=REPORT_FILES[file])
    response.headers["Content-Security-Policy"] = security.REPORT_POLICY
    return response


# --- actions ---------------------------------------------------------------------


def _notice(run_name: RunName) -> str:
    """The confirmation a redirect after an action asked for; only for sessions that exist."""
    template = NOTICES.get(request.args.get("done", ""))
    if template is None:
        return ""
    session_id = request.args.get("session", "")
    if "{session}" in template:
        try:
            found = services().sessions.find(str(run_name.child(SESSIONS, session_id)))
        except MldiagError:
            found = None
        if found is None:
            return ""
    return template.format(session=session_id)


def _act(render_on_error: Callable[[MldiagError], tuple[str, int]], work: Callable[[], Response]) -> Any:
    """Run an action for a signed-in user; a refusal by the service re-renders the page with the reason."""
    _require_action_rights()
    try:
        return work()
    except MldiagError as error:
        return render_on_error(error)


def _capture(run: str, kind: Kind, done: str) -> Any:
    """Either capture form: on demand (session id, duration, tracer levels) or snapshot (fallback)."""
    form = request.form

    def work() -> Response:
        body: dict[str, Any] = {"kind": kind.value, "profilerTargets": form.getlist("target")}
        body.update({field: form[field] for field in ("duration", "fallback", *_TRACER_LEVELS) if form.get(field)})
        operation = capture_requests.capture(services(), _run_name(run), form.get("session_id", "").strip(),
                                    capture_requests.parse(capture_requests.CaptureRequest, body))
        session_id = operation.metadata.target.rsplit("/", 1)[-1]
        return redirect(url_for("ui.run", run=run, done=done, session=session_id, _anchor="sessions"), 303)

    return _act(lambda error: _render_run(run, error=error, form=form), work)


@blueprint.post(RUN + "/capture")
def capture_on_demand(run: str) -> Any:
    return _capture(run, Kind.KIND_ON_DEMAND, "capture")


@blueprint.post(RUN + "/snapshot")
def snapshot(run: str) -> Any:
    return _capture(run, Kind.KIND_SNAPSHOT, "snapshot")


@blueprint.post(RUN + "/continuous-profiling/start")
def start_continuous(run: str) -> Any:
    form = request.form

    def work() -> Response:
        body = {"profilerTargets": form.getlist("target")}
        if form.get("deviceTracerLevel"):
            body["deviceTracerLevel"] = form["deviceTracerLevel"]
        capture_requests.start_continuous(services(), _run_name(run), capture_requests.parse(capture_requests.ContinuousRequest, body))
        return redirect(url_for("ui.run", run=run, done="continuous-started", _anchor="profiling"), 303)

    return _act(lambda error: _render_run(run, error=error, form=form), work)


@blueprint.post(RUN + "/continuous-profiling/stop")
def stop_continuous(run: str) -> Any:
    def work() -> Response:
        capture_requests.stop_continuous(services(), _run_name(run))
        return redirect(url_for("ui.run", run=run, done="continuous-stopped", _anchor="profiling"), 303)

    return _act(lambda error: _render_run(run, error=error), work)


@blueprint.post(SESSION + "/share")
def share(run: str, session: str) -> Any:
    """A signed link to the report; shown on the page (never put in a URL of ours)."""
    ttl = SHARE_TTLS.get(request.form.get("ttl", ""), SHARE_TTLS[DEFAULT_SHARE_TTL])

    def work() -> Any:
        link = sessions.share(services(), _run_name(run).child(SESSIONS, session), ttl)
        return _render_session(run, session, share=link)

    return _act(lambda error: _render_session(run, session, error=error), work)


@blueprint.post(SESSION + "/analyze")
def reanalyze(run: str, session: str) -> Any:
    """Analyse the session's files once more (a failed analysis, or a newer analyst)."""
    def work() -> Response:
        reanalysis.reanalyze(services(), _run_name(run).child(SESSIONS, session))
        return redirect(url_for("ui.run", run=run, done="analysis", session=session, _anchor="sessions"), 303)

    return _act(lambda error: _render_session(run, session, error=error), work)


# --- signing in ------------------------------------------------------------------


def _safe_next(target: str) -> str:
    """Only a path of the console: never another host (``//evil``) or scheme."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith(blueprint.url_prefix + "/") or "\\" in target:
        return url_for("ui.runs")
    return target


@blueprint.route("/sign-in", methods=["GET", "POST"])
def sign_in() -> Any:
    next_page = _safe_next(request.values.get("next", ""))
    if request.method == "GET":
        return render_template("console/sign_in.html", next_page=next_page)
    throttle: security.SignInThrottle = current_app.extensions[_SIGN_IN_THROTTLE]
    client = request.remote_addr or ""
    try:
        throttle.check(client)
        cookie, ttl = g.console_auth.sign_in(request.form.get("token", ""))
    except ResourceExhausted as error:
        page = render_template("console/sign_in.html", next_page=next_page, error=error)
        return page, error.http_code, {"Retry-After": str(error.retry_after_s)}
    except MldiagError as error:
        throttle.failed(client)
        return render_template("console/sign_in.html", next_page=next_page, error=error), error.http_code
    response = redirect(next_page, 303)
    response.set_cookie(security.SIGN_IN_COOKIE, cookie, max_age=ttl, httponly=True, samesite="Strict",
                        secure=request.is_secure, path=blueprint.url_prefix)
    return response


@blueprint.post("/sign-out")
def sign_out() -> Response:
    response = redirect(url_for("ui.runs"), 303)
    response.delete_cookie(security.SIGN_IN_COOKIE, path=blueprint.url_prefix, httponly=True, samesite="Strict")
    return response
