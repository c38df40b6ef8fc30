"""summary.html shows where the loop's time went: a stacked bar per host with an attribution, and its legend."""

from __future__ import annotations

import re

import pytest
from attribution_support import LOOP_MS, attribution, input_bound_attribution, with_attribution
from investigation_support import investigated

from mldiag.analysis.host_evidence import DeviceKind, Distribution, HostEvidence, StepSource, TimeCause
from mldiag.analysis.report import MAX_TIME_PARTS, _attribution_chart, render_summary

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

HOSTILE = "<script>alert(1)</script>"
BAR = re.compile(r'<div class="time-bar" role="img" aria-label="([^"]*)">(.*?)</div>', re.DOTALL)
SEGMENT = re.compile(r'<span class="part ([a-z_]+)( useful)?" style="width: ([0-9.]+)%" title="([^"]*)">')


def _host(made) -> HostEvidence:
    return HostEvidence(host="h", file="h.xplane.pb", bytes=1, events=1, device_kind=DeviceKind.CPU, device_type="CPU",
                        devices=1, compute_lanes=[], step_source=StepSource.STEP_MARKERS, steps=10,
                        attribution=made)


def _section(page: str) -> str:
    return page[page.index('id="time-attribution"'):page.index('id="findings-heading"')]


def test_each_part_is_a_segment_as_wide_as_its_share_and_a_row_of_the_legend():
    made = input_bound_attribution()
    page = render_summary(with_attribution(investigated("input_bound"), made))
    section = _section(page)
    assert page.index('id="metrics"') < page.index('id="time-attribution"') < page.index('id="findings-heading"')
    label, bar = BAR.search(section).groups()
    segments = SEGMENT.findall(bar)
    assert [(kind, bool(useful)) for kind, useful, _, _ in segments] == [
        (part.cause.value, part.useful) for part in made.parts]
    assert [float(width) for _, _, width, _ in segments] == pytest.approx([part.share * 100 for part in made.parts],
                                                                          abs=1e-3)
    assert segments[0][3] == "host work data_loading: 397.44 ms (82.2%)"
    assert label.startswith("Where the loop's time went: host work data_loading: 82.2%; device compute dot: 11.8%")
    rows = re.findall(r"<tr><td>.*?</tr>", section, re.DOTALL)
    assert len(rows) == len(made.parts)
    assert "data_loading" in rows[0] and "python3" in rows[0] and "397.44 ms" in rows[0] and "82.2%" in rows[0]
    assert 'useful</span>' in rows[1] and 'useful</span>' not in rows[3]  # a convert is compute, not the model's
    assert f"{LOOP_MS:.2f} ms over 10 steps, useful device work 11.8%" in section


def test_a_profile_without_an_attribution_has_no_bar():
    page = render_summary(with_attribution(investigated("input_bound"), None))
    assert 'id="time-attribution"' not in page and 'class="time-bar"' not in page


def test_profile_names_in_the_attribution_are_text():
    made = attribution(((TimeCause.HOST_WORK, HOSTILE, '"><img src=x onerror=alert(1)>', 0.9, False),
                        (TimeCause.DEVICE_COMPUTE, "dot", "", 0.1, True)))
    section = _section(render_summary(with_attribution(investigated("input_bound"), made)))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section and "&#34;&gt;&lt;img src=x" in section
    assert "<script" not in section and "<img" not in section


def test_the_smallest_parts_share_a_segment_and_a_shortfall_is_drawn_as_not_attributed():
    parts = [(TimeCause.HOST_WORK, f"f{index}", "main", 0.05, False) for index in range(MAX_TIME_PARTS + 3)]
    chart = _attribution_chart(_host(attribution(parts)))  # 15 parts of 5%: 75% of the loop
    assert [segment.kind for segment in chart.segments] == ["host_work"] * MAX_TIME_PARTS + ["other", "unattributed"]
    other, missing = chart.segments[-2:]
    assert other.words == "3 smaller parts" and other.share == pytest.approx(0.15)
    assert missing.share == pytest.approx(0.25) and missing.ms == pytest.approx(0.25 * LOOP_MS)
    assert sum(segment.width for segment in chart.segments) == pytest.approx(100)


def test_parts_that_overlap_past_the_whole_still_fit_the_bar():
    chart = _attribution_chart(_host(attribution(((TimeCause.DEVICE_COMPUTE, "dot", "", 0.8, True),
                                                  (TimeCause.TRANSFERS, "copy", "", 0.45, False)))))
    assert [segment.kind for segment in chart.segments] == ["device_compute", "transfers"]
    assert sum(segment.width for segment in chart.segments) == pytest.approx(100)
    assert chart.useful_share == pytest.approx(0.8)


def test_an_empty_attribution_draws_nothing():
    assert _attribution_chart(_host(attribution(()))) is None
    assert _attribution_chart(_host(None)) is None


def test_each_row_says_the_parts_share_of_each_step_where_the_attribution_has_it():
    made = attribution(((TimeCause.HOST_WORK, "save", "python3", 0.3, False),
                        (TimeCause.DEVICE_COMPUTE, "dot", "", 0.7, True)))
    made.parts[0].step_share = Distribution(mean=0.1875, median=0.0, p90=0.75, min=0.0, max=0.75)
    section = _section(render_summary(with_attribution(investigated("input_bound"), made)))
    rows = re.findall(r"<tr><td>.*?</tr>", section, re.DOTALL)
    assert "Of each step: median · p90 · max" in section
    assert '<td class="num">0.0% · 75.0% · 75.0%</td></tr>' in rows[0]
    assert rows[1].endswith('<td class="num">–</td></tr>')
