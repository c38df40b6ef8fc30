"""``mldiag demo``: one training job captured in all four ways, each capture analysed.

Against a control plane (``--api-url``, or a ``mldiag up`` the demo starts over a
fresh data dir and stops at the end), it starts :mod:`mldiag.local.demo.workload` —
a JAX job with the official SDK in self-hosted mode and a profiler server —
registers its profiler as a target, and walks through:

1. programmatic: the job's own ``xprof()`` start/stop; the files register as a session;
2. on demand: ``profiler-session capture``;
3. snapshot: continuous profiling on, a snapshot, off. On a host without TPUs the
   snapshot buffer is empty, so ``--fallback on-demand`` takes a real trace instead,
   and the demo says so;
4. automatic: the job reports step times to the metrics ingest and then sleeps
   30 % longer per step; the degradation analyzer opens a monitored event,
   ``on_alert`` captures, and the event closes once the job recovers.

It ends with each session's kind, state, analysis and report. Every call is
the public API; the equivalent CLI command is shown with each step.

Three numbers describe the automatic step, and each is labelled with what it
measures: the slowdown the demo injects (host sleep per step), the step-time
change the degradation analyzer measured over its recent window when it opened
the event (that window still holds steps from before the slowdown), and the
step time XProf measured in the captured session against the session the
analysis compared it with.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mldiag.client.api import ApiClient, ApiError, child_path, location_path, run_path
from mldiag.config import sdk_capability
from mldiag.domain.degradation import DetectorParams
from mldiag.domain.resources import AnalysisState, Kind, ProfilerSession, SessionPhase
from mldiag.local.demo.processes import DemoError, LocalControlPlane, Workload
from mldiag.local.demo.workload import PAUSE_S, SLOWDOWN

T = TypeVar("T")

SETTLE_SECONDS = 2.0  # the demo's own control plane: a programmatic session is complete once written
START_TIMEOUT_S = 120  # JAX and XProf take a while to import on a busy machine
STEP_TIMEOUT_S = 90
POLL_INTERVAL_S = 0.3
CAPTURE_DURATION = "1s"
HEALTHY_STEPS = 60  # enough for the analyzer's warm-up (5 skipped + 30 baseline + a 7-point window)
TARGET = "worker-0"
SHARE_TTL = "3600s"
FINISHED_ANALYSIS = {AnalysisState.DONE, AnalysisState.FAILED}
AUTOMATIC_STEP = ("4/4 automatic: the workload slowed down, the degradation analyzer opened an event, "
                  "on_alert captured it")


@dataclass(frozen=True)
class DemoSettings:
    work_dir: Path  # logs, and the data of the demo's own control plane
    api_url: str = ""  # empty: start `mldiag up`
    token: str = ""
    gcs_path: Path | None = None  # the local bucket folder of the control plane at api_url
    project: str = "local-project"
    location: str = "local"
    analysis_timeout_s: float = 120.0


@dataclass
class SessionSummary:
    mode: str
    session: ProfilerSession
    note: str = ""
    report: str = ""  # the report's local path, or a share link
    what_changed: str = ""  # the analysis's comparison with an earlier session, labelled

    def to_json(self) -> dict[str, Any]:
        analysis = self.session.analysis
        return {"mode": self.mode, "session": self.session.name, "kind": self.session.kind.value,
                "state": self.session.session_phase.value, "autoCaptured": self.session.auto_captured,
                "monitoredEvents": self.session.monitored_events, "analysisState": analysis.state.value,
                "health": analysis.health.value if analysis.health else "", "report": self.report,
                "topFinding": analysis.top_finding, "whatChanged": self.what_changed, "note": self.note}


def injected_slowdown(step: int) -> str:
    """What the demo did to the workload: host time added to every step."""
    return (f"injected: from step {step} the workload sleeps {SLOWDOWN - 1:.0%} longer per step, in host time "
            f"({PAUSE_S * 1e3:.0f} → {PAUSE_S * SLOWDOWN * 1e3:.0f} ms, beside a few ms of compute)")


def detected_slowdown(event: dict[str, Any]) -> str:
    """What the degradation analyzer measured when it opened ``event``, and over which steps."""
    return (f"measured by the degradation analyzer: the level of the last {DetectorParams().window_points} "
            "reported step times (some from before the slowdown) against its baseline, the median of the healthy "
            f"ones before them: {event['analyzerReports'][0]['details']}; it opened event "
            f"{event['name'].rsplit('/', 1)[-1]}")


def analysed_change(comparison: dict[str, Any] | None) -> str:
    """What the analysis measured in the captured steps against the session it compared them with."""
    headline = (comparison or {}).get("headline") or []
    if not headline:
        return ""
    first = headline[0]
    return f"measured by XProf in the captured session's steps: {first[:1].lower()}{first[1:]}"


def read_what_changed(bucket_folder: Path, session: ProfilerSession) -> str:
    """:func:`analysed_change` of the session's ``analysis.json`` in the local bucket folder ('' without one)."""
    uri = session.analysis.analysis_uri
    if not uri:
        return ""
    try:
        analysis = json.loads((bucket_folder / uri.removeprefix("gs://").split("/", 1)[1]).read_text("utf-8"))
    except (OSError, ValueError):
        return ""
    return analysed_change(analysis.get("comparison"))


class _Steps:
    """Shows each step with a spinner while it runs, then a tick, its time, and what it found."""

    def __init__(self, console: Console):
        self.console = console

    @contextlib.contextmanager
    def step(self, title: str, *commands: str) -> Iterator[list[str]]:
        started = time.monotonic()
        details: list[str] = []
        try:
            with self.console.status(f"{title}…"):
                yield details
        except BaseException:
            self.console.print(f"[red]✗[/red] {escape(title)}")
            raise
        self.console.print(f"[green]✓[/green] {escape(title)} [dim]({time.monotonic() - started:.1f} s)[/dim]")
        for command in commands:
            self.console.print(f"    [cyan]$ {escape(command)}[/cyan]", highlight=False)
        for detail in details:
            self.console.print(f"    {escape(detail)}", highlight=False)


def _poll(what: str, probe: Callable[[], T | None], timeout_s: float = STEP_TIMEOUT_S) -> T:
    deadline = time.monotonic() + timeout_s
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)
    return found


class _Tour:
    """The four capture modes on one run of the workload."""

    def __init__(self, client: ApiClient, settings: DemoSettings, workload: Workload, run: str, console: Console):
        self.client, self.settings, self.workload, self.run = client, settings, workload, run
        self.steps = _Steps(console)
        self.summaries: list[SessionSummary] = []

    # -- the API --------------------------------------------------------------------------

    def _run_path(self) -> str:
        return run_path(self.settings.project, self.settings.location, self.run)

    def _child(self, collection: str, child: str = "") -> str:
        return child_path(self.settings.project, self.settings.location, self.run, collection, child)

    def _session(self, session_id: str) -> ProfilerSession:
        return ProfilerSession.model_validate(self.client.call("GET", self._child("profilerSessions", session_id)))

    def _finish(self, operation: dict[str, Any]) -> dict[str, Any]:
        """Wait for a long-running operation; returns its per-target outcomes, or raises its error."""
        name = operation["name"]

        def done_operation() -> dict[str, Any] | None:
            current = self.client.call("GET", f"v1alpha/{name}")
            return current if current.get("done") else None

        done = operation if operation.get("done") else _poll(f"operation {name}", done_operation)
        if done.get("error"):
            raise DemoError(done["error"].get("message", "the operation failed"))
        return (done.get("response") or {}).get("targets", {})

    def _capture(self, session_id: str, **body: Any) -> dict[str, Any]:
        operation = self.client.call("POST", self._child("profilerSessions") + ":capture",
                                     params={"profilerSessionId": session_id},
                                     body={"duration": CAPTURE_DURATION, "profilerTargets": [TARGET], **body})
        return self._finish(operation)

    def _summarise(self, mode: str, session_id: str, note: str = "") -> None:
        self.summaries.append(SessionSummary(mode, self._session(session_id), note))

    # -- the steps ------------------------------------------------------------------------

    def register_target(self) -> None:
        with self.steps.step(f"Registered the workload's profiler server as target {TARGET}",
                             "mldiag agent  # what a node agent does on a real cluster") as details:
            self.client.call("POST", self._child("profilerTargets"), params={"profilerTargetId": TARGET},
                             body={"hostname": "127.0.0.1", "nodeIndex": 0,
                                   "profilerAddress": f"127.0.0.1:{self.workload.profiler_port}"})
            details.append(f"jax.profiler.start_server({self.workload.profiler_port}) in the workload")

    def programmatic(self) -> None:
        with self.steps.step("1/4 programmatic: the workload traced 10 steps with the SDK's xprof()",
                             'xprof().start(session_id="programmatic") … xprof().stop()  # in the workload'
                             ) as details:
            self.workload.send("profile programmatic 10")
            self.workload.wait_for("profiled", STEP_TIMEOUT_S)
            session = _poll("the profile to register as a session", lambda: self._find_session("programmatic"))
            found = ", found in the bucket" if session.kind is Kind.KIND_SCANNED else ""
            details.append(f"the files landed in {session.storage_folder_uri}; registration made it session "
                           f"'programmatic' ({session.kind.value}{found})")
        self._summarise("programmatic", "programmatic")

    def _find_session(self, session_id: str) -> ProfilerSession | None:
        try:
            return self._session(session_id)
        except ApiError as error:
            if str(error).startswith("NOT_FOUND"):
                return None
            raise

    def on_demand(self) -> None:
        with self.steps.step(
                "2/4 on demand: captured 1 s through the profiler server",
                f"mldiag profiler-session capture on-demand --machine-learning-run {self.run} "
                f"--duration {CAPTURE_DURATION}") as details:
            outcome = self._capture("on-demand")[TARGET]
            if outcome.get("state") != "SUCCEEDED":
                raise DemoError(f"the on-demand capture failed: {outcome.get('error', '')}")
            details.append(f"the workload's profiler server wrote {TARGET}.xplane.pb into the session folder")
        self._summarise("on-demand", "on-demand")

    def snapshot(self) -> None:
        note = ""
        with self.steps.step(
                "3/4 snapshot: continuous profiling on, a snapshot, off",
                f"mldiag machine-learning-run start-continuous-profiling {self.run}",
                f"mldiag profiler-session capture snapshot --machine-learning-run {self.run} --kind snapshot "
                f"--fallback on-demand --duration {CAPTURE_DURATION}",
                f"mldiag machine-learning-run stop-continuous-profiling {self.run}") as details:
            self._finish(self.client.call("POST", self._run_path() + ":startContinuousProfiling",
                                          body={"profilerTargets": [TARGET]}))
            try:
                outcome = self._capture("snapshot", kind="snapshot", fallback="on-demand")[TARGET]
            finally:
                self._finish(self.client.call("POST", self._run_path() + ":stopContinuousProfiling", body={}))
            if outcome.get("state") != "SUCCEEDED":
                raise DemoError(f"the snapshot failed: {outcome.get('error', '')}")
            if outcome.get("note"):
                note = outcome["note"]
                details.append(note)
        self._summarise("snapshot", "snapshot", note)

    def automatic(self) -> None:
        events = self._child("monitoredEvents")
        with self.steps.step(
                AUTOMATIC_STEP,
                f"mldiag machine-learning-run set-auto-capture {self.run} --duration {CAPTURE_DURATION}",
                f"POST …/machineLearningRuns/{self.run}:reportMetrics  # step times, from the workload",
                f"mldiag monitored-events list --machine-learning-run {self.run}") as details:
            self.client.call("POST", self._run_path() + ":setAutoCapture",
                             body={"enabled": True, "cooldown": "600s", "duration": CAPTURE_DURATION,
                                   "maxPerHour": 4})
            self.workload.send(f"degrade {HEALTHY_STEPS}")
            slowed = self.workload.wait_for("slowed", STEP_TIMEOUT_S)
            details.append(injected_slowdown(slowed["step"]))
            event = _poll("the degradation analyzer to open an event",
                          lambda: next(iter(self.client.list_all(events, "monitoredEvents")), None))
            details.append(detected_slowdown(event))
            event = _poll("on_alert's capture", lambda: self._captured(event["name"]))
            session_id = event["profilerSessions"][0].rsplit("/", 1)[-1]
            _poll("the automatic capture to finish", lambda: self._captured_session(session_id))
            details.append(f"on_alert captured session '{session_id}' (autoCaptured, linked to the event)")
        with self.steps.step("4/4 automatic: the workload recovered and the event closed") as details:
            self.workload.send("recover")
            closed = _poll("the event to close", lambda: self._closed(event["name"]))
            details.append(f"ended {closed['endTime']}: {closed['analyzerReports'][0]['details']}")
        self._summarise("automatic", session_id)

    def _captured(self, event_name: str) -> dict[str, Any] | None:
        event = self.client.call("GET", f"v1alpha/{event_name}")
        if event.get("profilerSessions"):
            return event
        failed = [s["reason"] for s in event.get("suppressions", []) if s["reason"].startswith("capture failed")]
        if failed:
            raise DemoError(f"the automatic capture was refused: {failed[-1]}")
        return None

    def _captured_session(self, session_id: str) -> ProfilerSession | None:
        session = self._find_session(session_id)
        if session is None or session.session_phase is SessionPhase.ACTIVE:
            return None
        if session.session_phase is SessionPhase.FAILED:
            errors = "; ".join(t.error for t in session.target_sessions.values())
            raise DemoError(f"the automatic capture failed: {errors}")
        return session

    def _closed(self, event_name: str) -> dict[str, Any] | None:
        event = self.client.call("GET", f"v1alpha/{event_name}")
        return event if event.get("endTime") else None

    def wait_for_analyses(self, timeout_s: float) -> None:
        """Refresh every summary until its analysis has finished (or the time is up)."""
        with self.steps.step("Every session analysed") as details:
            deadline = time.monotonic() + timeout_s
            while True:
                for summary in self.summaries:
                    if summary.session.analysis.state not in FINISHED_ANALYSIS:
                        summary.session = self._session(summary.session.id)
                waiting = [s for s in self.summaries if s.session.analysis.state not in FINISHED_ANALYSIS]
                if not waiting:
                    break
                if time.monotonic() > deadline:
                    states = ", ".join(f"{s.session.id}: {s.session.analysis.state.value}" for s in waiting)
                    raise DemoError(f"not every session was analysed within {timeout_s:.0f} s ({states})")
                time.sleep(POLL_INTERVAL_S)
            failed = [s.session.id for s in self.summaries if s.session.analysis.state is AnalysisState.FAILED]
            if failed:
                details.append(f"analysis failed for {', '.join(failed)}")

    def locate_reports(self, bucket_folder: Path, share: bool) -> None:
        """Point each summary at its report (a file in the local bucket, and a share link if asked) and
        at what its analysis found changed."""
        for summary in self.summaries:
            summary.what_changed = read_what_changed(bucket_folder, summary.session)
            uri = summary.session.analysis.report_uri
            if not uri:
                continue
            summary.report = str(bucket_folder / uri.removeprefix("gs://").split("/", 1)[1])
            if share:
                link = self.client.call("POST", self._child("profilerSessions", summary.session.id) + ":share",
                                        body={"ttl": SHARE_TTL})
                summary.report = link["url"]


def _check_run_is_visible(client: ApiClient, settings: DemoSettings, run: str) -> None:
    """The SDK registers runs where the control plane keeps them; the demo must look in the same place."""
    try:
        client.call("GET", run_path(settings.project, settings.location, run))
    except ApiError as error:
        if not str(error).startswith("NOT_FOUND"):
            raise
        raise DemoError(f"the SDK registered run {run}, but not in projects/{settings.project}/locations/"
                        f"{settings.location}: give the demo the --project and --location of the control plane "
                        "(its MLDIAG_PROJECT and MLDIAG_LOCATION)") from None


def run_demo(settings: DemoSettings, console: Console) -> list[SessionSummary]:
    """The whole demo; every process it started is stopped when it returns or raises."""
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    steps = _Steps(console)
    with contextlib.ExitStack() as stack:
        if settings.api_url:
            url, bucket_folder = settings.api_url, settings.gcs_path
            assert bucket_folder is not None, "give the local bucket folder of the control plane at api_url"
        else:
            with steps.step("Started mldiag up") as details:
                plane = stack.enter_context(LocalControlPlane(settings.work_dir / "data",
                                                              settings.work_dir / "mldiag-up.log",
                                                              SETTLE_SECONDS, START_TIMEOUT_S))
                url, bucket_folder = plane.url, plane.bucket_folder
                details.append(f"{url}, data in {settings.work_dir / 'data'}")
        client = ApiClient(url, settings.token)
        client.call("GET", location_path(settings.project, settings.location) + "/machineLearningRuns",
                    params={"pageSize": 1})  # reachable, and answering for this project and location
        name = time.strftime("demo-%Y%m%d-%H%M%S")
        capability = sdk_capability(settings.token, os.environ.get("MLDIAG_SDK_SECRET", ""))
        sdk_url = f"{url}/sdk/{capability}" if capability else url
        with steps.step(f"Started the training workload '{name}' (JAX, official SDK, self-hosted mode)",
                        f"DIAGON_BASE_URL={url}{'/sdk/<secret>' if capability else ''} python -m "
                        f"mldiag.local.demo.workload --name {name} --gcs-path {bucket_folder} …") as details:
            workload = stack.enter_context(Workload(
                name, sdk_url, f"{url}/{location_path(settings.project, settings.location)}/machineLearningRuns",
                bucket_folder, settings.token, settings.work_dir / "workload.log"))
            run = workload.wait_for("ready", START_TIMEOUT_S)["run"]
            _check_run_is_visible(client, settings, run)
            details.append(f"the SDK registered run {run}")
        tour = _Tour(client, settings, workload, run, console)
        tour.register_target()
        tour.programmatic()
        tour.on_demand()
        tour.snapshot()
        tour.automatic()
        with steps.step("The workload finished") as details:
            workload.stop()
            phase = client.call("GET", run_path(settings.project, settings.location, run)).get("runPhase")
            details.append(f"the SDK reported its end: run phase {phase}")
        tour.wait_for_analyses(settings.analysis_timeout_s)
        tour.locate_reports(bucket_folder, share=bool(settings.api_url))
        return tour.summaries


def print_summary(console: Console, summaries: list[SessionSummary]) -> None:
    """A table of the sessions, then each one's health, top finding and report (paths stay whole)."""
    table = Table("mode", "session", "kind", "state", "analysis", title="Sessions")
    for summary in summaries:
        row = summary.to_json()
        table.add_row(summary.mode, summary.session.id, row["kind"].removeprefix("KIND_"), row["state"],
                      row["analysisState"])
    console.print(table)
    for summary in summaries:
        analysis = summary.session.analysis
        verdict = f"{analysis.health.value}: " if analysis.health else ""
        console.print(f"[bold]{summary.mode}[/bold] {escape(verdict + (analysis.top_finding or '(no finding)'))}",
                      highlight=False)
        if summary.what_changed:
            console.print(f"  {escape(summary.what_changed)}", highlight=False)
        console.print(f"  {summary.report or '(no report)'}", soft_wrap=True, highlight=False)
