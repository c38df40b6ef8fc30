"""The processes that build XProf's op_stats of time slices: the allocator they preload, and what they build."""

from __future__ import annotations

import pytest

from mldiag.analysis.xprof import op_stats_apart
from mldiag.analysis.xprof.op_stats_apart import ALLOCATOR_VARIABLE, child_environment, converter_allocator


@pytest.fixture
def machine_has(monkeypatch):
    """Say which allocator libraries the machine has, by name: ``machine_has("mimalloc", ...)``."""
    def having(*names: str) -> None:
        op_stats_apart._installed_allocator.cache_clear()
        monkeypatch.setattr(op_stats_apart.ctypes.util, "find_library",
                            lambda name: f"lib{name}.so.2" if name in names else None)

    yield having
    op_stats_apart._installed_allocator.cache_clear()


def test_the_first_faster_allocator_the_machine_has_is_preloaded(machine_has):
    machine_has("jemalloc", "mimalloc")
    assert converter_allocator({}) == "libmimalloc.so.2"


def test_without_one_the_children_keep_glibc_s(machine_has):
    machine_has()
    assert converter_allocator({}) == ""


@pytest.mark.parametrize(("configured", "preloaded"), [
    ("/opt/lib/libtcmalloc.so.4", "/opt/lib/libtcmalloc.so.4"),
    ("none", ""),
    ("None", ""),
])
def test_the_variable_names_the_allocator_or_none(machine_has, configured, preloaded):
    machine_has("mimalloc")
    assert converter_allocator({ALLOCATOR_VARIABLE: configured}) == preloaded


def test_the_allocator_goes_before_what_the_environment_already_preloads(machine_has, monkeypatch):
    machine_has("tcmalloc_minimal")
    monkeypatch.setenv("LD_PRELOAD", "libmine.so")
    monkeypatch.delenv(ALLOCATOR_VARIABLE, raising=False)
    assert child_environment()["LD_PRELOAD"] == "libtcmalloc_minimal.so.2 libmine.so"
    monkeypatch.setenv(ALLOCATOR_VARIABLE, "none")
    assert child_environment()["LD_PRELOAD"] == "libmine.so"


def test_a_child_on_a_preloaded_allocator_builds_the_same_op_stats(tmp_path, monkeypatch):
    """Two slices of a CPU training loop, one process each way: the op_stats say the same (their bytes differ from
    one conversion to the next, glibc's too: XProf writes its maps in no fixed order). The machine's faster
    allocator is preloaded where it has one, else the C library itself, so that the preloading is tested anyway."""
    from analysis_support import xplane
    from google.protobuf import text_format
    from xprof.protobuf import op_stats_pb2

    from mldiag.analysis.profile.slices import slice_by_time

    def said(serialized: bytes) -> str:
        return text_format.MessageToString(op_stats_pb2.OpStats.FromString(serialized))

    slices = slice_by_time(xplane("ondemand_mlp"), 2, tmp_path).paths
    built = {}
    preloaded = op_stats_apart._installed_allocator() or op_stats_apart.ctypes.util.find_library("c")
    assert preloaded
    for allocator in (preloaded, "none"):
        monkeypatch.setenv(ALLOCATOR_VARIABLE, allocator)
        with op_stats_apart.op_stats_process() as op_stats:
            built[allocator] = []
            for path in slices:
                alone = tmp_path / f"{'glibc' if allocator == 'none' else 'preloaded'}-{path.name}" / path.name
                alone.parent.mkdir()
                alone.hardlink_to(path)
                built[allocator].append(said(op_stats(alone)))
    assert built[preloaded] == built["none"]
    assert all("step_db" in op_stats for op_stats in built[preloaded])
