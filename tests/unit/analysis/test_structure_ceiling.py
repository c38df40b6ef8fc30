"""A profile whose structure alone (planes, lines, metadata) costs more than the memory ceiling is refused before
XProf or the raw-event reader builds it, and the analysis's whole process tree is held to the ceiling."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mldiag.analysis.profile.wire import Structure, delimited, encode_varint, structure_of
from mldiag.analysis.stopping import OVER_CEILING_EXIT

pytestmark = pytest.mark.slow  # real analyses in processes of their own

MIB = 1 << 20
EMPTY_PLANE = delimited(1, b"\x08" + encode_varint(7) + delimited(2, b"/host:CPU"))  # an id and a name, no line


def _empty_planes(path: Path, count: int) -> Path:
    path.write_bytes(EMPTY_PLANE * count)
    return path


def test_the_structure_of_a_file_is_counted_from_its_tags_and_only_as_far_as_asked(tmp_path):
    line, entry = delimited(3, delimited(2, b"l")), delimited(4, b"\x08\x01" + delimited(2, b"\x12\x01m"))
    profile = tmp_path / "h.xplane.pb"
    profile.write_bytes(delimited(1, delimited(2, b"/host:CPU") + line * 3 + entry * 2) + EMPTY_PLANE * 4)
    assert structure_of(profile) == Structure(planes=5, lines=3, descriptions=2)
    many = _empty_planes(tmp_path / "many.xplane.pb", 100_000)
    stopped = structure_of(many, beyond=Structure(planes=10).cost)
    assert stopped.planes == 11


def test_a_file_of_many_empty_planes_is_refused_before_xprof_reads_it_in_bounded_time_and_memory(tmp_path):
    hostile = _empty_planes(tmp_path / "empty.xplane.pb", 200_000)  # 3 MB that XProf would hold as ~1 GB
    mldiag = str(Path(sys.executable).parent / "mldiag")
    measured = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
                "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
                "print(done.stderr.strip(), file=sys.stderr)")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", measured, mldiag, "analyze", str(hostile), "--memory-ceiling",
                             "256MiB", "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - started
    code, peak_kib = map(int, result.stdout.split())
    assert code == 3, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("mldiag analyze: empty.xplane.pb holds at least ")
    assert line.endswith("planes, 0 lines and 0 metadata entries and stats: reading them needs more than the memory "
                         "ceiling (0.2 GiB)")
    assert peak_kib * 1024 < 256 * MIB
    assert seconds < 60
    assert not (tmp_path / "out").exists()


def test_the_process_tree_is_stopped_once_it_holds_more_than_the_ceiling(tmp_path):
    script = textwrap.dedent("""
        import os, subprocess, sys, time
        from mldiag.analysis.stopping import stop_now, stopping
        from mldiag.analysis.xprof.budget import resident_memory

        hog = "import time; held = bytearray(400 << 20); held[::4096] = b'x' * len(held[::4096]); time.sleep(60)"
        def stop(why, code):
            stop_now([], why, code)
        with stopping(stop, memory_ceiling_bytes=resident_memory() + (200 << 20)):
            child = subprocess.Popen([sys.executable, "-c", hog])
            print(child.pid, flush=True)
            time.sleep(60)
    """)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
    assert result.returncode == OVER_CEILING_EXIT, result.stderr
    assert time.monotonic() - started < 30
    assert result.stderr.strip().startswith("the analysis's processes held ")
    assert "over its memory ceiling of " in result.stderr
    hog = int(result.stdout.split()[0])
    time.sleep(0.5)
    assert not Path(f"/proc/{hog}").exists() or "Z" in Path(f"/proc/{hog}/stat").read_text().rsplit(")", 1)[1][:3]
