"""Finding an XSpace's planes from the wire format: the metadata plane XProf dumps the HLO modules from."""

from __future__ import annotations

import pytest
from analysis_support import xplane

from mldiag.analysis.evidence import ToolStatus
from mldiag.analysis.xspace import METADATA_PLANE, MalformedXSpace, plane_bytes


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
