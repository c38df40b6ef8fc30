"""Findings ranked by what they measurably cost: op-by-op dispatch named by its measured dispatch time, and a
compiler pattern that costs little kept below it."""

from __future__ import annotations

from evidence_support import assessed

from mldiag.analysis.evidence import HloIssue
from mldiag.analysis.host_evidence import (
    DeviceKind,
    Distribution,
    HostActivity,
    HostEvidence,
    OpFamily,
    StepSource,
)
from mldiag.domain import FindingCategory, Priority

STEPS = 20


def _eager_host(*, dispatches: float, dispatch_ms: float, step_ms: float = 10.0, busy: float = 0.02,
                converts: OpFamily | None = None) -> HostEvidence:
    """A loop of small eager calls: each a program dispatched from Python, the device nearly idle."""
    return HostEvidence(
        host="h", file="h.xplane.pb", bytes=1, events=1, device_kind=DeviceKind.TPU, device_type="TPU v5 Lite",
        devices=1, compute_lanes=["lane"], step_source=StepSource.STEP_MARKERS, step_marker="train", steps=STEPS,
        step_ms=Distribution.of([step_ms] * STEPS), busy_fraction=busy, loop_busy_fraction=busy,
        dispatches_per_step=dispatches, dispatch_ms_per_step=dispatch_ms,
        dispatched=[HostActivity(name="PjitFunction(multiply)", count_per_step=dispatches, ms_per_step=dispatch_ms,
                                 share_of_step=dispatch_ms / step_ms)],
        op_families={"converts": converts} if converts else {},
    )


_ROUND_TRIP = {"detect_unnecessary_convert_reduce": [HloIssue(
    module="jit_convert_element_type(1)", instruction="convert.1", runs_as="convert.1",
    detail="the whole program converts bf16 to f32 of shape [512,512], and back: an op-by-op round trip")]}


def test_a_few_dozen_eager_calls_whose_dispatch_holds_most_of_the_step_are_the_p0():
    analysis = assessed(_eager_host(dispatches=45, dispatch_ms=8.0))
    top = analysis.findings[0]
    assert top.category is FindingCategory.DISPATCH_OVERHEAD and top.priority is Priority.P0
    assert "8.0 ms per step is spent dispatching" in top.impact


def test_a_few_programs_dispatched_quickly_are_not_op_by_op():
    analysis = assessed(_eager_host(dispatches=12, dispatch_ms=0.5, busy=0.95))
    assert not [f for f in analysis.findings if f.category is FindingCategory.DISPATCH_OVERHEAD]


def test_a_compiler_pattern_that_costs_little_does_not_outrank_the_dispatch_that_costs_most_of_the_step():
    converts = OpFamily(ops_per_step=10, ms_per_step=0.03, dispatches_per_step=10)
    analysis = assessed(_eager_host(dispatches=45, dispatch_ms=8.0, converts=converts), hlo_issues=_ROUND_TRIP)
    (compiler,) = [f for f in analysis.findings if f.category is FindingCategory.COMPILER]
    assert compiler.priority is Priority.P2
    assert analysis.findings[0].category is FindingCategory.DISPATCH_OVERHEAD


def test_a_compiler_pattern_dispatched_op_by_op_that_costs_much_of_the_step_is_urgent():
    converts = OpFamily(ops_per_step=30, ms_per_step=0.5, dispatches_per_step=30)
    analysis = assessed(_eager_host(dispatches=45, dispatch_ms=8.0, converts=converts), hlo_issues=_ROUND_TRIP)
    (compiler,) = [f for f in analysis.findings if f.category is FindingCategory.COMPILER]
    assert compiler.priority is Priority.P1


def test_the_eager_calls_own_time_between_their_dispatches_is_the_op_by_op_cause_not_host_work():
    # 45 calls dispatched in 6 ms of a 10 ms step: the rest of the idle time is the eager ops' own Python.
    analysis = assessed(_eager_host(dispatches=45, dispatch_ms=6.0))
    urgent = [f.category for f in analysis.findings if f.priority in (Priority.P0, Priority.P1)]
    assert urgent == [FindingCategory.DISPATCH_OVERHEAD]
