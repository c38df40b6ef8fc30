"""A run's step-time chart, and two of its sessions compared side by side, with every profile string escaped."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest

from mldiag.domain import AnalysisStatus
from mldiag.services import unit_of_work

from console_support import add_run, add_session

HOSTILE = '<script>alert("x")</script>'
ACTIVITY = "$make_profile_fixtures.py:360 wait_for_input"  # the demo loop's host activity that grows


@pytest.fixture
def compared(console, demo_analyses):
    """A run with the demo's healthy session (s-good), its degraded one (s-bad) and one still analysing."""
    run = add_run(console.services, "r1")
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for index, (session_id, fixture, health, step_ms) in enumerate((
            ("s-good", "demo_healthy", "OPTIMAL", 103.5), ("s-bad", "demo_degraded", "NEEDS_ATTENTION", 133.4))):
        folder = f"gs://mldiag-profiles/runs/r1/plugins/profile/{session_id}"
        uri = f"{folder}/mldiag/analysis.json"
        console.services.blobs.write_bytes(uri, demo_analyses[fixture].replace(ACTIVITY.encode(),
                                                                              json.dumps(HOSTILE)[1:-1].encode()))
        session = add_session(console.services, run, session_id, analysis=AnalysisStatus(
            state="DONE", health=health, step_time_ms=step_ms, analysis_uri=uri))
        at = start + timedelta(minutes=index)
        unit_of_work.change(console.services, lambda unit: unit.sessions.update(
            session.name, lambda stored: setattr(stored, "create_time", at)))
    add_session(console.services, run, "s-pending", analysis=AnalysisStatus(state="RUNNING"))
    return console


def test_the_run_page_charts_step_time_and_health_oldest_first(compared):
    page = compared.get("/ui/runs/r1").get_data(as_text=True)
    chart = page[page.index("<svg"):page.index("</svg>")]
    points = re.findall(r'<circle class="point health-([a-z-]+)" cx="([\d.]+)" cy="([\d.]+)"', chart)
    assert [health for health, _, _ in points] == ["optimal", "needs-attention"]
    (_, x_good, y_good), (_, x_bad, y_bad) = points
    assert float(x_good) < float(x_bad) and float(y_bad) < float(y_good)  # later, and higher: slower
    assert "s-good: 103.50 ms, optimal" in chart and page.count("<script") == 1  # the console's own
    assert 'name="baseline"' in page and "s-pending</option>" not in page


def test_the_charts_axes_say_when_and_in_what_unit(compared):
    page = compared.get("/ui/runs/r1").get_data(as_text=True)
    chart = page[page.index("<svg"):page.index("</svg>")]
    ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', chart)
    assert len([tick for tick in ticks if re.fullmatch(r"01-01 00:0\d", tick)]) == 2  # the sessions' creation
    assert "0 ms" in ticks and any(tick.endswith(" ms") and tick != "0 ms" for tick in ticks)
    assert "step time" in chart and "session created (UTC)" in chart


def test_one_analysed_session_gets_no_chart(console):
    run = add_run(console.services, "r1")
    add_session(console.services, run, "s1", analysis=AnalysisStatus(state="DONE", step_time_ms=10.0))
    assert "<svg" not in console.get("/ui/runs/r1").get_data(as_text=True)


def test_two_sessions_side_by_side_with_the_verdict_and_its_confidence(compared):
    response = compared.get("/ui/runs/r1/compare?baseline=s-good&candidate=s-bad")
    page = response.get_data(as_text=True)
    assert response.status_code == 200, page
    assert "Regressed" in page and "Mann-Whitney U" in page and "95% CI" in page
    assert "Median step time rose" in page
    assert HOSTILE not in page and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    assert compared.get("/ui/runs/r1/compare?baseline=s-good&candidate=s-good").get_data(as_text=True).count(
        "Passed") == 1


@pytest.mark.parametrize("query, status", [
    ("baseline=s-good", 400),
    ("baseline=s-good&candidate=..%2fx", 400),
    ("baseline=s-good&candidate=s-pending", 412),
    ("baseline=s-good&candidate=s-missing", 404),
])
def test_a_comparison_that_cannot_be_made_says_why(compared, query, status):
    assert compared.get(f"/ui/runs/r1/compare?{query}").status_code == status
