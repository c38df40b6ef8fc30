"""The quality harness's plumbing: each fixture analysed once per run, and the fixture x expectation table at the end."""

from __future__ import annotations

import pytest
from quality_support import gemini_analysis, offline_analysis

RESULTS: dict[tuple[str, str], str] = {}  # (fixture, expectation) -> outcome, for the summary table


@pytest.fixture(scope="session")
def analyses():
    """``analyses(source, baseline=None)``: the offline analysis of a fixture, computed once per run."""
    return offline_analysis


@pytest.fixture(scope="session")
def gemini_analyses():
    """``gemini_analyses(source, recording)``: the Gemini analysis of a fixture, computed once per run."""
    return gemini_analysis


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
