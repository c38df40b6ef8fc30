"""Reading an XSpace from the wire format: the metadata plane XProf dumps the HLO modules from, and
every line's events as columns, checked against the reader behind ``jax.profiler.ProfileData``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from analysis_support import xplane

from mldiag.analysis.evidence import ToolStatus
from mldiag.analysis.profile.wire import delimited, encode_varint
from mldiag.analysis.profile.xspace import METADATA_PLANE, MalformedXSpace, plane_bytes, read_planes


def _planes(serialized: bytes) -> list[str]:
    from jaxlib import _profile_data

    return [plane.name for plane in _profile_data.ProfileData.from_serialized_xspace(serialized).planes]


@pytest.mark.parametrize("name", ["input_bound", "tpu_v6e4_inference", "mi300x_gemm"])
def test_the_metadata_plane_alone_is_a_valid_xspace(name):
    profile = xplane(name)
    metadata = plane_bytes(profile, METADATA_PLANE)
    assert _planes(metadata) == [METADATA_PLANE]
    assert 0 < len(metadata) < profile.stat().st_size


def test_a_plane_the_file_does_not_have_is_empty():
    assert plane_bytes(xplane("input_bound"), "/device:TPU:0") == b""


@pytest.mark.parametrize("content, reason", [
    (b"", "empty"),
    (b"\x0a\xff\xff\xff\xff\x0f", "runs past its message"),  # a plane longer than the file
    (b"\x0a\x80", "varint runs past"),  # a length cut off mid-varint
    (b"\x0f", "wire type 7"),
])
def test_bytes_not_in_the_wire_format_are_malformed(tmp_path, content, reason):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(content)
    with pytest.raises(MalformedXSpace, match=reason):
        plane_bytes(path, METADATA_PLANE)


def test_a_truncated_profile_is_malformed(tmp_path):
    profile = xplane("input_bound").read_bytes()
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(profile[: len(profile) // 2])
    with pytest.raises(MalformedXSpace):
        plane_bytes(path, "no such plane")  # every plane is walked, the cut one included


def test_the_hlo_tools_read_the_modules_dumped_from_the_metadata_plane(analysis_of):
    tools = {tool.name: tool for tool in analysis_of("input_bound").tools}
    modules = tools["list_hlo_modules"]
    assert modules.status is ToolStatus.OK and "jit_train_step(26)" in modules.data["modules"]
    peaks = tools["get_peak_allocations"]
    assert peaks.status is ToolStatus.OK and peaks.data["summary"]["total_modules"] == modules.data["count"]


def _tag(number: int, wire_type: int) -> bytes:
    return bytes([number << 3 | wire_type])


def _space(*events: bytes, names: dict[int, bytes] | None = None) -> bytes:
    """An XSpace of one plane ("p") with one line ("l", at 1000 ns) holding ``events`` as serialized."""
    metadata = b"".join(
        delimited(4, _tag(1, 0) + encode_varint(key) + delimited(2, delimited(2, name)))
        for key, name in (names or {}).items()
    )
    line = delimited(2, b"l") + _tag(3, 0) + encode_varint(1000) + b"".join(delimited(4, event) for event in events)
    return delimited(1, delimited(2, b"p") + delimited(3, line) + metadata)


@pytest.mark.parametrize("name", ["input_bound", "unfused_small_ops", "tpu_v6e4_inference", "mi300x_gemm"])
def test_every_event_reads_as_jax_reads_it(name):
    from jaxlib import _profile_data

    profile = xplane(name)
    expected = [(plane.name, line.name, [(event.name, event.start_ns, event.duration_ns) for event in line.events])
                for plane in _profile_data.ProfileData.from_file(str(profile)).planes for line in plane.lines]
    read = [(plane.name, line.name, list(zip(map(plane.event_names.get, line.metadata_ids.tolist()),
                                             line.starts_ns.tolist(), line.durations_ns.tolist())))
            for plane in read_planes(profile) for line in plane.lines]
    assert read == expected
    assert sum(len(events) for *_, events in read) > 1000


def test_an_events_stats_are_its_own_over_its_metadatas():
    from jaxlib import _profile_data

    profile = xplane("input_bound")
    jax_lines = [line for plane in _profile_data.ProfileData.from_file(str(profile)).planes for line in plane.lines]
    lines = [line for plane in read_planes(profile) for line in plane.lines]
    markers = 0
    for jax_line, line in zip(jax_lines, lines, strict=True):
        for index, event in enumerate(jax_line.events):
            own = dict(event.stats)
            assert own.items() <= line.stats(index).items()
            markers += "step_num" in own
    assert markers >= 10  # the step markers carry their step numbers


def test_absent_fields_read_as_zero(tmp_path):
    path = tmp_path / "host.xplane.pb"
    instant_at_line_start = _tag(1, 0) + encode_varint(7)
    timed = _tag(1, 0) + encode_varint(8) + _tag(2, 0) + encode_varint(2_500_000) + _tag(3, 0) + encode_varint(10**15 + 999)
    with_stats_only = delimited(4, _tag(1, 0) + encode_varint(1))
    path.write_bytes(_space(instant_at_line_start, timed, with_stats_only, b"", names={7: b"marker", 8: b"op"}))
    (plane,) = read_planes(path)
    (line,) = plane.lines
    assert line.metadata_ids.tolist() == [7, 8, 0, 0]
    assert line.starts_ns.tolist() == [1000, 3500, 1000, 1000]
    assert line.durations_ns.tolist() == [0, 10**12, 0, 0]  # whole nanoseconds: 999 ps are dropped
    assert [plane.event_names.get(i, "") for i in line.metadata_ids.tolist()] == ["marker", "op", "", ""]


def test_varints_of_every_length_read_whole(tmp_path):
    # One to ten bytes; the 9- and 10-byte ones (negative int64s among them) are past the 8 read at once.
    values = [0, *(2 ** (7 * n) + offset for n in range(1, 10) for offset in (-1, 0, 5)), 2**64 - 1]
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_space(*(_tag(1, 0) + encode_varint(9) + _tag(2, 0) + encode_varint(value) + _tag(3, 0) + encode_varint(value)
                              for value in values)))
    (plane,) = read_planes(path)
    (line,) = plane.lines
    assert sorted({len(encode_varint(value)) for value in values}) == list(range(1, 11))
    as_int64 = [value - 2**64 if value >= 2**63 else value for value in values]
    assert line.durations_ps.tolist() == as_int64
    assert line.starts_ns.tolist() == [1000 + value // 1000 for value in as_int64]
    assert line.metadata_ids.tolist() == [9] * len(values)


def test_a_name_that_is_not_utf8_reads_with_replacement_characters(tmp_path):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_space(_tag(1, 0) + encode_varint(7), names={7: b"fusion\xff<script>"}))
    (plane,) = read_planes(path)
    assert plane.event_names == {7: "fusion\ufffd<script>"}


@pytest.mark.parametrize("event, reason", [
    (_tag(1, 0) + b"\xff" * 11, "longer than 10 bytes"),
    (_tag(1, 0) + b"\x80\x80", "runs past the event"),
])
def test_an_event_not_in_the_wire_format_is_malformed(tmp_path, event, reason):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_space(_tag(1, 0) + encode_varint(1), event))
    with pytest.raises(MalformedXSpace, match=reason):
        read_planes(path)


@pytest.mark.parametrize("missing", [1, 10, 11, 12])
def test_an_event_that_runs_past_its_line_is_malformed(tmp_path, missing):
    event = _tag(1, 0) + encode_varint(1)
    cut = _tag(4, 2) + encode_varint(len(event) + missing) + event  # its length counts bytes past the line
    line = delimited(2, b"l") + _tag(3, 0) + encode_varint(1000) + delimited(4, event) + cut
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(delimited(1, delimited(2, b"p") + delimited(3, line)))
    with pytest.raises(MalformedXSpace, match="a line at byte"):
        read_planes(path)


def test_a_released_line_keeps_its_name_and_no_events():
    line = max((line for plane in read_planes(xplane("input_bound")) for line in plane.lines), key=len)
    name = line.name
    line.release()
    assert name and line.name == name and len(line) == 0 and len(line.starts_ns) == len(line.durations_ps) == 0


@pytest.mark.parametrize("cut", [0, 1, 2])
def test_a_cut_or_empty_file_is_malformed(tmp_path, cut):
    profile = xplane("input_bound").read_bytes()
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(profile[: len(profile) * cut // 3])
    with pytest.raises(MalformedXSpace):
        read_planes(path)


def _event_with_stat(metadata_id: int, value: int) -> bytes:
    stat = _tag(1, 0) + encode_varint(1) + _tag(4, 0) + encode_varint(value)  # XStat: metadata_id 1, int64_value
    return _tag(1, 0) + encode_varint(metadata_id) + delimited(4, stat)


@pytest.mark.parametrize("interleaved", [False, True])
def test_each_events_stats_are_read_from_where_it_is_in_the_file(tmp_path, interleaved):
    stat_names = delimited(5, _tag(1, 0) + encode_varint(1) + delimited(2, delimited(2, b"step_num")))
    events = [delimited(4, _event_with_stat(7, step)) for step in range(3)]
    display_name = delimited(11, b"shown")  # a serializer that writes it between events is still read right
    body = events[0] + display_name + b"".join(events[1:]) if interleaved else b"".join(events) + display_name
    line = delimited(2, b"l") + _tag(3, 0) + encode_varint(1000) + body
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(delimited(1, delimited(2, b"p") + delimited(3, line) + stat_names))
    (plane,) = read_planes(path)
    (line,) = plane.lines
    assert [line.stats(index) for index in range(3)] == [{"step_num": 0}, {"step_num": 1}, {"step_num": 2}]


def test_no_copy_of_the_whole_file_is_kept(monkeypatch):
    profile = xplane("unfused_small_ops")
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"{self} read whole"))
    planes = read_planes(profile)
    largest = max(len(line) for plane in planes for line in plane.lines)
    assert largest < sum(len(line) for plane in planes for line in plane.lines)
    assert planes[1].lines[0].stats(0) is not None


def test_events_decoded_a_few_at_a_time_read_as_all_at_once(tmp_path, monkeypatch):
    """A line of events whose fields come and go (absent where zero), cut into groups of 3, 4 and 64K events."""
    from mldiag.analysis.profile import xspace

    events = [(_tag(1, 0) + encode_varint(1 + index % 5) if index % 4 else b"")
              + (_tag(2, 0) + encode_varint(10**index % 2**40) if index % 3 else b"")
              + (_tag(3, 0) + encode_varint(index * 997) if index % 7 else b"") for index in range(50)]
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_space(*events))

    def columns() -> list[list[int]]:
        (line,) = read_planes(path)[0].lines
        return [line.metadata_ids.tolist(), line.starts_ns.tolist(), line.durations_ps.tolist()]

    whole = columns()
    assert whole[0][:5] == [0, 2, 3, 4, 0] and whole[2][:8] == [0, 997, 1994, 2991, 3988, 4985, 5982, 0]
    for at_once in (3, 4):
        monkeypatch.setattr(xspace, "_EVENTS_AT_ONCE", at_once)
        assert columns() == whole, at_once


def _parsed_alone(line, name: str, positions) -> list:
    """What each event parsed as a message holds for the stat called ``name``: the walk's oracle."""
    from mldiag.analysis.profile import xspace

    wanted = next((key for key, stat_name in line.plane._stat_names.items() if stat_name == name), None)
    values = []
    for index in positions:
        length, start = xspace.varint(line._source, int(line._offsets[index]) + 1)
        event = xspace._messages()["XEvent"].FromString(line._source[start:start + length])
        found = next((stat for stat in event.stats if stat.metadata_id == wanted), None)
        values.append(None if found is None else xspace._value(found, line.plane._stat_names))
    return values


def test_a_stat_walked_in_place_reads_as_the_event_parsed_alone(tmp_path):
    """Stats by reference (walked), by value or laid out otherwise (parsed alone), after another field, twice."""
    def stat(stat_id: int, value: bytes) -> bytes:
        return delimited(4, _tag(1, 0) + encode_varint(stat_id) + value)

    ref = lambda key: _tag(7, 0) + encode_varint(key)  # noqa: E731
    events = [
        _tag(1, 0) + encode_varint(9),
        _tag(1, 0) + encode_varint(9) + stat(2, ref(3)) + stat(1, ref(3)),
        _tag(1, 0) + encode_varint(9) + stat(1, delimited(5, b"jit_text(2)")),
        _tag(1, 0) + encode_varint(9) + _tag(5, 0) + encode_varint(4) + stat(1, ref(4)),
        _tag(1, 0) + encode_varint(9) + delimited(4, ref(3) + _tag(1, 0) + encode_varint(1)),  # the id last
        _tag(1, 0) + encode_varint(9) + stat(1, ref(4)) + stat(1, ref(3)),
        _tag(1, 0) + encode_varint(9) + stat(2, _tag(4, 0) + encode_varint(2**64 - 1)) + stat(1, ref(99)),
    ]
    stat_names = b"".join(delimited(5, _tag(1, 0) + encode_varint(key) + delimited(2, _tag(1, 0) + encode_varint(key)
                                                                                     + delimited(2, name)))
                          for key, name in {1: b"hlo_module", 2: b"other", 3: b"jit_step(1)", 4: b"jit_eval(3)"}.items())
    space = _space(*events)  # then the plane's stat metadata
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_with_stat_names(space, stat_names))
    (line,) = read_planes(path)[0].lines
    positions = list(range(len(events)))
    expected = [None, "jit_step(1)", "jit_text(2)", "jit_eval(3)", "jit_step(1)", "jit_eval(3)", ""]
    assert _parsed_alone(line, "hlo_module", positions) == expected
    assert line.own_stat("hlo_module", np.array(positions)) == expected
    assert line.own_stat("other", np.array(positions)) == _parsed_alone(line, "other", positions)
    assert line.own_stat("no such stat", np.array(positions)) == [None] * len(events)


def _with_stat_names(space: bytes, stat_names: bytes) -> bytes:
    from mldiag.analysis.profile.wire import fields

    ((_, _, start, end),) = list(fields(space, 0, len(space)))
    return delimited(1, space[start:end] + stat_names)


@pytest.mark.parametrize("name", ["unfused_small_ops", "hostile", "tpu_v6e4_inference", "mi300x_gemm"])
def test_every_stat_walked_in_place_reads_as_each_event_parsed_alone(name):
    for plane in read_planes(xplane(name)):
        for line in plane.lines:
            positions = np.arange(0, len(line), max(1, len(line) // 3000))
            for stat_name in set(plane._stat_names.values()):
                assert line.own_stat(stat_name, positions) == _parsed_alone(line, stat_name, positions), (
                    plane.name, line.name, stat_name)
