"""Report files served from the bucket: only a session's own ``mldiag/summary.html`` and ``analysis.json``."""

from __future__ import annotations

import pytest

from mldiag.domain import AnalysisStatus

from console_support import add_run, add_session

FOLDER = "gs://mldiag-profiles/runs/r1/plugins/profile/s1"
REPORT = "/ui/runs/r1/sessions/s1/report"


@pytest.fixture
def analysed(console):
    blobs = console.services.blobs
    blobs.write_bytes(f"{FOLDER}/mldiag/summary.html", b"<!doctype html><title>Report</title><p>OPTIMAL</p>")
    blobs.write_bytes(f"{FOLDER}/mldiag/analysis.json", b'{"health": "OPTIMAL"}')
    blobs.write_bytes("gs://mldiag-profiles/runs/r1/plugins/profile/secret.html", b"SECRET")
    blobs.write_bytes(f"{FOLDER}/host.xplane.pb", b"SECRET-PROFILE")
    add_session(console.services, add_run(console.services, "r1"), "s1",
                analysis=AnalysisStatus(state="DONE", report_uri=f"{FOLDER}/mldiag/summary.html",
                                        analysis_uri=f"{FOLDER}/mldiag/analysis.json"))
    return console


def test_the_report_is_served_sandboxed(analysed):
    response = analysed.get(f"{REPORT}/summary.html")
    assert response.status_code == 200 and b"OPTIMAL" in response.data
    assert response.mimetype == "text/html"
    policy = response.headers["Content-Security-Policy"]
    assert policy.startswith("sandbox ") and "allow-scripts" not in policy and "allow-same-origin" not in policy
    assert "script-src" not in policy  # default-src 'none' covers scripts


def test_the_evidence_is_served_as_json(analysed):
    response = analysed.get(f"{REPORT}/analysis.json")
    assert response.status_code == 200 and response.json == {"health": "OPTIMAL"}


@pytest.mark.parametrize("path", [
    f"{REPORT}/host.xplane.pb",
    f"{REPORT}/../host.xplane.pb",
    f"{REPORT}/%2e%2e/host.xplane.pb",
    f"{REPORT}/..%2fhost.xplane.pb",
    f"{REPORT}/..%2f..%2fsecret.html",
    "/ui/runs/r1/sessions/..%2fsecret.html/report/summary.html",
    "/ui/runs/r1/sessions/%2e%2e/report/summary.html",
    f"{REPORT}/summary.html%00.txt",
])
def test_nothing_else_in_the_bucket_can_be_named(analysed, path):
    response = analysed.get(path)
    assert response.status_code in (400, 404), path
    assert b"SECRET" not in response.data


def test_a_session_without_a_report_has_none_to_serve(console):
    add_session(console.services, add_run(console.services, "r1"), "s1")
    response = console.get(f"{REPORT}/summary.html")
    assert response.status_code == 404 and "has no report yet" in response.get_data(as_text=True)


def test_a_report_that_is_recorded_but_missing_is_not_found(console):
    add_session(console.services, add_run(console.services, "r1"), "s1",
                analysis=AnalysisStatus(state="DONE", report_uri=f"{FOLDER}/mldiag/summary.html"))
    assert console.get(f"{REPORT}/summary.html").status_code == 404


@pytest.fixture
def rerun(console):
    """A session whose files a rerun replaced: the latest analysis, and the earlier one still listed."""
    blobs = console.services.blobs
    for generation_set, health in (("aaaa1111", "NEEDS_ATTENTION"), ("bbbb2222", "OPTIMAL")):
        blobs.write_bytes(f"{FOLDER}/mldiag/{generation_set}/summary.html", f"<p>{health}</p>".encode())
        blobs.write_bytes(f"{FOLDER}/mldiag/{generation_set}/analysis.json", f'{{"health": "{health}"}}'.encode())
    blobs.write_bytes("gs://mldiag-profiles/runs/r1/plugins/profile/secret.html", b"SECRET")

    def analysis(generation_set: str, health: str) -> AnalysisStatus:
        return AnalysisStatus(state="DONE", health=health, generation_set=generation_set, top_finding=f"P1 {health}",
                              report_uri=f"{FOLDER}/mldiag/{generation_set}/summary.html",
                              analysis_uri=f"{FOLDER}/mldiag/{generation_set}/analysis.json")

    add_session(console.services, add_run(console.services, "r1"), "s1",
                analysis=analysis("bbbb2222", "OPTIMAL"),
                earlier_analyses=[analysis("aaaa1111", "NEEDS_ATTENTION"),
                                  AnalysisStatus(state="FAILED", generation_set="cccc3333", error="timed out"),
                                  AnalysisStatus(state="DONE", generation_set="dddd4444",
                                                 report_uri="gs://mldiag-profiles/runs/r1/plugins/profile/secret.html")])
    return console


def test_the_report_link_opens_the_latest_report(rerun):
    assert rerun.get(f"{REPORT}/summary.html").data == b"<p>OPTIMAL</p>"
    assert rerun.get(f"{REPORT}/analysis.json").json == {"health": "OPTIMAL"}


def test_an_earlier_report_stays_readable_sandboxed(rerun):
    response = rerun.get("/ui/runs/r1/sessions/s1/earlier/aaaa1111/report/summary.html")
    assert response.status_code == 200 and response.data == b"<p>NEEDS_ATTENTION</p>"
    assert response.headers["Content-Security-Policy"].startswith("sandbox ")
    evidence = rerun.get("/ui/runs/r1/sessions/s1/earlier/aaaa1111/report/analysis.json")
    assert evidence.json == {"health": "NEEDS_ATTENTION"}


@pytest.mark.parametrize(("generation_set", "says"), [
    ("ffff0000", "no earlier report"),  # no such analysis
    ("cccc3333", "no earlier report"),  # it failed: nothing was written
    ("bbbb2222", "no earlier report"),  # the latest is not an earlier one
    ("dddd4444", "has no summary.html stored"),  # a record pointing outside the session's reports
])
def test_only_reports_an_earlier_analysis_wrote_can_be_opened(rerun, generation_set, says):
    response = rerun.get(f"/ui/runs/r1/sessions/s1/earlier/{generation_set}/report/summary.html")
    assert response.status_code == 404 and says in response.get_data(as_text=True)
    assert b"SECRET" not in response.data


@pytest.mark.slow
def test_the_session_page_lists_earlier_analyses_with_their_reports(rerun):
    page = rerun.text("/ui/runs/r1/sessions/s1")
    earlier = page[page.index("Earlier analyses"):]
    assert "aaaa1111" in earlier and "P1 NEEDS_ATTENTION" in earlier and "timed out" in earlier
    assert 'href="/ui/runs/r1/sessions/s1/earlier/aaaa1111/report/summary.html"' in earlier
    assert "/earlier/cccc3333/" not in earlier
    assert page.index('href="/ui/runs/r1/sessions/s1/report/summary.html"') < page.index("Earlier analyses")
