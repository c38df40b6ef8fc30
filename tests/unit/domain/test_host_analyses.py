"""The counter document of a fanned-out analysis: each host counted once, the merge asked for once."""

from __future__ import annotations

import pytest

from mldiag.domain.host_analyses import HostAnalyses, HostProgress, HostState, followups_host

FILES = {host: f"gs://b/r/plugins/profile/s/{host}.xplane.pb" for host in ("h0", "h1", "h2")}


def _done(host: str, status: str = "OPTIMAL", step_time_ms: float | None = 10.0) -> HostProgress:
    return HostProgress(file=FILES[host], state=HostState.DONE, evidence_uri=f"gs://b/{host}.json", status=status,
                        step_time_ms=step_time_ms)


def test_each_host_counts_once_and_only_the_last_asks_for_the_merge():
    progress = HostAnalyses.of("s", "g", FILES)
    assert progress.record("h0", _done("h0")) and not progress.take_merge()
    assert not progress.record("h0", HostProgress(file=FILES["h0"], state=HostState.FAILED, reason="late"))
    assert progress.hosts["h0"].state is HostState.DONE and progress.finished == 1
    assert progress.record("h1", HostProgress(file=FILES["h1"], state=HostState.FAILED, reason="out of memory"))
    assert progress.record("h2", _done("h2"))
    assert progress.take_merge() and not progress.take_merge()
    assert progress.missing == {"h1": "out of memory"} and list(progress.done) == ["h0", "h2"]


def test_the_document_round_trips_in_camel_case():
    progress = HostAnalyses.of("s", "g", FILES)
    progress.record("h1", _done("h1"))
    document = progress.to_document()
    assert document["generationSet"] == "g" and document["hosts"]["h1"]["evidenceUri"] == "gs://b/h1.json"
    assert HostAnalyses.model_validate(document) == progress


def test_an_outcome_is_done_or_failed():
    with pytest.raises(ValueError, match="DONE or FAILED"):
        HostAnalyses.of("s", "g", FILES).record("h0", HostProgress(file=FILES["h0"]))


def test_follow_ups_read_the_slowest_host_that_needs_attention():
    done = {"h0": _done("h0", "NEEDS_ATTENTION", 12.0), "h1": _done("h1", "OPTIMAL", 30.0),
            "h2": _done("h2", "NEEDS_ATTENTION", 20.0)}
    assert followups_host(done) == "h2"
    assert followups_host({"h1": done["h1"]}) == ""
