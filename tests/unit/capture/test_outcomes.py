"""How a capture's end is named: the trace-failure timing rules, status errors, and real probes."""

from __future__ import annotations

import pytest

from mldiag.adapters.profiler.xprof_server import ProfilerServer, classify_status_error, classify_trace_failure
from mldiag.domain.capture import CaptureFailed, Failure, TracerLevels
from mldiag.services.capture.tasks import TaskResult
from mldiag.domain.errors import InvalidArgument


@pytest.mark.parametrize(("elapsed", "duration", "reachable", "expected"), [
    (0.01, 2.0, True, Failure.BUSY),  # refused at once: another session holds the profiler
    (0.99, 2.0, True, Failure.BUSY),
    (2.01, 2.0, True, Failure.EMPTY_TRACE),  # traced the whole duration, nothing to return
    (1.2, 2.0, True, Failure.EMPTY_TRACE),
    (31.9, 2.0, True, Failure.EMPTY_TRACE),
    (32.1, 2.0, True, Failure.TIMEOUT),  # long past the duration
    (0.01, 2.0, False, Failure.UNREACHABLE),  # the server is gone, whenever it ended
    (45.0, 2.0, False, Failure.UNREACHABLE),
])
def test_a_failed_trace_is_named_by_when_it_ended_and_whether_the_server_is_still_there(
        elapsed, duration, reachable, expected):
    assert classify_trace_failure(elapsed, duration, reachable) is expected


@pytest.mark.parametrize(("message", "expected"), [
    ("ALREADY_EXISTS: A profiling session is already running.", Failure.BUSY),
    ("UNAVAILABLE: failed to connect to all addresses", Failure.UNREACHABLE),
    ("DEADLINE_EXCEEDED: Deadline Exceeded", Failure.TIMEOUT),
    ("NOT_FOUND: No continuous profiling session found.", Failure.ERROR),
    ("something without a status", Failure.ERROR),
])
def test_continuous_profiling_errors_are_named_by_their_status(message, expected):
    assert classify_status_error(message) is expected


def test_every_failure_has_a_google_status_and_starts_its_message():
    assert Failure.BUSY.status == (6, "ALREADY_EXISTS")
    assert Failure.UNREACHABLE.status == (14, "UNAVAILABLE")
    assert Failure.TIMEOUT.status == (4, "DEADLINE_EXCEEDED")
    assert str(CaptureFailed(Failure.EMPTY_TRACE, "nothing")) == "empty trace: nothing"


def test_a_closed_port_is_unreachable_at_once(closed_port):
    with pytest.raises(CaptureFailed) as failed:
        ProfilerServer(f"127.0.0.1:{closed_port}").probe()
    assert failed.value.failure is Failure.UNREACHABLE
    assert "Connection refused" in str(failed.value)


@pytest.mark.slow
def test_a_port_that_accepts_but_never_speaks_grpc_is_a_timeout(silent_listener):
    server = ProfilerServer(f"127.0.0.1:{silent_listener.port}", probe_timeout_s=0.5)
    assert server.reachable()
    with pytest.raises(CaptureFailed) as failed:
        server.probe()
    assert failed.value.failure is Failure.TIMEOUT
    assert "stopped or hung" in str(failed.value)


def test_a_trace_against_a_closed_port_never_reaches_the_profiler_client(closed_port, tmp_path):
    with pytest.raises(CaptureFailed) as failed:
        ProfilerServer(f"127.0.0.1:{closed_port}").trace(str(tmp_path), "s1", "h-0", 1000, TracerLevels())
    assert failed.value.failure is Failure.UNREACHABLE
    assert not any(tmp_path.iterdir())


def test_a_task_result_crosses_the_wire_and_refuses_unknown_failures():
    result = TaskResult.failed(CaptureFailed(Failure.BUSY, "held"), note="n")
    assert TaskResult.from_json(result.to_json()) == result
    assert TaskResult.from_json(TaskResult(note="ok").to_json()).failure is None
    with pytest.raises(InvalidArgument, match="result.failure"):
        TaskResult.from_json({"failure": "exploded"})
