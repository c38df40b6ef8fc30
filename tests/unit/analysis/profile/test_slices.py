"""Cutting a host file into time slices: every event in exactly one slice, with the events nested in it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from analysis_support import xplane

from mldiag.analysis.profile.slices import slice_by_time
from mldiag.analysis.profile.wire import MalformedXSpace, delimited, encode_varint
from mldiag.analysis.profile.xspace import read_planes


def _event(metadata_id: int, offset_ps: int, duration_ps: int) -> bytes:
    return b"\x08" + encode_varint(metadata_id) + b"\x10" + encode_varint(offset_ps) + b"\x18" + encode_varint(
        duration_ps)


def _line(name: bytes, timestamp_ns: int, *events: bytes) -> bytes:
    return delimited(2, name) + b"\x18" + encode_varint(timestamp_ns) + b"".join(delimited(4, e) for e in events)


def _space(*lines: bytes, plane_stats: bytes = b"") -> bytes:
    plane = delimited(2, b"/host:CPU") + b"".join(delimited(3, line) for line in lines) + plane_stats
    return delimited(1, plane) + delimited(1, delimited(2, b"/host:metadata")) + delimited(4, b"host-a")


def _events(path: Path) -> list[tuple[str, str, int, int, int]]:
    """(plane, line, metadata id, start ns, duration ps) of every event of the file."""
    return [(plane.name, line.name, int(m), int(s), int(d)) for plane in read_planes(path) for line in plane.lines
            for m, s, d in zip(line.metadata_ids, line.starts_ns, line.durations_ps)]


def _layout(path: Path) -> list[tuple[str, list[str]]]:
    return [(plane.name, [line.name for line in plane.lines]) for plane in read_planes(path)]


@pytest.mark.parametrize("name,count", [("input_bound", 2), ("unfused_small_ops", 3), ("tpu_v6e4_inference", 4),
                                        ("gpu_v100x8_tf_bert_multiworker", 3)])
def test_every_event_is_in_exactly_one_slice_and_every_slice_keeps_every_plane_and_line(tmp_path, name, count):
    profile = xplane(name)
    sliced = slice_by_time(profile, count, tmp_path)
    slices = sliced.paths

    assert sliced.events == len(_events(profile))  # counted while cutting, for what reading them all will cost
    assert [path.name for path in slices] == [profile.name.replace(".xplane.pb", f".slice-{i}.xplane.pb")
                                              for i in range(count)]
    assert Counter(event for path in slices for event in _events(path)) == Counter(_events(profile))
    assert all(_layout(path) == _layout(profile) for path in slices)
    assert all(path.stat().st_size < profile.stat().st_size for path in slices)


@pytest.mark.parametrize("name, on_devices", [("tpu_v5e/worker_process_loader", True), ("input_bound", False)])
def test_cutting_counts_the_events_of_the_host_threads_where_the_programs_run_on_devices(tmp_path, name, on_devices):
    # What the raw-event read of the file will cost depends on them (its attribution's pieces of their time).
    profile = xplane(name)
    host = sum(len(line) for plane in read_planes(profile) if plane.name == "/host:CPU" for line in plane.lines)
    assert host > 0
    assert slice_by_time(profile, 2, tmp_path).host_thread_events == (host if on_devices else 0)


def _top_level_starts(line) -> np.ndarray:
    """Start times of the line's events that are nested in no earlier event of the line."""
    ends = line.starts_ns * 1000 + line.durations_ps
    before = np.concatenate(([-1], np.maximum.accumulate(ends)[:-1]))
    return line.starts_ns[line.starts_ns * 1000 >= before]


def test_the_slices_follow_one_another_in_time(tmp_path):
    slices = slice_by_time(xplane("input_bound"), 3, tmp_path).paths
    spans = []
    for path in slices:
        starts = np.concatenate([_top_level_starts(line) for plane in read_planes(path) for line in plane.lines
                                 if plane.name == "/host:CPU" and len(line)])
        spans.append((starts.min(), starts.max()))
    assert all(earlier[1] < later[0] for earlier, later in zip(spans, spans[1:]))


@pytest.mark.parametrize("name", ["plain_loop"])  # no step marked: the bytes alone place the cuts
def test_the_slices_hold_about_the_same_bytes_of_events(tmp_path, name):
    profile = xplane(name)
    sizes = np.array([path.stat().st_size for path in slice_by_time(profile, 4, tmp_path).paths])
    in_every_slice = (sizes.sum() - profile.stat().st_size) / 3  # names, metadata, line heads
    events = sizes - in_every_slice
    assert events.max() < 1.05 * events.min()


def test_a_nested_event_stays_with_the_event_it_is_nested_in(tmp_path):
    # One step from 0 to 10 us, with an op from 8 to 9 us nested in it; then two short steps.
    outer, inner = _event(1, 0, 10_000_000), _event(2, 8_000_000, 1_000_000)
    later = [_event(3, 20_000_000 + i * 1_000_000, 500_000) for i in range(2)]
    profile = tmp_path / "host-a.xplane.pb"
    profile.write_bytes(_space(_line(b"steps", 1_000, outer, inner, *later)))

    first, second = slice_by_time(profile, 2, tmp_path).paths

    assert [event[2] for event in _events(first)] == [1, 2]
    assert [event[2] for event in _events(second)] == [3, 3]


def test_lines_of_different_time_bases_are_cut_at_the_same_instant(tmp_path):
    # The same instants (ns 1,000,000 and 3,000,000) on two lines whose time bases differ.
    one = _line(b"a", 1_000_000, _event(1, 0, 1_000), _event(1, 2_000_000_000, 1_000))
    other = _line(b"b", 2_000_000, _event(2, 0, 1_000), _event(2, 1_000_000_000, 1_000))
    profile = tmp_path / "host-a.xplane.pb"
    profile.write_bytes(_space(one, other))

    first, second = slice_by_time(profile, 2, tmp_path).paths

    assert sorted(event[3] for event in _events(first)) == [1_000_000, 2_000_000]
    assert sorted(event[3] for event in _events(second)) == [3_000_000, 3_000_000]


def test_what_is_not_an_event_goes_to_every_slice(tmp_path):
    stat = delimited(6, b"\x08\x01\x20\x07")  # a plane stat: metadata id 1, int64 7
    profile = tmp_path / "host-a.xplane.pb"
    profile.write_bytes(_space(_line(b"a", 5, _event(1, 0, 1), _event(1, 10_000, 1)), plane_stats=stat))

    for path in slice_by_time(profile, 2, tmp_path).paths:
        data = path.read_bytes()
        assert stat in data and delimited(4, b"host-a") in data and b"/host:metadata" in data
        assert len(_events(path)) == 1


def test_one_slice_holds_the_whole_file(tmp_path):
    profile = xplane("input_bound")
    (whole,) = slice_by_time(profile, 1, tmp_path).paths
    assert _events(whole) == _events(profile)


def test_a_file_that_is_no_profile_is_malformed_and_a_count_below_one_is_refused(tmp_path):
    garbage = tmp_path / "host-a.xplane.pb"
    garbage.write_bytes(b"\x0f\xff\xff")
    with pytest.raises(MalformedXSpace):
        slice_by_time(garbage, 2, tmp_path)
    with pytest.raises(ValueError, match="at least one slice"):
        slice_by_time(xplane("input_bound"), 0, tmp_path)


def test_the_gaps_between_slices_are_measured_per_plane(tmp_path):
    # Events at 1..2 us and 10..11 us on "/device:GPU:0"; one event on the host plane spans both.
    gpu = delimited(2, b"/device:GPU:0") + delimited(3, _line(b"k", 0, _event(1, 1_000_000, 1_000_000),
                                                               _event(1, 10_000_000, 1_000_000)))
    profile = tmp_path / "host-a.xplane.pb"
    profile.write_bytes(delimited(1, gpu))

    sliced = slice_by_time(profile, 2, tmp_path)

    assert sliced.extents_ns["/device:GPU:0"].tolist() == [[1_000, 2_000], [10_000, 11_000]]
    assert sliced.gaps_ns("/device:") == 8_000  # from the end of the first slice's last event to the next one
    assert sliced.gaps_ns("/host:") == 0


def test_a_line_whose_events_are_not_next_to_each_other_is_cut_as_well(tmp_path):
    # A serializer may write another field of the line (its display name, 11) between an event and one nested in it.
    line = (delimited(2, b"a") + b"\x18" + encode_varint(5) + delimited(4, _event(1, 0, 10_000))
            + delimited(11, b"shown") + delimited(4, _event(2, 1_000, 1)) + delimited(4, _event(3, 20_000, 1)))
    profile = tmp_path / "host-a.xplane.pb"
    profile.write_bytes(_space(line))

    first, second = slice_by_time(profile, 2, tmp_path).paths

    assert [event[2] for event in _events(first)] == [1, 2]
    assert [event[2] for event in _events(second)] == [3]
    assert all(delimited(11, b"shown") in path.read_bytes() for path in (first, second))


def _slice_of_each(paths: list[Path], plane: str, line: str) -> list[list[int]]:
    return [[int(start) for p in read_planes(path) if p.name == plane for ln in p.lines if ln.name == line
             for start in ln.starts_ns] for path in paths]


def test_a_cut_moves_to_the_start_of_the_devices_step_nearest_to_it(tmp_path):
    # 5 steps of 10 us; their ops grow from step to step, so that an even share of bytes ends inside a step.
    steps = [_event(2, step * 10_000_000, 10_000_000) for step in range(5)]
    ops = [_event(1, step * 10_000_000 + op * 10_000_000 // (3 * step + 1), 1_000) for step in range(5)
           for op in range(3 * step + 1)]
    device = delimited(2, b"/device:TPU:0") + delimited(3, _line(b"Steps", 0, *steps)) + delimited(
        3, _line(b"XLA Ops", 0, *ops))
    profile = tmp_path / "host-a.xplane.pb"
    profile.write_bytes(delimited(1, device))

    sliced = slice_by_time(profile, 2, tmp_path)

    assert (sliced.cut_at, sliced.steps) == ("Steps", 5)
    step_starts = _slice_of_each(sliced.paths, "/device:TPU:0", "Steps")
    op_starts = _slice_of_each(sliced.paths, "/device:TPU:0", "XLA Ops")
    cut = step_starts[1][0]
    assert cut % 10_000 == 0 and all(start < cut for start in op_starts[0]) and all(
        start >= cut for start in op_starts[1])


def test_the_hosts_step_markers_are_where_cuts_fall_when_no_device_marks_steps(tmp_path):
    step_num = 7
    marker = [_event(3, step * 10_000_000, 9_000_000) + delimited(4, b"\x08" + encode_varint(step_num) + b"\x20"
                                                                   + encode_varint(step)) for step in range(6)]
    work = [_event(1, step * 10_000_000 + 100_000 + op * 800_000, 500_000) for step in range(6)
            for op in range(2 * step + 1)]
    stat_metadata = delimited(5, b"\x08" + encode_varint(step_num) + delimited(2, delimited(2, b"step_num")))
    profile = tmp_path / "host-a.xplane.pb"
    profile.write_bytes(_space(_line(b"python", 0, *marker), _line(b"worker", 0, *work), plane_stats=stat_metadata))

    sliced = slice_by_time(profile, 3, tmp_path)

    assert (sliced.cut_at, sliced.steps) == ("step_num", 6)
    for markers, works in zip(_slice_of_each(sliced.paths, "/host:CPU", "python"),
                              _slice_of_each(sliced.paths, "/host:CPU", "worker")):
        assert {start // 10_000 for start in works} == {start // 10_000 for start in markers}


def test_without_any_step_or_program_marked_the_cuts_stay_where_the_bytes_share_them(tmp_path):
    profile = tmp_path / "host-a.xplane.pb"
    profile.write_bytes(_space(_line(b"a", 0, *[_event(1, i * 1_000_000, 10) for i in range(10)])))

    sliced = slice_by_time(profile, 2, tmp_path)

    assert (sliced.cut_at, sliced.steps) == ("", 0) and [len(starts) for starts in _slice_of_each(sliced.paths, "/host:CPU", "a")] == [5, 5]
