"""Analyses computed ahead in worker processes are the ones the tests would compute, errors included."""

from __future__ import annotations

from typing import Any

import pytest
from quality_support import PREFETCH_WORKERS_VARIABLE, Prefetch, load_expectations, offline_analysis, prefetch_workers

from mldiag.analysis import UnreadableProfile

pytestmark = pytest.mark.quality

SOURCE = load_expectations()["input_bound"]["source"]


def _without_timings(value: Any) -> Any:
    """``value`` less the ``seconds`` each step of the analysis took, which differ from one run to the next."""
    if isinstance(value, dict):
        return {key: _without_timings(item) for key, item in value.items() if key != "seconds"}
    if isinstance(value, list):
        return [_without_timings(item) for item in value]
    return value


def test_a_prefetched_analysis_is_the_one_computed_here():
    prefetch = Prefetch([("offline_analysis", (SOURCE, None))], workers=1)
    try:
        prefetched = prefetch.result(("offline_analysis", (SOURCE, None)))
    finally:
        prefetch.stop()
    assert prefetched is not None
    assert _without_timings(prefetched) == _without_timings(offline_analysis.__wrapped__(SOURCE))


def test_an_analysis_that_fails_in_a_worker_fails_here_with_its_own_error(monkeypatch: pytest.MonkeyPatch):
    missing = "tests/fixtures/profiles/no_such_fixture/fixture-host.xplane.pb"
    prefetch = Prefetch([("offline_analysis", (missing, None))], workers=1)
    monkeypatch.setattr(Prefetch, "running", prefetch)
    try:
        assert prefetch.result(("offline_analysis", (missing, None))) is None
        with pytest.raises(UnreadableProfile, match="does not exist"):
            offline_analysis.__wrapped__(missing)
    finally:
        prefetch.stop()


def test_the_number_of_workers_is_a_whole_number(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(PREFETCH_WORKERS_VARIABLE, "0")
    assert prefetch_workers() == 0
    monkeypatch.setenv(PREFETCH_WORKERS_VARIABLE, "two")
    with pytest.raises(ValueError, match=f"{PREFETCH_WORKERS_VARIABLE} is a number of processes"):
        prefetch_workers()
