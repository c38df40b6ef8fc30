"""The console's fleet page: runs ranked by the accelerator time they lost in a window, split by cause."""

from __future__ import annotations

import dataclasses
import html
import re
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from console_support import Console
from mldiag.adapters.fleet.sqlite import SqliteFleet
from mldiag.services.dependencies import Services

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fleet"))
from fleet_support import record  # noqa: E402


@pytest.fixture
def fleet_services(services: Services) -> Services:
    return dataclasses.replace(services, fleet=SqliteFleet(services.settings.fleet_path))


@pytest.fixture
def fleet_console(fleet_services: Services) -> Console:
    return Console(fleet_services)


def _add(services: Services, *records) -> None:
    for one in records:
        services.fleet.insert(one.row())


def _rows(page: str) -> list[str]:
    return re.findall(r'<tr data-run="([^"]+)">', page)


def _cell(page: str, run: str, column: str) -> str:
    row = page.split(f'<tr data-run="{run}">', 1)[1].split("</tr>", 1)[0]
    return re.search(rf'data-column="{column}">([^<]*)<', row).group(1)


def test_runs_are_ranked_by_lost_accelerator_time_with_each_cause(fleet_console: Console, fleet_services: Services):
    now = fleet_services.now()
    _add(fleet_services,
         record("small", "s1", at=now - timedelta(hours=1), lost={"host_work": 100.0}),
         record("big", "s1", at=now - timedelta(hours=3), lost={"collectives": 300.0, "compilation": 200.0}),
         record("big", "s2", at=now - timedelta(hours=2), lost={"collectives": 100.0}))
    page = fleet_console.text("/ui/fleet")
    assert _rows(page) == ["big", "small"]
    # 4 accelerators: (300 + 200 + 100) ms x 4 = 2.4 device s; of (800 x 2 + 600) x 4 loop = 27.3%
    assert _cell(page, "big", "lost_device_ms") == "2.4"
    assert _cell(page, "big", "lost_share") == "27.3%"
    assert _cell(page, "big", "collectives_device_ms") == "1.6"
    assert _cell(page, "big", "compilation_device_ms") == "0.8"
    assert _cell(page, "big", "host_work_device_ms") == "0.0"
    assert _cell(page, "small", "host_work_device_ms") == "0.4"
    assert "dispatch_device_ms" not in page  # no run lost time to it
    assert 'href="/ui/runs/big"' in page
    assert 'href="/ui/runs/big/sessions/s2/report/summary.html"' in page  # the latest analysis' report
    assert 'class="cause-collectives"' in page


def test_the_window_and_the_label_filter_the_runs(fleet_console: Console, fleet_services: Services):
    now = fleet_services.now()
    _add(fleet_services,
         record("old", at=now - timedelta(days=10)),
         record("infra", at=now - timedelta(days=1), labels={"team": "infra"}),
         record("ml", at=now - timedelta(days=1), labels={"team": "ml"}))
    assert _rows(fleet_console.text("/ui/fleet")) == ["infra", "ml"]
    assert _rows(fleet_console.text("/ui/fleet?since=30d")) == ["infra", "ml", "old"]
    page = fleet_console.text("/ui/fleet?label=team%3Dinfra")
    assert _rows(page) == ["infra"]
    assert 'value="team=infra"' in page


def test_profile_strings_are_escaped(fleet_console: Console, fleet_services: Services):
    one = record("r1", at=fleet_services.now() - timedelta(hours=1)).model_copy(
        update={"run_display_name": '<script>alert("x")</script>'})
    _add(fleet_services, one)
    page = fleet_console.text("/ui/fleet?label=a%3D%3Cb%3E")
    assert "<script>alert" not in page and "<b>" not in page
    page = fleet_console.text("/ui/fleet")
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    assert "<script>alert" not in page


def test_an_empty_window_says_so(fleet_console: Console):
    assert "No analysis finished in the last 7d" in fleet_console.text("/ui/fleet")


@pytest.mark.parametrize(("query", "message"), [("since=soon", "since"), ("label=team", "a label filter is key=value")])
def test_bad_filters_get_a_one_line_error(fleet_console: Console, query: str, message: str):
    response = fleet_console.get(f"/ui/fleet?{query}")
    assert response.status_code == 400
    assert message in response.get_data(as_text=True)


def test_a_deployment_without_a_fleet_table_says_so(console: Console):
    response = console.get("/ui/fleet")
    assert response.status_code == 412
    assert "this deployment keeps no fleet table" in response.get_data(as_text=True)


def test_the_header_links_the_fleet(fleet_console: Console):
    assert 'href="/ui/fleet"' in fleet_console.text("/ui/")
    assert 'href="/ui/fleet" aria-current="page"' in fleet_console.text("/ui/fleet")


def test_each_run_shows_the_trend_of_its_lost_share_across_the_window(fleet_console: Console,
                                                                      fleet_services: Services):
    now = fleet_services.now()
    _add(fleet_services,
         record("big", "s1", at=now - timedelta(hours=3), lost={"collectives": 300.0, "compilation": 200.0}),
         record("big", "s2", at=now - timedelta(hours=2), lost={"collectives": 100.0}),
         record("small", "s1", at=now - timedelta(hours=1), lost={"host_work": 100.0}))
    page = fleet_console.text("/ui/fleet")

    def trend(run: str) -> str:
        row = page.split(f'<tr data-run="{run}">', 1)[1].split("</tr>", 1)[0]
        cell = row.split('data-column="trend">', 1)[1].split("</td>", 1)[0]
        return html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()

    # big lost 500 ms of a 1300 ms loop in s1 (38.5 %), then 100 of 900 (11.1 %): 27.4 points less
    assert trend("big") == "\u25bc 27.4 pts"
    assert trend("small") == "one analysis"
