"""What the console shows: runs, a run's targets, sessions and monitored events, a session; all escaped."""

from __future__ import annotations

import re

from mldiag.domain import AnalysisStatus, HostFile, MachineLearningRun, MonitoredEvent, Suppression, TargetSession
from mldiag.domain.resources import AnalyzerReport, RecommendedAction

from console_support import add_run, add_session, add_target

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
FOLDER = "gs://mldiag-profiles/runs/r1/plugins/profile"


def test_the_runs_page_lists_runs_with_phase_labels_and_targets(console, services):
    run = add_run(services, "train-1", display_name="Llama pretraining", labels={"team": "infra"})
    add_target(services, run, "worker-0")
    add_run(services, "train-2", run_phase="COMPLETED")

    page = console.text("/ui/")

    assert 'href="/ui/runs/train-1">Llama pretraining</a>' in page
    assert "team=infra" in page and "worker-0" in page
    assert '<span class="state state-completed">Completed</span>' in page
    completed_row = page[page.index('href="/ui/runs/train-2"'):].split("</tr>")[0]
    assert "Active" not in completed_row  # no resource state beside the phase while the run is not being deleted


def test_a_runs_pages_name_it_by_its_display_name(console, services):
    run_id = "0f6c2a9e-5b1d-4c3e-9a8f-2d7e1b4c6a00"
    run = add_run(services, run_id, display_name="llama-pretraining")
    add_session(services, run, "s1")
    for path in (f"/ui/runs/{run_id}", f"/ui/runs/{run_id}/sessions/s1"):
        crumbs = console.text(path).split('<nav class="crumbs"')[1].split("</nav>")[0]
        shown = re.sub(r'"[^"]*"', "", crumbs)  # what the reader sees, not the links
        assert "llama-pretraining" in shown and run_id not in shown, path


def test_the_control_planes_root_leads_to_the_console(console):
    response = console.get("/")
    assert response.status_code == 302 and response.headers["Location"] == "/ui/"


def test_the_runs_page_filters_by_phase_and_pages(console, services):
    for index in range(30):
        add_run(services, f"run-{index:02d}", run_phase="COMPLETED" if index % 2 else "ACTIVE")

    completed = console.text("/ui/?phase=COMPLETED")
    assert "run-01" in completed and "run-00" not in completed

    first = console.text("/ui/")
    assert first.count('<th scope="row"') == 25 and "Older runs" in first
    older = first.split('href="/ui/?page=')[1].split('"')[0]
    assert console.text(f"/ui/?page={older}").count('<th scope="row"') == 5


def test_an_unknown_phase_is_ignored_rather_than_sent_to_the_store(console, services):
    add_run(services, "r1")
    assert "r1" in console.text("/ui/?phase=runPhase%20%3D%20X%20OR%201")


def test_a_run_named_like_a_script_shows_as_text_everywhere(console, services):
    run = add_run(services, "r1", display_name=HOSTILE, labels={"k": HOSTILE}, run_set=HOSTILE)
    add_target(services, run, "host-0", hostname=HOSTILE)
    add_session(services, run, "s1", target_sessions={"host-0": TargetSession(error=HOSTILE, session_phase="FAILED")},
                analysis=AnalysisStatus(state="FAILED", error=HOSTILE, top_finding=HOSTILE))

    for path in ("/ui/", "/ui/runs/r1", "/ui/runs/r1/sessions", "/ui/runs/r1/sessions/s1"):
        page = console.text(path)
        assert HOSTILE not in page, path
        assert ESCAPED in page, path


def test_the_run_page_shows_sessions_with_targets_phases_analysis_and_links(console, services):
    run = add_run(services, "r1")
    add_target(services, run, "host-0")
    event = f"{run}/monitoredEvents/slow-1"
    add_session(services, run, "s-auto", kind="KIND_SNAPSHOT", auto_captured=True, monitored_events=[event],
                host_files={"host-0": HostFile(uri=f"{FOLDER}/s-auto/host-0.xplane.pb")},
                target_sessions={"host-0": TargetSession(session_phase="SUCCEEDED"),
                                 "host-1": TargetSession(session_phase="FAILED")},
                analysis=AnalysisStatus(state="DONE", health="NEEDS_ATTENTION", top_finding="Input bound: 62% idle",
                                        report_uri=f"{FOLDER}/s-auto/mldiag/summary.html"))

    page = console.text("/ui/runs/r1")

    assert "Snapshot" in page and "auto-captured" in page
    assert "host-0 <span class=\"state state-succeeded\">Succeeded</span>" in page
    assert "host-1 <span class=\"state state-failed\">Failed</span>" in page
    assert "Needs attention" in page and "Input bound: 62% idle" in page
    assert 'href="/ui/runs/r1#event-slow-1">slow-1</a>' in page
    assert 'href="/ui/runs/r1/sessions/s-auto/report/summary.html">Report</a>' in page
    assert f'href="http://127.0.0.1:8080/viewer/?session_path={FOLDER}/s-auto"' in page
    assert 'href="/ui/runs/r1/sessions/s-auto#share">Share</a>' in page


def test_a_session_without_report_has_no_report_or_share_link(console, services):
    add_session(services, add_run(services, "r1"), "s1")
    page = console.text("/ui/runs/r1")
    assert "/report/" not in page and "#share" not in page


def test_the_sessions_table_says_when_it_should_refresh(console, services):
    run = add_run(services, "r1")
    add_session(services, run, "done", target_sessions={"h": TargetSession(session_phase="SUCCEEDED")})
    assert 'data-active="false"' in console.text("/ui/runs/r1/sessions")

    add_session(services, run, "capturing", target_sessions={"h": TargetSession(session_phase="ACTIVE")})
    fragment = console.text("/ui/runs/r1/sessions")
    assert 'data-active="true"' in fragment and "1 session(s) capturing" in fragment
    assert "<html" not in fragment  # the table alone, for the page to swap in


def test_monitored_events_show_reports_linked_sessions_and_suppressions(console, services):
    run = add_run(services, "r1")
    event = MonitoredEvent(
        name=f"{run}/monitoredEvents/slow-1", display_name="Step time up 40%", start_time=services.now(),
        profiler_sessions=[f"{run}/profilerSessions/s1"],
        analyzer_reports=[AnalyzerReport(
            analyzer="degradation", details="median step 140 ms vs 100 ms", recommended_actions=[
                RecommendedAction(description="Read the input pipeline", documentation_url="https://openxla.org/"),
                RecommendedAction(description="Hostile link", documentation_url="javascript:alert(1)"),
            ])])
    event.suppress(Suppression(time=services.now(), reason="cooldown: captured 2 min ago", alert="alert-7"))
    services.monitored_events.create(event)

    page = console.text("/ui/runs/r1")

    assert 'id="event-slow-1"' in page and "Step time up 40%" in page and "Ongoing" in page
    assert 'href="/ui/runs/r1/sessions/s1">s1</a>' in page
    assert "median step 140 ms vs 100 ms" in page
    assert 'href="https://openxla.org/"' in page
    assert "javascript:" not in page  # shown as text only: no link
    assert "Suppressed triggers</dt><dd>1</dd>" in page and "cooldown: captured 2 min ago" in page


def test_the_session_page_shows_tracers_targets_and_analysis(console, services):
    run = add_run(services, "r1")
    add_session(services, run, "s1", kind="KIND_ON_DEMAND", duration="1.5s", host_tracer_level="VERBOSE",
                target_sessions={"host-0": TargetSession(session_phase="FAILED", error="profiler unreachable")},
                analysis=AnalysisStatus(state="FAILED", error="no xplane files"))

    page = console.text("/ui/runs/r1/sessions/s1")

    assert "On demand" in page and "1.5 s" in page and "host verbose" in page
    assert "profiler unreachable" in page and "no xplane files" in page


def test_unknown_runs_and_sessions_get_a_page_saying_so(console, services):
    add_run(services, "r1")
    for path in ("/ui/runs/nope", "/ui/runs/r1/sessions/nope"):
        response = console.get(path)
        assert response.status_code == 404
        page = response.get_data(as_text=True)
        assert response.mimetype == "text/html" and page.count("nope not found") == 1


def test_pages_forbid_framing_inline_scripts_and_caching(console, services):
    add_run(services, "r1")
    response = console.get("/ui/runs/r1")
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_the_console_lists_the_deployments_own_location_only(console, services):
    add_run(services, "here")
    services.runs.create(MachineLearningRun(name="projects/other/locations/elsewhere/machineLearningRuns/there"))
    page = console.text("/ui/")
    assert "here" in page and "there" not in page


def test_a_finished_run_shows_its_targets_as_not_capturable_and_offers_no_capture(console, services):
    for phase in ("COMPLETED", "FAILED"):
        add_target(services, add_run(services, f"r-{phase.lower()}", run_phase=phase), "host-0")
        page = console.text(f"/ui/runs/r-{phase.lower()}")
        assert 'id="run-finished"' in page and f"The run is over ({phase.lower()}" in page
        assert '<span class="state state-ended">Run finished</span>' in page and "not capturable" in page
        assert "state-active" not in page
        assert "/capture" not in page and "/snapshot" not in page and "Start continuous profiling" not in page

    add_target(services, add_run(services, "r-active"), "host-0")
    active = console.text("/ui/runs/r-active")
    assert 'action="/ui/runs/r-active/capture"' in active and "Run finished" not in active


def test_a_failed_capture_says_why_and_offers_no_xprof_link(console, services):
    run = add_run(services, "r1")
    add_session(services, run, "s-failed", kind="KIND_ON_DEMAND", target_sessions={
        "host-0": TargetSession(session_phase="FAILED", error="unreachable: connection refused")})

    page = console.text("/ui/runs/r1/sessions/s-failed")
    assert '<span class="state state-failed">Capture failed</span>: host-0: unreachable: connection refused' in page
    assert "Open in XProf" not in page and "/viewer/" not in page
    assert "Not started" not in page and "not yet" not in page

    table = console.text("/ui/runs/r1")
    assert "Capture failed" in table and "host-0: unreachable: connection refused" in table
    assert "Not started" not in table and "/viewer/" not in table


def test_a_session_with_a_profile_keeps_its_xprof_link_when_another_target_failed(console, services):
    run = add_run(services, "r1")
    add_session(services, run, "s1", host_files={"host-0": HostFile(uri=f"{FOLDER}/s1/host-0.xplane.pb")},
                target_sessions={"host-0": TargetSession(session_phase="SUCCEEDED"),
                                 "host-1": TargetSession(session_phase="FAILED", error="timeout")})
    page = console.text("/ui/runs/r1/sessions/s1")
    assert "Open in XProf" in page and "Capture failed" not in page


def test_table_headers_break_between_words_only_and_tables_scroll(console):
    css = console.text("/ui/static/console.css")
    assert "th { word-break: normal; overflow-wrap: normal; }" in css
    assert re.search(r"thead th \{[^}]*white-space: nowrap;", css)
    assert ".table-scroll { overflow-x: auto; }" in css
    assert not re.search(r"(^|\n)th, td \{[^}]*overflow-wrap: anywhere", css)


def test_a_run_page_opens_by_the_display_name_one_run_has(console, services):
    add_run(services, "r1", display_name="My Experiment")
    add_session(services, add_run(services, "r2", display_name="other"), "s1")
    page = console.get("/ui/runs/My%20Experiment")
    assert page.status_code == 200 and "My Experiment" in page.get_data(as_text=True)
    assert console.get("/ui/runs/other/sessions/s1").status_code == 200


def test_a_display_name_several_runs_share_gets_a_page_naming_them(console, services):
    add_run(services, "r1", display_name="shared")
    add_run(services, "r2", display_name="shared")
    response = console.get("/ui/runs/shared")
    assert response.status_code == 400 and response.mimetype == "text/html"
    assert "ids r1, r2" in response.get_data(as_text=True) or "ids r2, r1" in response.get_data(as_text=True)
    assert console.get("/ui/runs/nobody").status_code == 404


def test_a_run_without_targets_says_what_registers_one(console, services):
    add_run(services, "r1")
    text = re.sub(r"<[^>]+>|\s+", " ", console.get("/ui/runs/r1").get_data(as_text=True))
    assert "only opens a port" in text
    assert "mldiag agent --machine-learning-run r1 --port 9999" in text
