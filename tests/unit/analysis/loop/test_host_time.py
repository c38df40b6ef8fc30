"""Own time and owners of host events, on one line's arrays written by hand, and on a real profile."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_support import xplane

from mldiag.analysis.host_evidence import DeviceKind
from mldiag.analysis.loop import host_time
from mldiag.analysis.loop.raw_events import read_host_evidence

# step [0, 100) > make_batch [0, 60) > sleep [0, 50) (a C call) ; dispatch [60, 70) > copy [61, 69) ; log [70, 100)
NAMES = ["$t.py:1 step", "$t.py:2 make_batch", "$time sleep", "PjitFunction(f)", "copy", "$t.py:3 log"]
PARENTS = np.array([-1, 0, 1, 0, 3, 0])
STARTS = np.array([0, 0, 0, 60, 61, 70])
ENDS = np.array([100, 60, 50, 70, 69, 100])
CALLS = np.array([False, False, False, True, False, False])
INSIDE = np.array([False, False, False, True, True, False])
NAMED = np.array([host_time.is_named_work(name) for name in NAMES]) & ~INSIDE


def test_own_time_leaves_out_the_device_calls_and_keeps_the_callees_work():
    own = host_time.own_idle(PARENTS, (ENDS - STARTS).astype(float), CALLS, INSIDE)
    assert own.tolist() == [90.0, 60.0, 50.0, 0.0, 0.0, 30.0]


def test_own_time_only_counts_while_the_devices_idle():
    idle = np.array([40.0, 30.0, 25.0, 0.0, 0.0, 10.0])  # the devices busy for part of each event
    assert host_time.own_idle(PARENTS, idle, CALLS, INSIDE)[0] == 40.0


def test_the_owners_are_the_named_functions_that_hold_the_time_each_with_what_no_owner_inside_takes():
    own = host_time.own_idle(PARENTS, (ENDS - STARTS).astype(float), CALLS, INSIDE)
    ids = np.arange(len(NAMES))
    tops = PARENTS < 0
    reads = np.array([False, False, False, False, False, True])  # the logging reads a device value back
    held = host_time.owners(PARENTS, ids, len(NAMES), own, NAMED, tops, reads)
    holders = {NAMES[i]: (held.exclusive[i], bool(held.reads[i])) for i in np.flatnonzero(held.holder)}
    # make_batch 60 of 90 (its C call, sleep, says how, not what), log 30; nothing is left to the step itself.
    assert holders == {"$t.py:1 step": (0.0, False), "$t.py:2 make_batch": (60.0, False), "$t.py:3 log": (30.0, True)}
    assert held.top.tolist() == [0, 0, 0, 0, 0, 0]


def test_a_callee_with_a_small_share_stays_with_its_caller():
    own = np.array([100.0, 15.0, 85.0])
    held = host_time.owners(np.array([-1, 0, -1]), np.array([0, 1, 0]), 2, own, np.ones(3, dtype=bool),
                            np.array([True, False, True]), np.zeros(3, dtype=bool))
    # The callee holds 15 of the 185 ms its caller's name has over both calls: under the owners' share.
    assert held.holder.tolist() == [True, False, True] and held.exclusive.tolist() == [100.0, 0.0, 85.0]


def test_the_nearest_flagged_event_around_each_event():
    flagged = np.array([True, False, False, True, False, False])
    assert host_time.nearest_flagged(PARENTS, flagged).tolist() == [-1, 0, 0, 0, 3, 0]


def test_a_c_call_s_time_goes_to_the_frame_that_called_it():
    self_time = host_time.self_of(PARENTS, (ENDS - STARTS).astype(float))
    owned = host_time.to_innermost_named(PARENTS, np.where(INSIDE, 0.0, self_time), NAMED)
    assert owned[1] == 60.0 and owned[2] == 0.0


def test_intersection_of_interval_sets():
    starts, ends = host_time.intersection(np.array([0, 50]), np.array([20, 90]), np.array([10, 40, 85]),
                                          np.array([30, 60, 100]))
    assert list(zip(starts.tolist(), ends.tolist())) == [(10, 20), (50, 60), (85, 90)]


def test_the_function_that_runs_the_step_is_host_work_only_for_its_own_time():
    """input_bound: the loader's scope is its own time; the jit dispatch beside it has none."""
    host = read_host_evidence(xplane("input_bound"))
    loader = next(a for a in host.host_activities if a.name == "data_loading")
    dispatch = next(a for a in host.host_activities if a.name.startswith("PjitFunction("))
    assert loader.self_ms_per_step > 0.9 * loader.ms_per_step and dispatch.self_ms_per_step == 0.0
    assert loader.thread == "python"


def test_another_thread_s_functions_are_named_while_the_training_thread_waits_on_it(tmp_path):
    from evidence_support import MS, TraceBuild, jit_calls

    starts = [i * 10 * MS for i in range(1, 6)]
    stepping = [event for s in starts for event in (
        ("train", s, s + 10 * MS), ("$queue.py:154 get", s, s + 8 * MS), *jit_calls("step", [s + 8 * MS], MS))]
    loader = [event for s in starts for event in (
        ("$loader.py:10 read_record", s - 4 * MS, s + 6 * MS), ("$time sleep", s - 4 * MS, s + 6 * MS),
        ("$loader.py:20 decode", s + 6 * MS, s + 8 * MS))]
    lane = [("kernel", s + 9 * MS, s + 10 * MS) for s in starts]
    host = TraceBuild().host(stepping, markers=("train",)).host(loader).lane("/host:CPU", lane).evidence(tmp_path)
    assert host.thread_wait_ms_per_step == pytest.approx(8.0, rel=0.01)
    doing = {a.name: a.ms_per_step for a in host.while_waiting}
    assert doing == {"$loader.py:10 read_record": pytest.approx(6.0, rel=0.01),
                     "$loader.py:20 decode": pytest.approx(2.0, rel=0.01)}


def test_waiting_for_a_copy_that_the_runtime_s_threads_make_is_transfer_time_not_own_time(tmp_path):
    from evidence_support import MS, TraceBuild, jit_calls

    starts = [i * 10 * MS for i in range(5)]
    stepping = [event for s in starts for event in (
        ("train", s, s + 10 * MS), ("$t.py:5 step", s, s + 10 * MS), *jit_calls("stage", [s + MS], MS))]
    runtime = [("Transpose::Execute", s + 2 * MS, s + 9 * MS) for s in starts]
    lane = [("kernel", s + 9 * MS, s + 10 * MS) for s in starts]
    host = TraceBuild(DeviceKind.TPU).host(stepping, markers=("train",)).host(runtime).lane(
        "/device:TPU:0", lane, "XLA Ops").evidence(tmp_path)
    step = next(a for a in host.host_activities if a.name == "$t.py:5 step")
    assert step.self_ms_per_step == pytest.approx(1.0, rel=0.01)
    assert host.transfer_ms_per_step == pytest.approx(8.0, rel=0.01)
    (copy,) = host.transfers
    assert copy.name == "PjitFunction(stage)" and copy.self_ms_per_step == pytest.approx(1.0, rel=0.01)
