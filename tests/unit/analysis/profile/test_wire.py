"""A file is refused as no XSpace from its framing alone, before anything parses it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from analysis_support import PROFILES, xplane

from mldiag.analysis.profile.wire import MalformedXSpace, check_xspace, check_xspace_head


@pytest.mark.parametrize("content", [
    b"\x0a\x00",  # one empty plane
    b"\x0a\x02\x12\x00" + b"\x22\x04host",  # a plane and a hostname
    b"\x0a\x00\x48\x01",  # a field XSpace does not know (9, a varint) is skipped, as protobuf does
])
def test_what_frames_as_an_xspace_passes(tmp_path, content):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(content)
    check_xspace(path)


def test_every_fixture_profile_passes():
    profiles = sorted(PROFILES.rglob("*.xplane.pb"))
    assert len(profiles) >= 5
    for profile in profiles:
        check_xspace(profile)


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "the file is empty"),
    (b"hello, this is not a profile\n", "wire type 4 at byte 2"),
    (b"<html>not a profile</html>\n", "wire type 4 at byte 0"),
    (b"\x08\x01", "field 1 at byte 0 is not one of XSpace's"),  # planes as a varint
    (b"\x02\x00", "field 0 at byte 0 is not one of XSpace's"),
    (b"\x0a\x05ab", "field 1 at byte 0 runs past its message"),
])
def test_what_does_not_frame_as_an_xspace_is_malformed(tmp_path, content, reason):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(content)
    with pytest.raises(MalformedXSpace, match=f"^{reason}$"):
        check_xspace(path)


def test_a_profile_cut_short_is_malformed(tmp_path):
    whole = xplane("input_bound").read_bytes()
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(whole[: len(whole) - 1])
    with pytest.raises(MalformedXSpace, match="runs past its message"):
        check_xspace(path)


def test_the_check_loads_neither_numpy_nor_xprof():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; import mldiag.analysis.profile.profiles; "
                               "print(sorted({'numpy', 'xprof'} & {m.split('.')[0] for m in sys.modules}))"],
        capture_output=True, text=True, timeout=60,
    )
    assert loaded.stdout.strip() == "[]", loaded.stderr


@pytest.mark.parametrize(("head", "reason"), [
    (b"", "the file is empty"),
    (b"\0" * 16, "field 0 at byte 0 is not one of XSpace's"),
    (b"\x08\x01", "field 1 at byte 0 is not one of XSpace's"),  # planes, but not length-delimited
    (b"\x0f", "wire type 7 at byte 0"),
])
def test_the_first_bytes_refuse_what_plainly_is_no_xspace(head, reason):
    with pytest.raises(MalformedXSpace, match=reason):
        check_xspace_head(head)


def test_the_first_bytes_of_every_profile_pass():
    for profile in PROFILES.rglob("*.xplane.pb"):
        check_xspace_head(profile.read_bytes()[:16])
