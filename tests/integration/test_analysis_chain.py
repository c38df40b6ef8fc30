"""A profile lands in the bucket; its report lands next to it: the whole chain on the devstack.

fake-gcs-server publishes the finalize notification, the devstack's functions
host runs ``register_session`` (through its Eventarc adapter) and, once the
session has settled, ``analyze_session`` from the ``analysis-requests`` push
subscription; the test only writes the file and reads Firestore and the bucket.

Settling is made deterministic rather than waited for by luck: a session whose
hosts the SDK announced (PROGRAMMATIC, with its targets) settles as soon as
every host's file is there; a session found in the bucket (SCANNED) settles
once its window (``MLDIAG_SETTLE_SECONDS``, 30 s unless the devstack's
environment says otherwise) has passed, on the next maintenance tick, which the
test publishes the way Cloud Scheduler would, after ``settleAfter``.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mldiag.bootstrap import build
from mldiag.services.dependencies import Services
from mldiag.config import MAINTENANCE_TICKS
from mldiag.domain import AnalysisState, HealthStatus, Kind, MachineLearningRun, ProfilerSession
from mldiag.domain.names import LocationName

pytestmark = pytest.mark.emulator

PROFILE = Path(__file__).resolve().parents[1] / "fixtures" / "profiles" / "input_bound"
ANALYSIS_TIMEOUT_S = 180


def _wait_for(services: Services, name: str, done, what: str, timeout_s: float) -> ProfilerSession:
    deadline = time.monotonic() + timeout_s
    while True:
        session = services.sessions.find(name)
        if session is not None and done(session):
            return session
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {session and session.analysis}"
        time.sleep(0.5)


def _write_profile(services: Services, run_folder: str) -> str:
    uri = f"gs://{services.settings.bucket}/{run_folder}/plugins/profile/s1/host-0.xplane.pb"
    services.blobs.write_bytes(uri, next(PROFILE.rglob("*.xplane.pb")).read_bytes())
    return uri.rsplit("/", 1)[0]


def _assert_analysed(services: Services, session: ProfilerSession, folder: str) -> None:
    analysis = session.analysis
    assert analysis.state is AnalysisState.DONE, analysis
    assert analysis.health is HealthStatus.NEEDS_ATTENTION and analysis.reasoner == "offline"
    reports = f"{folder}/mldiag/{analysis.generation_set}"
    assert (analysis.report_uri, analysis.analysis_uri) == (f"{reports}/summary.html", f"{reports}/analysis.json")
    report = json.loads(services.blobs.read_bytes(analysis.analysis_uri))
    assert report["status"] == "NEEDS_ATTENTION" and report["findings"][0]["category"] == "input_bound"
    assert b"NEEDS ATTENTION" in services.blobs.read_bytes(analysis.report_uri)
    assert analysis.top_finding.startswith("P0 ")


def test_a_programmatic_session_is_analysed_as_soon_as_its_hosts_file_lands(devstack):
    services = build()
    run_id = f"analysis-it-{uuid.uuid4().hex[:8]}"
    run = services.runs.create(MachineLearningRun(
        name=str(LocationName(services.settings.project, services.settings.location).run(run_id)),
        artifacts={"gcsPath": f"gs://{services.settings.bucket}"}))
    name = f"{run.name}/profilerSessions/s1"
    services.sessions.create(ProfilerSession(name=name, kind=Kind.KIND_PROGRAMMATIC, profiler_targets=["host-0"]))

    folder = _write_profile(services, run_id)

    session = _wait_for(services, name, lambda s: s.analysis.state in (AnalysisState.DONE, AnalysisState.FAILED),
                        "the analysis", ANALYSIS_TIMEOUT_S)
    _assert_analysed(services, session, folder)


def test_a_session_found_in_the_bucket_is_analysed_once_it_has_settled(devstack):
    services = build()
    run_id = f"analysis-it-{uuid.uuid4().hex[:8]}"
    folder = _write_profile(services, run_id)
    name = f"{LocationName(services.settings.project, services.settings.location).run(run_id)}/profilerSessions/s1"

    registered = _wait_for(services, name, lambda s: bool(s.host_files), "registration", 60)
    assert registered.kind is Kind.KIND_SCANNED
    if registered.settle_after is not None:  # not settled at once (a zero window would have)
        time.sleep(max(0.0, (registered.settle_after - datetime.now(timezone.utc)).total_seconds()) + 1)
        services.bus.publish(MAINTENANCE_TICKS, b"{}")

    session = _wait_for(services, name, lambda s: s.analysis.state in (AnalysisState.DONE, AnalysisState.FAILED),
                        "the analysis", ANALYSIS_TIMEOUT_S)
    _assert_analysed(services, session, folder)
