"""Every CLI option that takes a duration reads the one syntax and says what is wrong in it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from mldiag.domain import AnalysisState, AnalysisStatus, ProfilerSession
from mldiag.services.event_archive import ArchivedEvent

ON_RUN = ("--machine-learning-run", "r1")


@pytest.fixture
def analysed(mldiag, server) -> None:
    """Session s1 of run r1, with a report to share."""
    run = json.loads(mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles",
                            "--format", "json").stdout)
    report_uri = "gs://profiles/r1/plugins/profile/s1/summary.html"
    server.services.blobs.write_bytes(report_uri, b"<html></html>")
    server.services.sessions.create(ProfilerSession(
        name=f"{run['name']}/profilerSessions/s1",
        analysis=AnalysisStatus(state=AnalysisState.DONE, report_uri=report_uri),
    ))


def test_share_ttl_takes_days_and_combined_units(mldiag, analysed):
    before = datetime.now(timezone.utc)
    shared = mldiag("profiler-session", "share", "s1", *ON_RUN, "--ttl", "1d12h", "--format", "json")
    assert shared.exit_code == 0, shared.output
    expires = datetime.fromisoformat(json.loads(shared.stdout)["expireTime"].replace("Z", "+00:00"))
    assert timedelta(hours=36) <= expires - before < timedelta(hours=36, minutes=1)


@pytest.mark.slow
def test_share_ttl_beyond_the_limit_says_the_limit(mldiag, analysed):
    refused = mldiag("profiler-session", "share", "s1", *ON_RUN, "--ttl", "8d")
    assert refused.exit_code == 1 and "ttl: must be at most 7d" in refused.stderr
    assert "days," not in refused.stderr and "0:0" not in refused.stderr


@pytest.mark.parametrize(("args", "reason"), [
    (("profiler-session", "share", "s1", *ON_RUN, "--ttl", "99999999999999999s"), "too long a duration"),
    (("profiler-session", "share", "s1", *ON_RUN, "--ttl", "soon"), "not a duration: 'soon'"),
    (("profiler-session", "capture", "s1", *ON_RUN, "--duration", "1e308"), "not a duration: '1e308'"),
    (("machine-learning-run", "set-auto-capture", "r1", "--cooldown", "99999999999999999s"), "too long a duration"),
    (("machine-learning-run", "set-auto-capture", "r1", "--duration", "2"), "not a duration: '2'"),
])
def test_a_value_that_is_no_duration_is_a_usage_error(mldiag, args, reason):
    result = mldiag(*args)
    assert result.exit_code == 2 and reason in result.stderr and "Traceback" not in result.output


def test_capture_duration_beyond_the_limit_says_the_limit(mldiag):
    mldiag("machine-learning-run", "create", "r1", "--gcs-path", "gs://profiles")
    refused = mldiag("profiler-session", "capture", "s1", *ON_RUN, "--duration", "10m")
    assert refused.exit_code == 1 and "duration: must be at most 5m" in refused.stderr


def test_auto_capture_takes_combined_units(mldiag):
    mldiag("machine-learning-run", "create", "r1")
    policy = mldiag("machine-learning-run", "set-auto-capture", "r1", "--cooldown", "1h30m", "--duration", "2.5s",
                    "--format", "json")
    assert policy.exit_code == 0, policy.output
    assert json.loads(policy.stdout)["cooldown"] == "5400.000s" and json.loads(policy.stdout)["duration"] == "2.500s"


def test_auto_capture_refuses_a_duration_no_capture_takes(mldiag):
    mldiag("machine-learning-run", "create", "r1")
    refused = mldiag("machine-learning-run", "set-auto-capture", "r1", "--duration", "10m")
    assert refused.exit_code == 1 and "duration: must be at most 5m" in refused.stderr


@pytest.fixture
def archive(server):
    """Two archived events, received two days and one hour before now, in the control plane's archive."""
    for event_id, age in (("old", timedelta(days=2)), ("recent", timedelta(hours=1))):
        server.services.events.save(ArchivedEvent(id=event_id, function="register_session",
                                                  first_received=server.services.now() - age))
    return server.services


@pytest.mark.parametrize(("args", "listed"), [
    (("--since", "1d"), ["recent"]),
    (("--since", "3d"), ["recent", "old"]),
    (("--since", "1d12h"), ["recent"]),
    (("--until", "1d"), ["old"]),
    (("--since", "2999-01-01T00:00:00Z"), []),
])
def test_events_since_and_until_take_durations(mldiag, archive, args, listed):
    result = mldiag("events", "list", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    assert [record["id"] for record in json.loads(result.stdout)] == listed


@pytest.mark.parametrize(("value", "reason"), [
    ("yesterday", "'yesterday' is neither a time"),
    ("3652500d", "'3652500d' ago is before the year 1"),
    ("99999999999999999s", "'99999999999999999s' is neither a time"),
])
def test_events_since_refuses_what_is_no_time(mldiag, archive, value, reason):
    result = mldiag("events", "list", "--since", value)
    assert result.exit_code == 1 and f"INVALID_ARGUMENT: since: {reason}" in result.stderr
    assert "Traceback" not in result.output
