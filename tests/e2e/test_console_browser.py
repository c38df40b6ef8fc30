"""The console in headless Chromium, against a real ``mldiag up --viewer`` and a live JAX workload.

``mldiag up --viewer`` runs on free ports with a fresh data dir (the e2e
``control_plane`` fixture, with ``MLDIAG_UP_ARGS``); runs and sessions are
seeded through the API; Chromium (Debian's ``chromium`` driven through its
``chromium-driver``) reads the pages, posts the capture form against a JAX
training loop serving the XProf profiler, watches the session reach
SUCCEEDED in the table that refreshes itself, opens it in XProf, opens its
report once the analysis is done, finds the run on the fleet page with the numbers the
API gives, and has it analysed again.
Screenshots at 1280 px and at phone width go to ``test-artifacts/console/``.
Every console page must load without a console error and without a request
to anything but 127.0.0.1 (the stock XProf UI is another matter: it asks
Google's servers for fonts and charts, so the viewer is checked for the
session it opens, not for its requests).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from capture_support import LOCATION, ControlPlane, register_target

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL = "apt-get install -y --no-install-recommends chromium chromium-driver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
DESKTOP, PHONE = (1280, 900), (390, 844)
HOSTILE = "<script>alert(1)</script>"
RUN = "console-e2e"
CAPTURE_TIMEOUT_S = 120
MLDIAG_UP_ARGS = ("--viewer", "--viewer-port", "0")  # for the control_plane fixture


def _api(plane: ControlPlane, path: str, body: dict | None = None) -> dict:
    """POST ``body`` to the API (GET without one)."""
    url = f"{plane.url}/{LOCATION}/{path}"
    response = requests.get(url, timeout=10) if body is None else requests.post(url, json=body, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


class Browser:
    """Chromium through chromedriver, keeping every request URL and console message it has seen."""

    def __init__(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in (*FLAGS, f"--window-size={DESKTOP[0]},{DESKTOP[1]}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        self.driver.implicitly_wait(0)

    def open(self, url: str) -> None:
        self.driver.get(url)

    def text(self) -> str:
        return self.driver.find_element("tag name", "body").text

    def wait_for(self, condition, what: str, timeout_s: float = 30) -> object:
        """Poll ``condition``; an element it held that a page refresh replaced counts as not yet."""
        from selenium.common.exceptions import StaleElementReferenceException

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if result := condition():
                    return result
            except StaleElementReferenceException:
                pass
            assert time.monotonic() < deadline, f"timed out waiting for {what}; the page says:\n{self.text()[:3000]}"
            time.sleep(0.25)

    def screenshot(self, name: str) -> None:
        """The whole page at 1280 px and at phone width; on the phone nothing may stick out sideways."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for label, (width, height) in (("desktop", DESKTOP), ("phone", PHONE)):
            self.driver.set_window_size(width, height)
            full = self.driver.execute_script("return document.documentElement.scrollHeight")
            self.driver.set_window_size(width, max(height, full))
            assert self.driver.save_screenshot(str(ARTIFACTS / f"{name}-{label}.png"))
            overflow = self.driver.execute_script(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"{name} is {overflow}px wider than a {width}px screen"
        self.driver.set_window_size(*DESKTOP)

    def requests_and_errors(self) -> tuple[list[str], list[str]]:
        """The URLs requested and the console errors logged since the last call."""
        urls = [message["params"]["request"]["url"]
                for entry in self.driver.get_log("performance")
                if (message := json.loads(entry["message"])["message"])["method"] == "Network.requestWillBeSent"]
        errors = [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]
        return urls, errors

    def assert_controls_labelled(self) -> None:
        """Every form control a person uses has a label that names it (what a screen reader announces)."""
        unlabelled = self.driver.execute_script("""
            return [...document.querySelectorAll("input:not([type=hidden]), select, textarea")]
                .filter(control => ![...control.labels].some(label => label.textContent.trim()))
                .map(control => control.outerHTML);""")
        assert unlabelled == []

    def assert_stays_local(self) -> None:
        urls, errors = self.requests_and_errors()
        assert urls, "no requests were recorded"
        assert [url for url in urls if urlsplit(url).hostname != "127.0.0.1"] == []
        assert errors == []

    def quit(self) -> None:
        self.driver.quit()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        reason = f"{' and '.join(missing)} not installed ({INSTALL})"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    opened = Browser()
    yield opened
    opened.quit()


@pytest.fixture(scope="module")
def seeded(control_plane: ControlPlane) -> ControlPlane:
    """A run with a hostile name, one registered target, and two sessions, all through the API."""
    _api(control_plane, f"machineLearningRuns?machineLearningRunId={RUN}", {
        "displayName": HOSTILE, "labels": {"team": "infra", "model": "mlp"},
        "artifacts": {"gcsPath": str(control_plane.bucket_folder)}})
    _api(control_plane, f"machineLearningRuns/{RUN}/profilerTargets?profilerTargetId=parked-0",
         {"hostname": "parked", "profilerAddress": "127.0.0.1:9"})
    _api(control_plane, f"machineLearningRuns/{RUN}/profilerSessions?profilerSessionId=programmatic-1",
         {"kind": "KIND_PROGRAMMATIC", "targetSessions": {"parked-0": {"sessionPhase": "SUCCEEDED"}}})
    _api(control_plane, f"machineLearningRuns/{RUN}/profilerSessions?profilerSessionId=failed-1",
         {"kind": "KIND_ON_DEMAND", "targetSessions": {"parked-0": {"sessionPhase": "FAILED", "error": HOSTILE}}})
    return control_plane


def test_the_console_shows_the_run_and_its_sessions_with_names_as_text(seeded, browser):
    browser.open(f"{seeded.url}/ui/")
    link = browser.driver.find_element("link text", HOSTILE)  # the name is text, not markup
    assert "team=infra" in browser.text() and "parked-0" in browser.text()
    browser.screenshot("runs")

    link.click()
    assert browser.driver.find_element("tag name", "h1").text == HOSTILE
    assert HOSTILE in browser.driver.title
    page = browser.text()
    assert "programmatic-1" in page and "failed-1" in page and "Programmatic" in page
    assert browser.driver.execute_script("return document.querySelectorAll('script').length") == 1
    browser.assert_controls_labelled()
    browser.screenshot("run")
    browser.assert_stays_local()


def test_the_keyboard_reaches_the_content_first(seeded, browser):
    from selenium.webdriver.common.keys import Keys

    browser.open(f"{seeded.url}/ui/runs/{RUN}")
    browser.driver.find_element("tag name", "body").send_keys(Keys.TAB)
    focused = browser.driver.switch_to.active_element
    assert focused.text == "Skip to content"
    focused.send_keys(Keys.ENTER)
    assert browser.driver.switch_to.active_element.get_attribute("id") == "main"
    browser.assert_stays_local()


@pytest.fixture(scope="module")
def live_target(seeded: ControlPlane, workloads) -> str:
    """A JAX training loop serving the profiler, registered as a target of the run."""
    (workload,) = workloads(1)
    register_target(seeded, RUN, "jax-0", workload.port)
    return "jax-0"


def test_an_on_demand_capture_from_the_console_reaches_succeeded(seeded, browser, live_target):
    browser.open(f"{seeded.url}/ui/runs/{RUN}")
    browser.assert_controls_labelled()
    form = browser.driver.find_element("css selector", "form[action$='/capture']")
    duration = form.find_element("id", "capture-duration")
    duration.clear()
    duration.send_keys("3s")
    form.find_element("css selector", f"input[name=target][value={live_target}]").click()
    form.find_element("id", "capture-session").send_keys("from-the-browser")
    form.find_element("css selector", "button[type=submit]").click()

    browser.wait_for(lambda: "done=capture" in browser.driver.current_url, "the redirect after the capture")
    assert "Capture requested: session from-the-browser" in browser.text()
    row = "//tbody/tr[th//a[text()='from-the-browser']]"
    assert "Active" in browser.driver.find_element("xpath", row).text  # 3 s of tracing are still ahead
    browser.wait_for(lambda: "Succeeded" in browser.driver.find_element("xpath", row).text,
                     "the session's target to reach SUCCEEDED (the table refreshing itself)", CAPTURE_TIMEOUT_S)
    folder = seeded.bucket_folder / RUN / "plugins" / "profile" / "from-the-browser"
    assert list(folder.glob("*.xplane.pb")), "the workload wrote no profile"
    browser.screenshot("captured")

    browser.driver.find_element("link text", "from-the-browser").click()
    page = browser.text()
    assert "Session from-the-browser" in page and "3 s" in page and "host info" in page
    browser.screenshot("session")
    browser.assert_stays_local()


def test_the_xprof_link_opens_the_captured_session_in_the_viewer(seeded, browser):
    browser.open(f"{seeded.url}/ui/runs/{RUN}")
    row = browser.driver.find_element("xpath", "//tbody/tr[th//a[text()='from-the-browser']]")
    link = row.find_element("link text", "XProf")
    assert link.get_attribute("href").startswith(f"{seeded.url}/viewer/?session_path=gs%3A%2F%2F")
    link.click()

    viewer = browser.wait_for(lambda: urlsplit(browser.driver.current_url).port != urlsplit(seeded.url).port
                              and browser.driver.current_url, "the viewer")
    assert urlsplit(viewer).hostname == "127.0.0.1"
    browser.wait_for(lambda: "from-the-browser" in browser.text(), "XProf to list the session", 60)
    assert "Sessions (1)" in browser.text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.driver.save_screenshot(str(ARTIFACTS / "viewer-desktop.png"))
    browser.requests_and_errors()  # XProf's own requests are its business


def test_the_captured_sessions_report_opens(seeded, browser):
    browser.open(f"{seeded.url}/ui/runs/{RUN}")
    row = "//tbody/tr[th//a[text()='from-the-browser']]"
    browser.wait_for(lambda: browser.driver.find_elements("xpath", f"{row}//a[text()='Report']"),
                     "the report link", CAPTURE_TIMEOUT_S)
    browser.assert_stays_local()
    browser.driver.find_element("xpath", f"{row}//a[text()='Report']").click()
    browser.wait_for(lambda: browser.driver.current_url.endswith("/from-the-browser/report/summary.html"), "the report")
    assert browser.driver.title and browser.text().strip()
    browser.screenshot("report")
    browser.assert_stays_local()


def test_the_fleet_page_ranks_the_analysed_run_as_the_api_does(seeded, browser):
    row = f"//tbody/tr[@data-run='{RUN}']"
    browser.open(f"{seeded.url}/ui/fleet")
    deadline = time.monotonic() + CAPTURE_TIMEOUT_S
    while not browser.driver.find_elements("xpath", row) and time.monotonic() < deadline:
        time.sleep(1)
        browser.open(f"{seeded.url}/ui/fleet")  # the record is written just after the analysis
    answer = requests.get(f"{seeded.url}/v1alpha/fleet/topWaste", params={"since": "7d"}, timeout=10).json()
    (ranked,) = [dict(zip(answer["columns"], values, strict=True)) for values in answer["rows"]
                 if values[0].endswith(f"/{RUN}")]
    cell = browser.driver.find_element("xpath", f"{row}/td[@data-column='lost_device_ms']").text
    assert cell == f"{ranked['lost_device_ms'] / 1000:,.1f}"
    assert browser.driver.find_element("xpath", f"{row}/td[@data-column='lost_share']").text == (
        f"{ranked['lost_share'] * 100:.1f}%")
    browser.assert_controls_labelled()
    browser.screenshot("fleet")
    browser.assert_stays_local()
    browser.driver.find_element("xpath", f"{row}/td[@data-label='Latest report']/a").click()
    browser.wait_for(lambda: browser.driver.current_url.endswith("/report/summary.html"), "the latest report")
    browser.assert_stays_local()


def test_analysing_again_from_the_console_ends_with_a_new_analysis(seeded, browser):
    path = f"machineLearningRuns/{RUN}/profilerSessions/from-the-browser"
    first = _api(seeded, path)["analysis"]["endTime"]
    browser.open(f"{seeded.url}/ui/runs/{RUN}/sessions/from-the-browser")
    browser.driver.find_element("xpath", "//button[text()='Analyse again']").click()

    browser.wait_for(lambda: "done=analysis" in browser.driver.current_url, "the redirect after the request")
    assert "Analysis requested: session from-the-browser" in browser.text()
    row = "//tbody/tr[th//a[text()='from-the-browser']]"
    browser.wait_for(lambda: "Done" in browser.driver.find_element("xpath", row).text,
                     "the new analysis to finish (the table refreshing itself)", CAPTURE_TIMEOUT_S)
    assert _api(seeded, path)["analysis"]["endTime"] > first
    browser.assert_stays_local()
