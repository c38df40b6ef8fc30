"""On-demand capture against ``mldiag up``: real JAX workloads serving the profiler, captured by the CLI.

The capture function connects to each registered target; the workload's
profiler server writes ``<run>/plugins/profile/<session>/<target>.xplane.pb``
into the local bucket; the bucket watcher announces it, registration adds it
to the session and asks for its analysis.
"""

from __future__ import annotations

import json
import signal

import pytest

from capture_support import create_run, mldiag, profile_file, register_target, session, wait_for

pytestmark = pytest.mark.slow

RUN = "capture-on-demand"


@pytest.fixture(scope="module")
def two_targets(control_plane, workloads):
    create_run(control_plane, RUN)
    started = workloads(2)
    for index, workload in enumerate(started):
        register_target(control_plane, RUN, f"worker-{index}", workload.port, node_index=index)
    return started


def analysed_files(control_plane, session_id: str) -> dict | None:
    described = session(control_plane, RUN, session_id)
    return described if described["analysis"]["state"] != "NOT_STARTED" else None


def test_two_targets_are_captured_into_one_session_that_goes_to_analysis(control_plane, two_targets):
    captured = mldiag(control_plane, "profiler-session", "capture", "s1", "--machine-learning-run", RUN,
                      "--duration", "1500ms", "--format", "json")
    assert captured.returncode == 0, captured.stderr

    for target in ("worker-0", "worker-1"):
        assert profile_file(control_plane, RUN, "s1", target).stat().st_size > 10_000
    described = wait_for(lambda: analysed_files(control_plane, "s1"), "the analysis request")
    assert described["kind"] == "KIND_ON_DEMAND"
    assert {t: s["sessionPhase"] for t, s in described["targetSessions"].items()} == {
        "worker-0": "SUCCEEDED", "worker-1": "SUCCEEDED"}
    assert sorted(described["hostFiles"]) == ["worker-0", "worker-1"]
    assert described["storageFolderUri"] == f"gs://mldiag-profiles/{RUN}/plugins/profile/s1"


def test_the_profiler_clients_native_lines_go_to_the_log_file_not_the_terminal(control_plane, two_targets):
    captured = mldiag(control_plane, "profiler-session", "capture", "native-lines", "--machine-learning-run", RUN,
                      "--targets", "worker-0", "--duration", "500ms")
    assert captured.returncode == 0, captured.stderr
    log_file = control_plane.bucket_folder.parents[1] / "logs" / "mldiag.log"

    def native() -> list[str]:
        return [json.loads(line)["message"] for line in log_file.read_text().splitlines() if '"mldiag.native"' in line]

    # Native lines reach the log file through a reader thread (local/native_stderr.py), a moment after the capture.
    wait_for(lambda: any("profiler_client.cc" in line for line in native()), "the profiler client's native lines")
    terminal = control_plane.log.read_text().splitlines()  # mldiag up's stderr, JSON lines here
    assert [line for line in terminal if not line.startswith("{")] == []


def test_a_target_killed_before_the_capture_fails_unreachable_and_the_other_succeeds(control_plane, two_targets):
    two_targets[1].kill()
    captured = mldiag(control_plane, "profiler-session", "capture", "s2", "--machine-learning-run", RUN,
                      "--duration", "1s", "--format", "json")
    assert captured.returncode == 0, captured.stderr
    assert "target worker-1 failed: unreachable: cannot connect" in captured.stderr

    described = wait_for(lambda: analysed_files(control_plane, "s2"), "the analysis request")
    phases = {t: s["sessionPhase"] for t, s in described["targetSessions"].items()}
    assert phases == {"worker-0": "SUCCEEDED", "worker-1": "FAILED"}
    assert described["targetSessions"]["worker-1"]["error"].startswith("unreachable: cannot connect to 127.0.0.1:")
    assert list(described["hostFiles"]) == ["worker-0"]
    assert not profile_file(control_plane, RUN, "s2", "worker-1").exists()


def test_a_capture_naming_an_unregistered_address_is_refused_before_any_work(control_plane, two_targets):
    unregistered = f"127.0.0.1:{two_targets[0].port}"
    refused = mldiag(control_plane, "profiler-session", "capture", "s3", "--machine-learning-run", RUN,
                     "--targets", unregistered)
    assert refused.returncode == 1
    assert f"'{unregistered}' is not a profiler target registered for run {RUN}" in refused.stderr
    missing = mldiag(control_plane, "profiler-session", "describe", "s3", "--machine-learning-run", RUN)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_a_capture_with_every_tracer_off_is_an_empty_trace_not_a_success(control_plane, two_targets):
    captured = mldiag(control_plane, "profiler-session", "capture", "quiet", "--machine-learning-run", RUN,
                      "--targets", "worker-0", "--duration", "1s", "--host-tracer-level", "disabled",
                      "--device-tracer-level", "disabled", "--python-tracer-level", "disabled")
    assert captured.returncode == 1
    error = session(control_plane, RUN, "quiet")["targetSessions"]["worker-0"]["error"]
    assert error.startswith(f"empty trace: 127.0.0.1:{two_targets[0].port} traced for 1s but collected no trace events")


def test_a_profile_the_workload_cannot_write_is_an_error_that_says_so(control_plane, two_targets):
    blocked = "capture-unwritable"
    create_run(control_plane, blocked)
    register_target(control_plane, blocked, "worker-0", two_targets[0].port)
    (control_plane.bucket_folder / blocked).mkdir()
    (control_plane.bucket_folder / blocked / "plugins").write_text("a file where the profiler needs a folder")
    captured = mldiag(control_plane, "profiler-session", "capture", "s1", "--machine-learning-run", blocked,
                      "--duration", "1s")
    assert captured.returncode == 1
    error = session(control_plane, blocked, "s1")["targetSessions"]["worker-0"]["error"]
    assert error.startswith(f"error: 127.0.0.1:{two_targets[0].port} traced for 1000 ms but wrote no profile under ")
    assert "can the workload write there" in error


def test_a_stopped_workload_is_a_timeout(control_plane, two_targets):
    workload = two_targets[0]
    workload.process.send_signal(signal.SIGSTOP)
    try:
        captured = mldiag(control_plane, "profiler-session", "capture", "frozen", "--machine-learning-run", RUN,
                          "--targets", "worker-0", "--duration", "1s")
    finally:
        workload.process.send_signal(signal.SIGCONT)
    assert captured.returncode == 1
    error = session(control_plane, RUN, "frozen")["targetSessions"]["worker-0"]["error"]
    assert error.startswith(f"timeout: 127.0.0.1:{workload.port} accepted the connection but no gRPC server answered")
