"""Where a step's jit dispatches come from: the function that runs operations one by one, named through the
wrappers of single operations, on traces built event by event."""

from __future__ import annotations

import pytest
from evidence_support import MS, Events, TraceBuild, analysis_of, jit_calls

from mldiag.domain import FindingCategory, Priority

US = MS // 1000


def _eager_update(start: int, arrays: int) -> tuple[Events, int]:
    """An optimizer update run eagerly from ``start``: per parameter array, ``p * lr`` through the array's
    ``__mul__`` and a ufunc's ``__call__``, then ``p - that`` through ``__sub__`` and the same ``__call__``;
    each operation one dispatch. Returns the events and when the update ends."""
    events, at = [], start + 10 * US
    for _ in range(arrays):
        for wrapper, program in (("$array_methods.py:769 __mul__", "multiply"),
                                 ("$array_methods.py:753 __sub__", "subtract")):
            events += [(wrapper, at, at + 100 * US), ("$ufunc_api.py:175 __call__", at + 5 * US, at + 95 * US),
                       *jit_calls(program, [at + 10 * US], 80 * US)]
            at += 110 * US
    return [("$optim.py:12 update", start, at), *events], at


def _eager_loop(steps: int = 6, arrays: int = 30) -> TraceBuild:
    """Annotated steps: the jitted gradients, then the update run op by op."""
    events, lane = [], []
    start = 0
    for _ in range(steps):
        update, end = _eager_update(start + 2 * MS, arrays)
        events += [("train", start, end + 100 * US), ("$loop.py:40 iteration", start + 10 * US, end + 50 * US),
                   *jit_calls("grads", [start + 20 * US], 500 * US), *update]
        lane.append(("fusion", start + MS, start + 2 * MS))
        start = end + 200 * US
    return TraceBuild().host(events, markers=("train",)).lane("/host:CPU", lane)


def test_the_dispatches_come_from_the_function_that_calls_operations_one_by_one(tmp_path):
    host = _eager_loop().evidence(tmp_path)
    assert host.dispatches_per_step == 61
    made = {origin.name: origin.count_per_step for origin in host.dispatch_origins}
    # Each operation's wrappers enclose one program's dispatch; the update encloses two programs' many.
    assert made == {"$optim.py:12 update": 60, "$loop.py:40 iteration": 1}
    (update, _) = host.dispatch_origins
    assert update.ms_per_step == pytest.approx(60 * 0.08) and update.thread == "python"


def test_the_step_marker_is_no_origin(tmp_path):
    # Dispatches straight under the step's marker, no Python function around them.
    events = []
    for step in range(5):
        start = step * 10 * MS
        events += [("train", start, start + 9 * MS),
                   *jit_calls("add", [start + k * MS for k in range(4)], MS // 2),
                   *jit_calls("mul", [start + (k + 4) * MS for k in range(4)], MS // 2)]
    host = TraceBuild().host(events, markers=("train",)).lane("/host:CPU", [("f", 0, MS)]).evidence(tmp_path)
    assert host.dispatches_per_step == 8 and host.dispatch_origins == []


def test_the_op_by_op_finding_names_the_function_and_says_to_jit_it(tmp_path):
    analysis = analysis_of(_eager_loop().evidence(tmp_path))
    (finding,) = [f for f in analysis.findings if f.category is FindingCategory.DISPATCH_OVERHEAD]
    assert finding.priority is Priority.P0 and '"' not in finding.title
    assert 'the dispatches come from "$optim.py:12 update" (60 per step, 4.80 ms per step)' in finding.evidence
    assert not any("iteration" in line for line in finding.evidence)  # one dispatch in 61: not named
    assert finding.fix.startswith("Jit the function the dispatches come from (named in the evidence)")
