"""``mldiag events`` and ``mldiag status`` ask the control plane at MLDIAG_API_URL, like every other command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mldiag.cli.main import app
from mldiag.services.event_archive import ArchivedEvent, Outcome

TOKEN = "s3cret-token-for-tests"
MLDIAG = str(Path(sys.executable).parent / "mldiag")
START_TIMEOUT_S = 60


def _archive(services, event_id: str, outcome: Outcome = Outcome.OK, function: str = "maintenance",
             age: timedelta = timedelta(minutes=5)) -> None:
    services.events.save(ArchivedEvent(
        id=event_id, function=function, type="google.cloud.pubsub.topic.v1.messagePublished", outcome=outcome,
        error="KeyError: 'data'" if outcome is Outcome.FAILED else "", first_received=services.now() - age,
        raw={"id": event_id, "specversion": "1.0", "source": "//pubsub.googleapis.com/projects/p/topics/ticks",
             "type": "google.cloud.pubsub.topic.v1.messagePublished",
             "data": {"message": {"data": "e30=", "messageId": event_id}}}))


def _mldiag(url: str, *args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env={"MLDIAG_API_URL": url, "COLUMNS": "200", **(env or {})})


def _json(result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
def test_events_and_status_come_from_the_control_plane_at_the_url_not_the_local_data_dir(start_server, tmp_path):
    first, second = start_server(), start_server()
    _archive(first.services, "only-in-first")
    _archive(second.services, "only-in-second")
    elsewhere = {"MLDIAG_DATA_DIR": str(tmp_path / "another-data-dir")}

    listed = _json(_mldiag(second.url, "events", "list", "--all", "--format", "json", env=elsewhere))
    assert [event["id"] for event in listed] == ["only-in-second"]
    status = _json(_mldiag(second.url, "status", "--format", "json", env=elsewhere))
    assert status["dataDir"] == str(second.services.settings.data_dir) and status["backend"] == "embedded"
    assert _json(_mldiag(first.url, "status", "--format", "json"))["dataDir"] == str(first.services.settings.data_dir)


def test_list_filters_and_show_has_the_raw_event(server, mldiag):
    _archive(server.services, "tick-1", age=timedelta(hours=2))
    _archive(server.services, "tick-2", outcome=Outcome.FAILED)
    failed = _json(mldiag("events", "list", "--outcome", "failed", "--since", "1h", "--all", "--format", "json"))
    assert [event["id"] for event in failed] == ["tick-2"]
    table = mldiag("events", "list", "--all")
    assert table.exit_code == 0 and "tick-1" in table.stdout and "KeyError" in table.stdout
    shown = _json(mldiag("events", "show", "maintenance:tick-2", "--format", "json"))
    assert shown["outcome"] == "failed" and shown["raw"]["id"] == "tick-2"


def test_replay_dry_run_and_to_topic_through_the_api(server, mldiag):
    _archive(server.services, "tick-2", outcome=Outcome.FAILED)
    dry = _json(mldiag("events", "replay", "--outcome", "failed", "--dry-run", "--format", "json"))
    assert dry == [{"key": "maintenance:tick-2", "function": "maintenance", "before": "failed",
                    "result": "would re-deliver to maintenance"}]
    topic = _json(mldiag("events", "replay", "tick-2", "--to", "topic", "--dry-run", "--format", "json"))
    assert topic[0]["result"] == "would re-publish to ticks"
    assert server.services.events.get("maintenance", "tick-2").replays == 0


def test_a_topic_the_control_plane_may_not_publish_to_is_a_failed_result_and_exit_1(server, mldiag, monkeypatch):
    _archive(server.services, "tick-2", outcome=Outcome.FAILED)

    def refused(topic, *args, **kwargs):
        raise PermissionError(f"the control plane may not publish to {topic}")

    monkeypatch.setattr(server.services.bus, "publish", refused)
    result = mldiag("events", "replay", "tick-2", "--to", "topic", "--format", "json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)[0]["result"] == (
        "failed to re-publish to ticks: PermissionError: the control plane may not publish to ticks")


def test_dead_letters_and_prune(server, mldiag):
    server.services.store.set("deadLetters", "t:1", {"messageId": "1", "deadLetterTopic": "ticks-dead-letter",
                                                     "lastError": "KeyError: 'data'",
                                                     "receivedAt": "2026-01-01T00:00:00.000000Z"})
    letters = _json(mldiag("events", "dead-letters", "--format", "json"))
    assert letters[0]["lastError"] == "KeyError: 'data'"
    server.services.events.save(ArchivedEvent(id="gone", function="maintenance",
                                              expire_at=server.services.now() - timedelta(days=1)))
    pruned = mldiag("events", "prune")
    assert pruned.exit_code == 0 and pruned.stdout.strip() == "pruned 1 event(s)"


@pytest.mark.parametrize(("args", "message"), [
    (("events", "list", "--since", "soon"), "since: 'soon' is neither a time"),
    (("events", "list", "--outcome", "bogus"), "outcome: Input should be"),
    (("events", "show", "nothing-here"), "NOT_FOUND: no archived event 'nothing-here'"),
    (("events", "replay", "x", "--to", "nowhere"), "to: Input should be 'local' or 'topic'"),
])
@pytest.mark.slow
def test_bad_input_is_one_line_from_the_server_and_exit_1(mldiag, args, message):
    result = mldiag(*args)
    assert result.exit_code == 1 and message in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_replay_without_events_or_filters_is_a_usage_error(mldiag):
    assert mldiag("events", "replay").exit_code == 2


@pytest.mark.slow
def test_a_control_plane_with_a_token_needs_it_for_events_and_status(start_server):
    guarded = start_server(api_token=TOKEN)
    for args in (("events", "list"), ("status",)):
        refused = _mldiag(guarded.url, *args)
        assert refused.exit_code == 1 and "UNAUTHENTICATED" in refused.stderr
        assert _mldiag(guarded.url, *args, "--token", TOKEN).exit_code == 0
        assert _mldiag(guarded.url, *args, env={"MLDIAG_API_TOKEN": TOKEN}).exit_code == 0


def test_an_unreachable_control_plane_is_named(mldiag):
    result = mldiag("status", "--api-url", "http://127.0.0.1:9")
    assert result.exit_code == 1 and "cannot reach the control plane at http://127.0.0.1:9" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", ["events", "status"])
def test_the_commands_load_no_backend(command):
    shown = subprocess.run(
        [sys.executable, "-c",
         "import sys; from mldiag.cli.main import run\n"
         "try:\n    run()\nexcept SystemExit:\n    pass\n"
         "print([m for m in ('mldiag.bootstrap', 'mldiag.services.event_archive', 'mldiag.services.operator.replay') if m in sys.modules])",
         command, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture
def mldiag_up(tmp_path) -> Iterator[tuple[str, Path]]:
    """``mldiag up --port 0`` in its own process over its own data dir, ticking maintenance often; (URL, data dir)."""
    data, log = tmp_path / "up-data", tmp_path / "up.log"
    env = {**{key: value for key, value in os.environ.items() if not key.startswith("MLDIAG_")},
           "MLDIAG_MAINTENANCE_INTERVAL_SECONDS": "0.2", "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as errors:
        process = subprocess.Popen([MLDIAG, "up", "--port", "0", "--no-otlp", "--data", str(data)], env=env,
                                   stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        banner, deadline = "", time.monotonic() + START_TIMEOUT_S
        while "Ctrl-C" not in banner:
            line = process.stdout.readline()
            assert line and time.monotonic() < deadline, banner + log.read_text()[-3000:]
            banner += line
        yield re.search(r"MLDIAG_API_URL=(\S+)\. ", banner)[1], data
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.mark.slow
def test_events_list_replay_and_status_need_nothing_but_the_api_url(mldiag_up, tmp_path):
    url, data = mldiag_up
    # Python's own path travels too, so that the subprocess imports the mldiag under test.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "MLDIAG_API_URL": url,
           **{key: os.environ[key] for key in ("PYTHONPATH",) if key in os.environ}}

    def mldiag(*args: str) -> object:
        result = subprocess.run([MLDIAG, *args, "--format", "json"], env=env, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0 and not result.stderr, result.stderr
        return json.loads(result.stdout)

    status = mldiag("status")
    assert status["dataDir"] == str(data) and status["backend"] == "embedded"
    deadline = time.monotonic() + 30
    while not (events := mldiag("events", "list", "--function", "maintenance")):
        assert time.monotonic() < deadline, "mldiag up archived no maintenance tick"
        time.sleep(0.2)
    key = f"maintenance:{events[0]['id']}"
    assert mldiag("events", "replay", key) == [
        {"key": key, "function": "maintenance", "before": "ok", "result": "no-op: was already ok"}]
    assert not (tmp_path / "home" / ".mldiag").exists()


def test_list_leaves_the_maintenance_ticks_out_unless_all_or_function_names_them(server, mldiag):
    for index in range(5):
        _archive(server.services, f"tick-{index}", age=timedelta(seconds=index))
    _archive(server.services, "alert-1", function="on_alert", age=timedelta(minutes=10))
    listed = _json(mldiag("events", "list", "--limit", "3", "--format", "json"))
    assert [event["id"] for event in listed] == ["alert-1"]
    everything = _json(mldiag("events", "list", "--all", "--format", "json"))
    assert len(everything) == 6
    ticks = _json(mldiag("events", "list", "--function", "maintenance", "--format", "json"))
    assert len(ticks) == 5
