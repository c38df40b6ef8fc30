"""A busy device whose time goes to ops run hundreds of times a step for microseconds each: a loop's body too small
for the per-op cost, with an unroll fix; evidence written by hand."""

from __future__ import annotations

from mldiag.analysis.evidence import ProfileInput
from mldiag.analysis.host_evidence import DeviceKind, Distribution, HostEvidence, OpTime, StepSource
from mldiag.analysis.rules.analyst import assess
from mldiag.domain import Priority

STEPS = 6


def _findings(ops: list[OpTime], busy: float = 0.92):
    host = HostEvidence(
        host="h", file="h.xplane.pb", bytes=1, events=1, device_kind=DeviceKind.CPU, device_type="CPU", devices=1,
        compute_lanes=["lane"], step_source=StepSource.STEP_MARKERS, step_marker="train", steps=STEPS,
        step_ms=Distribution.of([15.0] * STEPS), busy_fraction=busy, loop_busy_fraction=busy, dispatches_per_step=1.0,
        top_ops=ops)
    analysis = assess(hosts=[host], tools=[], hlo_issues={}, versions={}, seconds=0.0,
                      profile=ProfileInput(source="s", session="s", files=["h.xplane.pb"], bytes=1))
    return [f for f in analysis.findings if f.title.startswith("Tiny ops in a loop")]


def _op(name: str, runs: float, ms: float, share: float) -> OpTime:
    return OpTime(name=name, count_per_step=runs, self_ms_per_step=ms, share_of_busy=share)


def test_a_scan_body_of_microsecond_ops_run_hundreds_of_times_a_step_gets_an_unroll_fix():
    (finding,) = _findings([_op("dot.4", 256, 2.75, 0.22), _op("wrapped_add.2", 256, 2.24, 0.18),
                            _op("ynn_fusion.1", 256, 2.15, 0.17), _op("dynamic-slice_fusion", 256, 1.49, 0.12),
                            _op("copy.7", 1, 0.29, 0.02)])
    assert finding.priority is Priority.P1
    assert finding.title == "Tiny ops in a loop: 69% of device time in ops run 256 times a step, 8.4 us each"
    assert "unroll" in finding.fix and '"dot.4": 256 runs per step' in finding.evidence[0]


def test_a_loop_of_tiny_ops_that_holds_nearly_all_of_the_loop_is_its_main_problem():
    (finding,) = _findings([_op("fusion.3", 256, 0.9, 0.6), _op("fusion.4", 256, 0.57, 0.38)], busy=0.91)
    assert finding.priority is Priority.P0  # 0.98 of busy time x 0.91 busy: a lax.map over a batch's examples


def test_a_short_loop_of_large_ops_and_an_idle_device_are_not_tiny_loop_ops():
    assert not _findings([_op("fusion.1", 16, 40.0, 0.9)])  # sixteen layers of a scan: each op large
    assert not _findings([_op("dot.1", 256, 2.0, 0.9)], busy=0.3)  # the devices wait: another finding's
    assert not _findings([_op("dot.1", 256, 2.0, 0.3), _op("fusion.2", 2, 10.0, 0.7)])  # most time elsewhere
