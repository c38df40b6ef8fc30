"""summary.html: one self-contained page, profile strings as text, and the reasoner's story told."""

from __future__ import annotations

import re

import pytest
from analysis_support import xplane
from investigation_support import investigated
from typer.testing import CliRunner

from mldiag.analysis.host_evidence import DeviceKind, HostEvidence, StepSeries, StepSource
from mldiag.analysis.report import _step_chart, render_summary
from mldiag.cli.main import app

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

VIEWER = "https://xprof.example.com/?session_path=gs%3A%2F%2Fprofiles%2Frun1%2Fplugins%2Fprofile%2Fs1"


def _page(name: str, **options: str) -> str:
    return render_summary(investigated(name), **options)


def test_the_page_has_banner_summary_tiles_findings_charts_and_sections():
    analysis = investigated("unfused_small_ops")
    page = _page("unfused_small_ops", dashboard_uri=VIEWER)
    assert 'class="banner attention"' in page and "NEEDS ATTENTION" in page
    assert all(f.title in page for f in analysis.findings)
    for section in ("metrics", "findings", "roofline", "memory", "op-profile", "kernels", "llo", "followups", "tools"):
        assert f'id="{section}"' in page
    series = analysis.hosts[0].series
    step_chart = page[page.index('id="step-chart-1"'):page.index('id="ops-chart-1"')]
    gaps = sum(gap > 0 for gap in series.gap_before_ms[1:])
    assert step_chart.count("<rect") == 2 * len(series.step_ms) + gaps  # busy and idle per step, and each gap
    assert f'href="{VIEWER.replace("&", "&amp;")}"' in page and 'href="analysis.json"' in page


def test_an_optimal_profile_shows_a_green_banner_and_no_follow_ups():
    page = _page("compute_bound")
    assert 'class="banner optimal"' in page and "no follow-up checks were needed" in page


def test_the_page_loads_nothing_and_runs_nothing():
    page = _page("unfused_small_ops", dashboard_uri=VIEWER)
    assert "<script" not in page.lower() and "<img" not in page.lower() and "<link" not in page.lower()
    assert "default-src 'none'" in page
    urls = set(re.findall(r"(?:src|href)=\"([^\"]*)\"", page))
    assert urls == {VIEWER.replace("&", "&amp;"), "analysis.json"}


def test_profile_strings_are_text():
    page = _page("hostile")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script>" not in page and "<img" not in page


@pytest.mark.parametrize("link", ["javascript:alert(1)", "data:text/html,hi", "gs://profiles/r/s", "//evil"])
def test_only_web_links_reach_the_viewer_link(link):
    assert 'id="viewer-link"' not in _page("input_bound", dashboard_uri=link)


def test_vertex_failing_in_mldiag_analyze_leaves_an_offline_report_that_says_why(tmp_path):
    result = CliRunner().invoke(app, ["analyze", str(xplane("input_bound")), "--out", str(tmp_path),
                                      "--reasoner", "vertex"],
                                env={"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "missing.json"),
                                     "MLDIAG_PROJECT": "p", "MLDIAG_VERTEX_ENDPOINT": "http://127.0.0.1:9"})
    assert result.exit_code == 0, result.output
    assert "the offline analyst wrote the report" in result.stderr
    page = (tmp_path / "summary.html").read_text()
    assert 'id="fallback"' in page and "Vertex AI gemini-2.5-flash: " in page
    assert "Reasoned by the offline analyst" in page


def test_the_step_chart_stacks_the_hosts_time_between_steps_on_each_step():
    host = HostEvidence(host="h", file="h.xplane.pb", bytes=1, events=1, device_kind=DeviceKind.CPU, device_type="CPU",
                        devices=1, compute_lanes=[], step_source=StepSource.STEP_MARKERS, steps=3,
                        series=StepSeries(step_ms=[30.0, 30.0, 30.0], busy_fraction=[1.0, 0.5, 1.0],
                                          gap_before_ms=[0.0, 60.0, 0.0]))
    chart = _step_chart(host)
    assert chart.top_ms == 90.0
    (gap,) = chart.gaps
    assert gap.x == chart.busy[0].x and gap.height == pytest.approx(2 * chart.busy[0].height)
    assert gap.y + gap.height == pytest.approx(chart.idle[0].y)  # drawn on top of the first step
    assert "between steps 1 and 2: 60.00 ms" in gap.title


def test_a_last_program_run_that_ends_with_its_device_work_is_drawn_as_a_partial_step():
    host = HostEvidence(host="h", file="h.xplane.pb", bytes=1, events=1, device_kind=DeviceKind.CPU, device_type="CPU",
                        devices=1, compute_lanes=[], step_source=StepSource.PROGRAM_RUNS, steps=3,
                        series=StepSeries(step_ms=[100.0, 100.0, 8.0], busy_fraction=[0.05, 0.05, 0.9],
                                          gap_before_ms=[0.0, 0.0, 0.0], last_partial=True))
    chart = _step_chart(host)
    assert chart.last_partial and [bar.partial for bar in chart.busy] == [False, False, True]
    assert chart.busy[-1].title.startswith("step 3 (partial): 8.00 ms")
    page = render_summary(investigated("demo_healthy"))
    step_chart = page[page.index('id="step-chart-1"'):page.index('id="ops-chart-1"')]
    assert "step 8 (partial)</text>" in step_chart and step_chart.count('fill-opacity="0.35"') == 2


def test_a_dispatch_the_step_calls_directly_is_one_row_of_the_host_table(tmp_path):
    from evidence_support import MS, TraceBuild, jit_calls

    starts = [i * 10 * MS for i in range(6)]
    stepping = [*jit_calls("train_step", starts, MS), *(("$time sleep", s + 2 * MS, s + 10 * MS) for s in starts)]
    lane = [("fusion", s + MS, s + 2 * MS) for s in starts]
    host = TraceBuild().host(stepping).lane("/host:CPU", lane).evidence(tmp_path)
    analysis = investigated("demo_healthy")
    analysis.hosts = [host]
    page = render_summary(analysis)
    table = page[page.index("Host activity inside steps"):]
    table = table[:table.index("</table>")]
    assert table.count("PjitFunction(train_step)") == 1 and table.count("$time sleep") == 1
