"""The console's forms call the capture and share services: what they create, and refusals shown on the page."""

from __future__ import annotations

import json

import pytest

from mldiag.config import ANALYSIS_REQUESTS, CAPTURE_REQUESTS
from mldiag.domain import AnalysisState, AnalysisStatus, HostFile, Kind, SessionPhase

from console_support import LOCATION, add_run, add_session, add_target

RUN = "/ui/runs/r1"


@pytest.fixture
def run(console):
    name = add_run(console.services, "r1")
    add_target(console.services, name, "host-0")
    add_target(console.services, name, "host-1", profiler_address="127.0.0.1:9998", node_index=1)
    return name


def _capture_messages(console) -> list[dict]:
    return [json.loads(m.data) for m in console.services.bus.published[CAPTURE_REQUESTS]]


def test_capture_on_demand_creates_the_session_and_asks_each_chosen_target(console, run):
    response = console.post(f"{RUN}/capture", {
        "duration": "1500ms", "target": ["host-1"], "hostTracerLevel": "HOST_TRACER_LEVEL_VERBOSE",
        "deviceTracerLevel": "DEVICE_TRACER_LEVEL_DISABLED", "pythonTracerLevel": "PYTHON_TRACER_LEVEL_ENABLED",
        "session_id": "from-the-console",
    }, page=RUN)

    assert response.status_code == 303
    assert response.headers["Location"] == "/ui/runs/r1?done=capture&session=from-the-console#sessions"
    session = console.services.sessions.get(f"{run}/profilerSessions/from-the-console")
    assert session.kind is Kind.KIND_ON_DEMAND and session.profiler_targets == ["host-1"]
    assert session.duration.total_seconds() == 1.5
    assert (session.host_tracer_level.name, session.device_tracer_level.name, session.python_tracer_level.name) == (
        "HOST_TRACER_LEVEL_VERBOSE", "DEVICE_TRACER_LEVEL_DISABLED", "PYTHON_TRACER_LEVEL_ENABLED")
    assert session.target_sessions["host-1"].session_phase is SessionPhase.ACTIVE
    assert [m["target"] for m in _capture_messages(console)] == ["host-1"]

    page = console.text(response.headers["Location"])
    assert "Capture requested: session from-the-console" in page and 'role="status"' in page


def test_no_target_ticked_captures_all_of_them(console, run):
    console.post(f"{RUN}/capture", {"duration": "1s", "session_id": "all"}, page=RUN)
    assert console.services.sessions.get(f"{run}/profilerSessions/all").profiler_targets == ["host-0", "host-1"]


def test_a_refused_capture_shows_the_reason_and_keeps_what_was_typed(console, run):
    response = console.post(f"{RUN}/capture", {"duration": "forever", "session_id": "keep-me"}, page=RUN)

    assert response.status_code == 400
    page = response.get_data(as_text=True)
    assert 'role="alert"' in page and "duration" in page and "not a duration" in page
    assert 'value="forever"' in page and 'value="keep-me"' in page
    assert _capture_messages(console) == []


def test_a_notice_only_names_a_session_that_exists(console, run):
    assert "Capture requested" not in console.text(f"{RUN}?done=capture&session=you-were-hacked")
    assert "Capture requested" not in console.text(f"{RUN}?done=capture&session=../../x")


def test_continuous_profiling_start_snapshot_and_stop(console, run):
    started = console.post(f"{RUN}/continuous-profiling/start", {"target": ["host-0"]}, page=RUN)
    assert started.status_code == 303
    continuous = console.services.runs.get(str(run)).continuous_profiling
    assert continuous is not None and continuous.profiler_targets == ["host-0"]

    page = console.text(started.headers["Location"])
    assert "Continuous profiling is on" in page and "Take snapshot" in page
    assert 'action="/ui/runs/r1/capture"' not in page  # on-demand waits until it stops

    snapshot = console.post(f"{RUN}/snapshot", {"fallback": "on-demand"}, page=RUN)
    assert snapshot.status_code == 303
    session_id = snapshot.headers["Location"].split("session=")[1].split("#")[0]
    session = console.services.sessions.get(f"{run}/profilerSessions/{session_id}")
    assert session.kind is Kind.KIND_SNAPSHOT and session.profiler_targets == ["host-0"]

    assert console.post(f"{RUN}/continuous-profiling/stop", page=RUN).status_code == 303
    assert console.services.runs.get(str(run)).continuous_profiling is None


def test_an_on_demand_capture_while_continuous_profiling_is_on_is_refused_with_the_reason(console, run):
    console.post(f"{RUN}/continuous-profiling/start", page=RUN)
    response = console.post(f"{RUN}/capture", {"duration": "1s"}, page=RUN)
    assert response.status_code == 409
    assert "continuous profiling is active" in response.get_data(as_text=True)


def test_stopping_what_is_not_running_is_refused_with_the_reason(console, run):
    response = console.post(f"{RUN}/continuous-profiling/stop", page=RUN)
    assert response.status_code == 412 and "not active" in response.get_data(as_text=True)


def _analysed(console, run, session_id="s1"):
    folder = f"gs://mldiag-profiles/runs/r1/plugins/profile/{session_id}"
    console.services.blobs.write_bytes(f"{folder}/mldiag/summary.html", b"<html><body>report</body></html>")
    return add_session(console.services, run, session_id,
                       analysis=AnalysisStatus(state="DONE", report_uri=f"{folder}/mldiag/summary.html"))


def test_share_shows_a_signed_link_that_opens_the_report(console, run):
    _analysed(console, run)
    response = console.post(f"{RUN}/sessions/s1/share", {"ttl": "1 hour"}, page=f"{RUN}/sessions/s1")

    assert response.status_code == 200
    page = response.get_data(as_text=True)
    url = page.split('id="share-url" type="url" readonly value="')[1].split('"')[0]
    assert url.startswith("http://127.0.0.1:8080/share/")
    assert "2026-01-01 01:00:00 UTC" in page  # an hour from the test clock
    shared = console.get(url.removeprefix("http://127.0.0.1:8080"))
    assert shared.status_code == 200 and b"report" in shared.data


def test_share_before_the_analysis_is_refused_with_the_reason(console, run):
    add_session(console.services, run, "s1")
    response = console.post(f"{RUN}/sessions/s1/share")
    assert response.status_code == 412 and "has no report yet" in response.get_data(as_text=True)


def test_analyse_again_requests_a_new_analysis_of_the_sessions_files(console, run):
    profile = "gs://mldiag-profiles/runs/r1/plugins/profile/s1/host-0.xplane.pb"
    add_session(console.services, run, "s1", host_files={"host-0": HostFile(uri=profile, generation="7")},
                analysis=AnalysisStatus(state="FAILED", error="the analysis timed out"))
    assert "Analyse again" in console.text(f"{RUN}/sessions/s1")

    response = console.post(f"{RUN}/sessions/s1/analyze", page=f"{RUN}/sessions/s1")

    assert response.status_code == 303
    assert response.headers["Location"] == "/ui/runs/r1?done=analysis&session=s1#sessions"
    assert console.services.sessions.get(f"{run}/profilerSessions/s1").analysis.state is AnalysisState.PENDING
    (request,) = [json.loads(m.data) for m in console.services.bus.published[ANALYSIS_REQUESTS]]
    assert request["session"] == f"{run}/profilerSessions/s1" and request["hostFiles"] == {"host-0": profile}
    page = console.text(response.headers["Location"])
    assert "Analysis requested: session s1" in page and 'data-active="true"' in page
    assert "Analyse again" not in console.text(f"{RUN}/sessions/s1")  # not while it is pending


def test_a_session_without_files_cannot_be_analysed_again(console, run):
    add_session(console.services, run, "s1")
    assert "Analyse again" not in console.text(f"{RUN}/sessions/s1")
    response = console.post(f"{RUN}/sessions/s1/analyze")
    assert response.status_code == 412 and "no profile files" in response.get_data(as_text=True)


def test_actions_on_a_run_that_does_not_exist_are_not_found(console, run):
    assert console.post("/ui/runs/nope/capture", {"duration": "1s"}).status_code == 404
    assert console.services.sessions.list(str(LOCATION.run("nope"))).items == []
