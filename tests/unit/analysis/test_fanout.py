"""Multi-host sessions fanned out over host analyses, end to end on the embedded bus with the committed profiles."""

from __future__ import annotations

import dataclasses
import json

import pytest
from analysis_support import xplane

from mldiag.config import ANALYSIS_REQUESTS, HOST_ANALYSIS_REQUESTS
from mldiag.domain import AnalysisState
from mldiag.domain.envelopes import Message, pubsub_cloud_event, storage_finalized_event
from mldiag.domain.host_analyses import HostAnalyses, HostState
from mldiag.domain.names import parse_child
from mldiag.entrypoints import handlers
from mldiag.local.server import wire_functions
from mldiag.services.analysis_jobs import STALE_MARGIN_SECONDS, retry_stale
from mldiag.services.event_archive import Outcome
from mldiag.services.fan_out import counter_key
from mldiag.services.registration import Registrar
from mldiag.services.resources.reanalysis import reanalyze

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

SESSION = "projects/p/locations/l/machineLearningRuns/run1/profilerSessions/s1"
FOLDER = "gs://profiles/run1/plugins/profile/s1"
HOSTS = ("h0", "h1", "h2", "h3")


def _add_file(services, host: str, data: bytes) -> None:
    uri = f"{FOLDER}/{host}.xplane.pb"
    written = services.blobs.write_bytes(uri, data)
    handlers.register_session(services, storage_finalized_event({
        "bucket": "profiles", "name": uri.removeprefix("gs://profiles/"), "generation": written.generation,
        "size": str(written.size)}))


def _analyse_hosts(services, clock, files: dict[str, bytes]) -> None:
    """Register the files as one session, settle it and deliver everything that follows on the embedded bus."""
    wire_functions(services, services.bus)
    for host, data in files.items():
        _add_file(services, host, data)
    clock.advance(services.settings.settle_seconds + 1)
    assert Registrar(services).settle_due() == 1
    services.bus.drain(timeout=600)


def _payloads(services, topic: str) -> list[dict]:
    return [json.loads(message.data) for message in services.bus.published[topic]]


def _progress(services) -> HostAnalyses:
    generation_set = services.sessions.get(SESSION).analysis.generation_set
    return HostAnalyses.model_validate(services.store.get(HostAnalyses.collection,
                                                          counter_key(SESSION, generation_set)))


def _redeliver(services, message: Message, topic: str, handler) -> Outcome:
    event = pubsub_cloud_event(project="p", topic=topic, subscription=topic, message=message,
                               published=services.now())
    return handler(services, event)


def _fan_out_undelivered(services, clock) -> None:
    """Four hosts registered and settled, their session fanned out; no host request delivered yet."""
    data = xplane("input_bound").read_bytes()
    for host in HOSTS:
        _add_file(services, host, data)
    clock.advance(services.settings.settle_seconds + 1)
    assert Registrar(services).settle_due() == 1
    request = services.bus.published[ANALYSIS_REQUESTS][-1]
    assert _redeliver(services, request, ANALYSIS_REQUESTS, handlers.analyze_session) is Outcome.OK


@pytest.fixture
def four_hosts(embedded, clock):
    """A session of four host files (one profile under four host names), analysed by fan-out."""
    data = xplane("input_bound").read_bytes()
    _analyse_hosts(embedded, clock, dict.fromkeys(HOSTS, data))
    return embedded


def test_four_hosts_are_four_host_requests_one_merge_and_one_report(four_hosts):
    services = four_hosts
    analysis = services.sessions.get(SESSION).analysis
    assert analysis.state is AnalysisState.DONE, analysis.error
    host_requests = _payloads(services, HOST_ANALYSIS_REQUESTS)
    assert sorted(request["host"] for request in host_requests) == list(HOSTS)
    assert {request["hostFile"] for request in host_requests} == {f"{FOLDER}/{host}.xplane.pb" for host in HOSTS}
    fan_out, merge = _payloads(services, ANALYSIS_REQUESTS)  # the session's request, then exactly one merge
    assert fan_out["merge"] is False and merge["merge"] is True and merge["hostFiles"] == fan_out["hostFiles"]
    reports = f"{FOLDER}/mldiag/{analysis.generation_set}"
    assert analysis.analysis_uri == f"{reports}/analysis.json"
    written = json.loads(services.blobs.read_bytes(analysis.analysis_uri))
    assert [host["host"] for host in written["hosts"]] == list(HOSTS)
    assert written["profile"]["files"] == [f"{host}.xplane.pb" for host in HOSTS]
    assert written["missing_hosts"] == {}
    assert all(tool["host"] in HOSTS for tool in written["tools"])
    assert analysis.top_finding.startswith("P0 Host-bound")
    # The follow-ups ran on one host's file (every host needed attention alone), with its raw events read.
    assert written["followups"] and all(f["status"] in ("ok", "no_data") for f in written["followups"])
    for host in HOSTS:
        evidence = json.loads(services.blobs.read_bytes(f"{reports}/hosts/{host}.json"))
        assert evidence["host"] == host and evidence["evidence"]["host"] == host
    progress = _progress(services)
    assert progress.finished == 4 and progress.merge_requested
    assert {host: p.state for host, p in progress.hosts.items()} == dict.fromkeys(HOSTS, HostState.DONE)


def test_a_redelivered_host_request_changes_nothing(four_hosts):
    services = four_hosts
    before = (_progress(services), services.blobs.read_bytes(services.sessions.get(SESSION).analysis.analysis_uri))
    published = {topic: len(messages) for topic, messages in services.bus.published.items()}
    message = services.bus.published[HOST_ANALYSIS_REQUESTS][0]
    # Pub/Sub's redelivery (the same message) and a second copy of the request (a new message id).
    assert _redeliver(services, message, HOST_ANALYSIS_REQUESTS, handlers.analyze_host) is Outcome.DUPLICATE
    copy = dataclasses.replace(message, message_id=message.message_id + "-copy")
    assert _redeliver(services, copy, HOST_ANALYSIS_REQUESTS, handlers.analyze_host) is Outcome.IGNORED
    merge = services.bus.published[ANALYSIS_REQUESTS][-1]
    merge_copy = dataclasses.replace(merge, message_id=merge.message_id + "-copy")
    assert _redeliver(services, merge_copy, ANALYSIS_REQUESTS, handlers.analyze_session) is Outcome.IGNORED
    services.bus.drain(timeout=60)
    after = (_progress(services), services.blobs.read_bytes(services.sessions.get(SESSION).analysis.analysis_uri))
    assert after == before
    assert {topic: len(messages) for topic, messages in services.bus.published.items()} == published
    assert services.events.get("analyze_host", copy.message_id).detail == "host h0 already DONE"


def test_a_host_that_cannot_be_read_is_named_in_the_report(embedded, clock):
    data = xplane("input_bound").read_bytes()
    _analyse_hosts(embedded, clock, {"h0": data, "h1": data, "h2": data, "h3": data[: len(data) // 2]})
    analysis = embedded.sessions.get(SESSION).analysis
    assert analysis.state is AnalysisState.DONE, analysis.error
    written = json.loads(embedded.blobs.read_bytes(analysis.analysis_uri))
    assert [host["host"] for host in written["hosts"]] == ["h0", "h1", "h2"]
    assert list(written["missing_hosts"]) == ["h3"] and "unreadable profile" in written["missing_hosts"]["h3"]
    page = embedded.blobs.read_bytes(analysis.report_uri).decode()
    assert "1 of 4 hosts are missing from this analysis" in page and "unreadable profile" in page
    assert len(_payloads(embedded, ANALYSIS_REQUESTS)) == 2


def test_a_host_that_exhausts_its_retries_is_counted_failed_by_its_dead_letter(embedded, clock, monkeypatch):
    download = embedded.blobs.download

    def flaky(uri, target):
        if uri.endswith("/h2.xplane.pb"):
            raise OSError("connection reset by peer")
        return download(uri, target)

    monkeypatch.setattr(embedded.blobs, "download", flaky)
    data = xplane("input_bound").read_bytes()
    _analyse_hosts(embedded, clock, dict.fromkeys(HOSTS, data))
    assert [letter.message.json()["host"] for letter in embedded.bus.dead_letters] == ["h2"]
    analysis = embedded.sessions.get(SESSION).analysis
    assert analysis.state is AnalysisState.DONE, analysis.error
    written = json.loads(embedded.blobs.read_bytes(analysis.analysis_uri))
    assert [host["host"] for host in written["hosts"]] == ["h0", "h1", "h3"]
    reason = written["missing_hosts"]["h2"]
    assert reason.startswith("gave up after every delivery attempt") and "connection reset by peer" in reason


def test_every_host_failing_fails_the_analysis_naming_each(embedded, clock):
    data = xplane("input_bound").read_bytes()[:1000]
    _analyse_hosts(embedded, clock, {"h0": data, "h1": data})
    analysis = embedded.sessions.get(SESSION).analysis
    assert analysis.state is AnalysisState.FAILED
    assert analysis.error.startswith("no host could be analysed: h0: unreadable profile")
    assert "h1: unreadable profile" in analysis.error


def test_below_the_threshold_a_multi_host_session_is_analysed_in_one_process(embedded, clock):
    embedded.settings.fan_out_min_hosts = 3
    data = xplane("input_bound").read_bytes()
    _analyse_hosts(embedded, clock, {"h0": data, "h1": data})
    analysis = embedded.sessions.get(SESSION).analysis
    assert analysis.state is AnalysisState.DONE
    assert HOST_ANALYSIS_REQUESTS not in embedded.bus.published
    assert len(_payloads(embedded, ANALYSIS_REQUESTS)) == 1
    written = json.loads(embedded.blobs.read_bytes(analysis.analysis_uri))
    assert [host["host"] for host in written["hosts"]] == ["h0", "h1"]
    assert {tool["host"] for tool in written["tools"]} == {""}


def test_asking_again_analyses_every_host_again(four_hosts):
    services = four_hosts
    reanalyze(services, parse_child(SESSION))
    services.bus.drain(timeout=600)
    analysis = services.sessions.get(SESSION).analysis
    assert analysis.state is AnalysisState.DONE
    assert sorted(request["host"] for request in _payloads(services, HOST_ANALYSIS_REQUESTS)) == sorted(HOSTS * 2)
    assert [bool(request.get("merge")) for request in _payloads(services, ANALYSIS_REQUESTS)] == [
        False, True, False, True]
    assert _progress(services).finished == 4


def test_maintenance_asking_again_keeps_the_count_under_way(embedded, clock):
    _fan_out_undelivered(embedded, clock)
    assert len(embedded.bus.published[HOST_ANALYSIS_REQUESTS]) == 4  # published, none delivered yet
    clock.advance(embedded.settings.analysis_timeout_seconds + STALE_MARGIN_SECONDS + 1)
    assert retry_stale(embedded) == (1, 0)
    again = embedded.bus.published[ANALYSIS_REQUESTS][-1]
    assert _redeliver(embedded, again, ANALYSIS_REQUESTS, handlers.analyze_session) is Outcome.OK
    assert embedded.events.get("analyze_session", again.message_id).detail == (
        "already fanned out to 4 hosts (0 of 4 hosts finished)")
    assert len(embedded.bus.published[HOST_ANALYSIS_REQUESTS]) == 4


def test_a_fan_out_whose_hosts_keep_finishing_is_not_asked_again(embedded, clock):
    _fan_out_undelivered(embedded, clock)
    limit = embedded.settings.analysis_timeout_seconds + STALE_MARGIN_SECONDS
    clock.advance(limit - 10)  # a round of instances ends: one host finishes just inside the limit
    first_host = embedded.bus.published[HOST_ANALYSIS_REQUESTS][0]
    assert _redeliver(embedded, first_host, HOST_ANALYSIS_REQUESTS, handlers.analyze_host) is Outcome.OK
    assert _progress(embedded).finished == 1
    clock.advance(20)  # past the limit since the analysis started, not since the last host finished
    assert retry_stale(embedded) == (0, 0)
    clock.advance(limit)  # no host has finished for longer than the limit: the analysis is asked for again
    assert retry_stale(embedded) == (1, 0)
