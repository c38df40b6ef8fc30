"""What ``mldiag up`` shows a person: one line when it cannot listen, a sentence per thing that
happened, every bucket folder served; JSON lines for machines, in the log file and on request."""

from __future__ import annotations

import errno
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import structlog
from structlog.testing import capture_logs
from typer.testing import CliRunner

from mldiag import logs

from mldiag.services import event_archive
from mldiag.adapters.bus.inprocess import InProcessBus
from mldiag.cli.main import app
from mldiag.config import ANALYSIS_REQUESTS
from mldiag.domain.envelopes import Message, pubsub_cloud_event
from mldiag.domain.errors import PermanentFailure
from mldiag.local import http_server
from mldiag.local.server import session_page_link

RUN = "projects/p/locations/l/machineLearningRuns/run-1"
SESSION = f"{RUN}/profilerSessions/first-steps"
PAGE = "http://127.0.0.1:8080/ui/runs/run-1/sessions/first-steps"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    yield
    logs.close()
    structlog.reset_defaults()


def _up(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["up", *args])
    return result.exit_code, result.output.splitlines()


def test_a_taken_port_is_one_line_with_the_way_out_and_nothing_is_left_running(tmp_path, taken_port,
                                                                               restore_logging):
    threads = set(threading.enumerate())
    code, lines = _up("--port", str(taken_port), "--data", str(tmp_path / "data"))
    assert code == 1
    assert lines == [f"mldiag up: port {taken_port} on 127.0.0.1 is in use; "
                     "choose another with --port, or --port 0 for a free one"]
    assert set(threading.enumerate()) <= threads
    assert not (tmp_path / "data").exists()  # no database opened, no folders made


def test_listening_beyond_loopback_without_a_token_is_refused_in_one_line(tmp_path, monkeypatch, restore_logging):
    monkeypatch.setattr(http_server.HttpServer, "serve", lambda server, app: None)  # never serve, if not refused
    code, lines = _up("--host", "0.0.0.0", "--port", "0", "--no-otlp", "--data", str(tmp_path / "data"))
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith("mldiag up: listening on 0.0.0.0 port ")
    assert lines[0].endswith("with no MLDIAG_API_TOKEN lets anyone who reaches it change runs, read the operator "
                             "routes and post alerts; set MLDIAG_API_TOKEN (and MLDIAG_ALERT_TOKEN for the alert "
                             "webhooks), listen on 127.0.0.1, or pass --insecure to run open anyway")
    assert not (tmp_path / "data").exists()


def test_a_port_it_may_not_listen_on_is_one_line(tmp_path, monkeypatch, restore_logging):
    class Unprivileged(socket.socket):
        def bind(self, address):  # what binding port 80 without privileges raises
            raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(http_server.socket, "socket", Unprivileged)
    code, lines = _up("--port", "80", "--data", str(tmp_path / "data"))
    assert (code, lines) == (1, ["mldiag up: no permission to listen on port 80 of 127.0.0.1 (ports below 1024 "
                                 "need privileges); choose another with --port, or --port 0 for a free one"])


@pytest.mark.parametrize(("host", "says"), [
    ("no-such-host.invalid", "'no-such-host.invalid' is not a known host address; use --host 127.0.0.1"),
    ("192.0.2.1", "192.0.2.1 is not an address of this machine; use --host 127.0.0.1"),  # TEST-NET-1
])
def test_an_address_that_cannot_be_listened_on_is_one_line(tmp_path, host, says, restore_logging):
    code, lines = _up("--host", host, "--port", "0", "--data", str(tmp_path))
    assert code == 1 and len(lines) == 1 and lines[0].startswith(f"mldiag up: {says}")


def test_a_data_directory_that_cannot_be_used_is_one_line_and_nothing_is_left_running(tmp_path, restore_logging):
    (tmp_path / "a-file").write_text("not a folder")
    threads = set(threading.enumerate())
    code, lines = _up("--port", "0", "--data", str(tmp_path / "a-file" / "data"))
    assert code == 1
    assert lines == [f"mldiag up: cannot use the data directory {tmp_path / 'a-file' / 'data'}: Not a directory; "
                     "choose another with --data"]
    deadline = time.monotonic() + 10
    while not set(threading.enumerate()) <= threads and time.monotonic() < deadline:
        time.sleep(0.05)  # the server's worker threads end once they see it stopped
    assert set(threading.enumerate()) <= threads


def test_the_terminal_shows_what_happened_and_the_log_file_keeps_every_line(tmp_path, capsys, restore_logging):
    log_file = tmp_path / "logs" / "mldiag.log"
    logs.configure("console", log_file=log_file, session_link=session_page_link("http://127.0.0.1:8080"))
    log = structlog.get_logger("mldiag.test")
    log.info("event handled", detail="settled 0 session(s)", function="maintenance")
    log.info("session run-1/first-steps registered", notice=True, session=SESSION)
    with logs.event_context(function="analyze_session", event_id="e1", run=RUN, session=SESSION):
        log.warning("event rejected", error="analysis failed: not an xplane file")
    logging.getLogger("cheroot.test").warning("a library's warning")

    shown = capsys.readouterr().err.splitlines()
    assert [line.split("  ", 1)[1] for line in shown] == [
        f"session run-1/first-steps registered  {PAGE}",
        "warning: event rejected: analysis failed: not an xplane file "
        f"(function=analyze_session, session=run-1/first-steps)  {PAGE}",
        "warning: a library's warning",
    ]
    assert all(time.strptime(line.split("  ", 1)[0], "%H:%M:%S") for line in shown)
    written = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(line["severity"], line["message"]) for line in written] == [
        ("INFO", "event handled"), ("NOTICE", "session run-1/first-steps registered"),
        ("WARNING", "event rejected"), ("WARNING", "a library's warning")]
    assert written[2]["event_id"] == "e1" and written[2]["session"] == SESSION


def test_a_human_line_is_one_line_whatever_the_text_from_outside_holds(capsys, restore_logging):
    logs.configure("console")
    structlog.get_logger("mldiag.test").warning("files in exp\nfake line are not served", reason="bad\x1b[2Jname")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("warning: files in exp\\x0afake line are not served: bad\\x1b[2Jname")


def test_the_json_format_prints_every_line_in_cloud_loggings_shape(capsys, restore_logging):
    logs.configure("json")
    structlog.get_logger("mldiag.test").info("event handled", function="maintenance")
    structlog.get_logger("mldiag.test").info("session run-1/first-steps registered", notice=True)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(line["severity"], line["message"]) for line in lines] == [
        ("INFO", "event handled"), ("NOTICE", "session run-1/first-steps registered")]
    assert all(line["time"].endswith("Z") for line in lines)


def test_a_failed_analysis_is_one_warning_naming_its_session_and_page(embedded, capsys, restore_logging):
    logs.configure("console", session_link=session_page_link("http://127.0.0.1:8080"))
    request = Message(b"{}", {"session": SESSION, "run": RUN}, "m1")
    event = pubsub_cloud_event(project="p", topic=ANALYSIS_REQUESTS, subscription="analyze_session",
                               message=request, published=embedded.now())

    def fail(_):
        raise PermanentFailure("analysis failed: not an xplane file")

    event_archive.handle(embedded.events, "analyze_session", event, fail)
    assert [line.split("  ", 1)[1] for line in capsys.readouterr().err.splitlines()] == [
        "warning: event rejected: analysis failed: not an xplane file "
        f"(function=analyze_session, session=run-1/first-steps)  {PAGE}"]


def test_a_retried_delivery_is_routine_and_a_dead_letter_a_warning():
    bus = InProcessBus("p", max_attempts=2, min_backoff=0.001, max_backoff=0.01)

    def fail(_):
        raise RuntimeError("boom")

    bus.subscribe("topic", fail, name="fails")
    bus.publish("topic", b"{}")
    with capture_logs() as logged:
        bus.drain()
    assert [(line["log_level"], line["event"], line["attempt"]) for line in logged] == [
        ("info", "delivery failed; retrying", 1), ("warning", "delivery failed; sent to the dead-letter topic", 2)]


def test_our_lines_are_written_once_whatever_handlers_the_host_put_on_the_root(capsys, restore_logging):
    hosts = logging.StreamHandler(sys.stdout)  # as functions-framework's legacy mode adds
    logging.getLogger().addHandler(hosts)
    try:
        logs.configure("json")
        structlog.get_logger("mldiag.test").warning("event rejected", error="not a profile")
    finally:
        logging.getLogger().removeHandler(hosts)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert [json.loads(line)["message"] for line in captured.err.splitlines()] == ["event rejected"]


def test_an_unknown_log_format_is_refused():
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        logs.configure("xml")


@pytest.mark.parametrize(("args", "env", "chosen"), [
    ([], {}, "console"),
    ([], {"MLDIAG_LOG_FORMAT": "json"}, "json"),
    (["--log-format", "json"], {}, "json"),
    (["--log-format", "console"], {"MLDIAG_LOG_FORMAT": "json"}, "console"),
])
def test_the_terminal_is_human_unless_json_is_asked_for(monkeypatch, args, env, chosen):
    served = []
    monkeypatch.setattr("mldiag.local.server.serve", lambda settings, *rest, **options: served.append(settings))
    result = CliRunner().invoke(app, ["up", *args], env=env)
    assert result.exit_code == 0, result.output
    assert [settings.log_format for settings in served] == [chosen]
