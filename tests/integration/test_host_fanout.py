"""A multi-host session fanned out over host analyses on the devstack: Pub/Sub, Firestore and the bucket emulated.

Four host files of one programmatic session land in the bucket; the devstack's
functions host runs ``register_session``, then ``analyze_session`` (which fans
the session out), ``analyze_host`` once per host from the
``host-analysis-requests`` push subscription, and ``analyze_session`` again
for the one merge the last host asks for. The test writes the files, reads
Firestore and the bucket, and counts the messages each function received in
the event archive.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

import pytest

from mldiag.bootstrap import build
from mldiag.config import HOST_ANALYSIS_REQUESTS
from mldiag.domain import AnalysisState, Kind, MachineLearningRun, ProfilerSession
from mldiag.domain.host_analyses import HostAnalyses
from mldiag.domain.names import LocationName
from mldiag.services.dependencies import Services
from mldiag.services.event_archive import Outcome
from mldiag.services.fan_out import counter_key

pytestmark = pytest.mark.emulator

PROFILE = next((Path(__file__).resolve().parents[1] / "fixtures" / "profiles" / "input_bound").rglob("*.xplane.pb"))
HOSTS = ("host-0", "host-1", "host-2", "host-3")
ANALYSIS_TIMEOUT_S = 300


def _session(services: Services) -> tuple[str, str]:
    """A programmatic session expecting the four hosts (it settles once their files are there); its name and
    folder."""
    run_id = f"fanout-it-{uuid.uuid4().hex[:8]}"
    run = services.runs.create(MachineLearningRun(
        name=str(LocationName(services.settings.project, services.settings.location).run(run_id)),
        artifacts={"gcsPath": f"gs://{services.settings.bucket}"}))
    name = f"{run.name}/profilerSessions/s1"
    services.sessions.create(ProfilerSession(name=name, kind=Kind.KIND_PROGRAMMATIC, profiler_targets=list(HOSTS)))
    return name, f"gs://{services.settings.bucket}/{run_id}/plugins/profile/s1"


def _finished(services: Services, name: str) -> ProfilerSession:
    deadline = time.monotonic() + ANALYSIS_TIMEOUT_S
    while True:
        session = services.sessions.find(name)
        if session is not None and session.analysis.state in (AnalysisState.DONE, AnalysisState.FAILED):
            return session
        assert time.monotonic() < deadline, f"timed out waiting for the analysis: {session and session.analysis}"
        time.sleep(0.5)


def _received(services: Services, function: str, session: str) -> list[dict]:
    """The messages ``function`` received for ``session``, from its archived events."""
    payloads = []
    for event in services.events.list(function=function, limit=1000):
        encoded = (event.raw or {}).get("data", {}).get("message", {}).get("data", "")
        payload = json.loads(base64.b64decode(encoded)) if encoded else {}
        if payload.get("session") == session:
            payloads.append(payload | {"outcome": event.outcome})
    return payloads


def _progress(services: Services, session: ProfilerSession) -> HostAnalyses:
    key = counter_key(session.name, session.analysis.generation_set)
    return HostAnalyses.model_validate(services.store.get(HostAnalyses.collection, key))


def test_four_hosts_fan_out_merge_once_and_a_redelivery_changes_nothing(devstack):
    services = build()
    name, folder = _session(services)
    for host in HOSTS:
        services.blobs.write_bytes(f"{folder}/{host}.xplane.pb", PROFILE.read_bytes())

    session = _finished(services, name)
    assert session.analysis.state is AnalysisState.DONE, session.analysis
    host_requests = _received(services, "analyze_host", name)
    assert sorted(request["host"] for request in host_requests) == list(HOSTS)
    assert all(request["outcome"] is Outcome.OK for request in host_requests)
    requests = _received(services, "analyze_session", name)
    assert sorted(bool(request.get("merge")) for request in requests) == [False, True]  # the fan-out, one merge
    report = json.loads(services.blobs.read_bytes(session.analysis.analysis_uri))
    assert [host["host"] for host in report["hosts"]] == list(HOSTS) and report["missing_hosts"] == {}
    reports = session.analysis.analysis_uri.rsplit("/", 1)[0]
    assert sorted(blob.uri.rsplit("/", 1)[-1] for blob in services.blobs.list(f"{reports}/hosts/")) == [
        f"{host}.json" for host in HOSTS]

    before = _progress(services, session)
    first = next(request for request in host_requests if request["host"] == HOSTS[0])
    services.bus.publish(HOST_ANALYSIS_REQUESTS, json.dumps({key: value for key, value in first.items()
                                                             if key != "outcome"}).encode())
    deadline = time.monotonic() + 60
    while len(_received(services, "analyze_host", name)) < len(HOSTS) + 1:
        assert time.monotonic() < deadline, "the redelivered host request was not delivered"
        time.sleep(0.5)
    redelivered = [r for r in _received(services, "analyze_host", name) if r["outcome"] is not Outcome.OK]
    assert [r["outcome"] for r in redelivered] == [Outcome.IGNORED]
    assert _progress(services, session) == before
    assert len(_received(services, "analyze_session", name)) == 2
    assert services.sessions.get(name).analysis == session.analysis


def test_a_host_that_fails_is_named_in_the_report(devstack):
    services = build()
    name, folder = _session(services)
    data = PROFILE.read_bytes()
    for host in HOSTS:
        services.blobs.write_bytes(f"{folder}/{host}.xplane.pb", data[: len(data) // 2] if host == "host-2" else data)

    session = _finished(services, name)
    assert session.analysis.state is AnalysisState.DONE, session.analysis
    report = json.loads(services.blobs.read_bytes(session.analysis.analysis_uri))
    assert [host["host"] for host in report["hosts"]] == ["host-0", "host-1", "host-3"]
    assert list(report["missing_hosts"]) == ["host-2"]
    assert report["missing_hosts"]["host-2"].startswith("unreadable profile")
    page = services.blobs.read_bytes(session.analysis.report_uri).decode()
    assert "host-2" in page and "1 of 4 hosts are missing from this analysis" in page
