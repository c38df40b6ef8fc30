"""The quality harness's plumbing: each fixture analysed once per run (ahead, in worker processes, from the
moment the run's tests are collected), and the fixture x expectation table at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from quality_support import Call, Prefetch, baseline_source, gemini_analysis, offline_analysis, prefetch_workers

RESULTS: dict[tuple[str, str], str] = {}  # (fixture, expectation) -> outcome, for the summary table


@pytest.fixture(scope="session")
def analyses():
    """``analyses(source, baseline=None)``: the offline analysis of a fixture, computed once per run."""
    return offline_analysis


@pytest.fixture(scope="session")
def gemini_analyses():
    """``gemini_analyses(source, recording)``: the Gemini analysis of a fixture, computed once per run."""
    return gemini_analysis


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start computing the analyses the selected tests read, in their order, while the tests before them run."""
    if session.config.option.collectonly:
        return
    try:
        workers = prefetch_workers()
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    calls = list(dict.fromkeys(call for item in session.items for call in _analyses_read_by(item)))
    if workers and calls:
        Prefetch.running = Prefetch(calls, workers)
        session.config.add_cleanup(_stop_prefetch)


def _stop_prefetch() -> None:
    if Prefetch.running:
        Prefetch.running.stop()
        Prefetch.running = None


def _analyses_read_by(item: pytest.Item) -> Iterator[Call]:
    """The analyses a test of ``test_quality.py`` reads."""
    test = getattr(item, "originalname", None)
    if test not in ("test_expectation", "test_invariant", "test_gemini_reasoner"):
        return
    fixture = item.callspec.params["fixture"]
    expectations = item.module.EXPECTATIONS
    source = expectations[fixture]["source"]
    if test == "test_gemini_reasoner":
        yield "gemini_analysis", (source, fixture)
        if item.callspec.params["name"] != "same_evidence":
            return
    baseline = baseline_source(fixture, expectations) if test == "test_expectation" else None
    yield "offline_analysis", (source, baseline)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    cell = dict(report.user_properties).get("quality")
    if cell is None or (report.when != "call" and report.passed):
        return
    if hasattr(report, "wasxfail"):
        RESULTS[cell] = "xfail" if report.skipped else "XPASS"
    elif str(report.longrepr).startswith("[XPASS(strict)]"):
        RESULTS[cell] = "XPASS"
    else:
        RESULTS[cell] = {"passed": "pass", "failed": "FAIL", "skipped": "skip"}[report.outcome]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    results = RESULTS
    if not results:
        return
    write = terminalreporter.write_line
    terminalreporter.section("quality: fixture x expectation")
    width = max(len(fixture) for fixture, _ in results)
    for fixture in sorted({fixture for fixture, _ in results}):
        cells = [(check, outcome) for (name, check), outcome in results.items() if name == fixture]
        counts = {outcome: sum(1 for _, o in cells if o == outcome) for outcome in ("pass", "xfail", "FAIL", "XPASS", "skip")}
        write(f"{fixture:<{width}}  " + "  ".join(f"{n} {o}" for o, n in counts.items() if n))
        for check, outcome in cells:
            write(f"{'':<{width}}    {outcome:<5} {check}")
