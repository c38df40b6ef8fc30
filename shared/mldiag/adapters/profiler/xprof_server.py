"""One XProf profiler server as a client sees it: traces, continuous profiling, snapshots.

The ``xprof`` package's client speaks ``tensorflow.ProfilerService`` over gRPC
(imported on first use: it loads a native library). For an on-demand trace the
**workload's server writes the file itself**, as
``<repository_root>/plugins/profile/<session_id>/<host_name>.xplane.pb``, so the
root must be a place the workload can write to.

The client reports every failed trace with one and the same sentence ("No
trace event was collected ..."); the real reason only reaches its stderr log.
So :meth:`ProfilerServer.trace` establishes the outcome around the call, from
what was measured against JAX 0.10 on CPU with xprof 2.24:

* connection refused, no route: the TCP probe fails — **unreachable**;
* a stopped or hung process still accepts TCP but never completes the gRPC
  handshake (the client would wait 20 s for it) — **timeout**, found by a short
  handshake probe before tracing;
* a server with another session active (continuous profiling, a programmatic
  trace, a concurrent capture) refuses at once, in about 10 ms — **busy**;
* a server that traced for the whole duration and had nothing to return (every
  tracer disabled, say) answers after about the duration — **empty trace**;
* no answer long after the duration — **timeout**.

The continuous-profiling calls do carry their status (``ALREADY_EXISTS: ...``,
``NOT_FOUND: ...``), which is kept in the message.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from mldiag.domain.capture import CaptureFailed, Failure, TracerLevels, split_address

PROBE_TIMEOUT_S = 5.0
# A refusal comes back within milliseconds; a real trace takes the whole duration.
BUSY_FRACTION_OF_DURATION = 0.5
# How long past the duration a trace may take before it counts as hung.
TRACE_GRACE_S = 30.0


def classify_trace_failure(elapsed_s: float, duration_s: float, reachable_after: bool) -> Failure:
    """Name the reason of a trace the client reported as failed, from when and how it ended."""
    if not reachable_after:
        return Failure.UNREACHABLE
    if elapsed_s < duration_s * BUSY_FRACTION_OF_DURATION:
        return Failure.BUSY
    if elapsed_s > duration_s + TRACE_GRACE_S:
        return Failure.TIMEOUT
    return Failure.EMPTY_TRACE


def classify_status_error(message: str) -> Failure:
    """Name the reason of a continuous-profiling call from the status it reported (``"ALREADY_EXISTS: ..."``)."""
    status = message.partition(":")[0].strip()
    return {"ALREADY_EXISTS": Failure.BUSY, "UNAVAILABLE": Failure.UNREACHABLE,
            "DEADLINE_EXCEEDED": Failure.TIMEOUT}.get(status, Failure.ERROR)


def _trace_failure_message(failure: Failure, address: str, elapsed_s: float, duration_s: float) -> str:
    return {
        Failure.UNREACHABLE: f"{address} went away during the capture",
        Failure.BUSY: (f"{address} refused the capture at once: another profiling session is active "
                       "there (continuous profiling, a programmatic trace or another capture)"),
        Failure.TIMEOUT: f"{address} had not finished {elapsed_s:.0f}s into a {duration_s:g}s capture",
        Failure.EMPTY_TRACE: (f"{address} traced for {duration_s:g}s but collected no trace events "
                              "(are all tracers disabled, or is the process idle?)"),
    }[failure]


def _plugin() -> ModuleType:
    from xprof.convert import _pywrap_profiler_plugin

    return _pywrap_profiler_plugin


def _continuous() -> ModuleType:
    from xprof.api import continuous_profiling_snapshot

    return continuous_profiling_snapshot


@dataclass(frozen=True)
class ProfilerServer:
    """The profiler server at ``address`` (``host:port``), dialled as given.

    A capture function gives it the address :func:`~mldiag.services.capture.targets.resolve_address`
    checked (an IP address, so nothing resolves the name again); a node agent, its own localhost.
    """

    address: str
    probe_timeout_s: float = PROBE_TIMEOUT_S

    def _connect(self) -> None:
        host, port = split_address(self.address)
        socket.create_connection((host, port), timeout=self.probe_timeout_s).close()

    def reachable(self) -> bool:
        try:
            self._connect()
        except OSError:
            return False
        return True

    def probe(self) -> None:
        """Raise :class:`CaptureFailed` unless a gRPC server answers at the address."""
        try:
            self._connect()
        except OSError as error:
            raise CaptureFailed(Failure.UNREACHABLE, f"cannot connect to {self.address} "
                                f"({error.strerror or error}); is the workload's profiler server running?") from None
        import grpc

        channel = grpc.insecure_channel(self.address)
        try:
            grpc.channel_ready_future(channel).result(timeout=self.probe_timeout_s)
        except grpc.FutureTimeoutError:
            raise CaptureFailed(Failure.TIMEOUT, (
                f"{self.address} accepted the connection but no gRPC server answered within "
                f"{self.probe_timeout_s:g}s (is the process stopped or hung?)")) from None
        finally:
            channel.close()

    def trace(self, repository_root: str, session_id: str, host_name: str, duration_ms: int,
              levels: TracerLevels) -> None:
        """Have the server trace for ``duration_ms`` and write its xplane under ``repository_root``."""
        self.probe()
        started = time.monotonic()
        try:
            _plugin().trace(
                service_addr=self.address, logdir=repository_root, worker_list="", include_dataset_ops=True,
                duration_ms=duration_ms, num_tracing_attempts=1,
                options={**levels.options(), "session_id": session_id, "override_hostnames": host_name,
                         "delay_ms": 0},
            )
        except RuntimeError:
            elapsed, duration = time.monotonic() - started, duration_ms / 1000
            failure = classify_trace_failure(elapsed, duration, self.reachable())
            raise CaptureFailed(failure, _trace_failure_message(failure, self.address, elapsed, duration)) from None

    def start_continuous(self, levels: TracerLevels) -> None:
        self.probe()
        self._call("starting continuous profiling", lambda: _continuous().start_continuous_profiling(
            self.address, levels.options()))

    def stop_continuous(self) -> bool:
        """Stop continuous profiling; ``False`` when the server had none running."""
        self.probe()
        try:
            self._call("stopping continuous profiling",
                       lambda: _continuous().stop_continuous_profiling(self.address))
        except CaptureFailed as failed:
            if "NOT_FOUND" in str(failed):
                return False
            raise
        return True

    def snapshot(self, logdir: Path) -> list[Path]:
        """Fetch the continuous-profiling buffer into ``logdir``; the xplane files it wrote.

        Raises :class:`CaptureFailed` (empty trace) when the snapshot holds nothing, as
        on every host without a TPU: XProf's continuous profiling keeps the TPU
        device buffer only, with host tracing off.
        """
        self.probe()
        self._call("taking a snapshot", lambda: _continuous().get_snapshot(self.address, str(logdir)))
        written = sorted(p for p in Path(logdir).rglob("*.xplane.pb") if p.stat().st_size > 0)
        if not written:
            raise CaptureFailed(Failure.EMPTY_TRACE, (
                f"the snapshot from {self.address} came back empty: XProf's continuous profiling "
                "records only the TPU device trace buffer, so a host without TPUs has nothing to "
                "snapshot; capture with --fallback on-demand, or stop continuous profiling and "
                "capture on demand"))
        return written

    def _call(self, what: str, call: Callable[[], None]) -> None:
        try:
            call()
        except RuntimeError as error:
            raise CaptureFailed(classify_status_error(str(error)), f"{what} on {self.address} failed: {error}") from None
