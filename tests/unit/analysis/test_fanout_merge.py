"""Merging hosts' evidence: every host's raw events, each XProf tool from the host that sets the pace."""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

import pytest
from analysis_support import xplane

from mldiag.analysis.engine import analyze_host
from mldiag.analysis.fanout import HostAnalysis, merge_hosts, pace_host


@functools.cache
def _host(name: str) -> HostAnalysis:
    """input_bound's profile analysed alone as host ``name``."""
    folder = Path(tempfile.mkdtemp(prefix="mldiag-test-host-"))
    try:
        copy = folder / f"{name}.xplane.pb"
        shutil.copyfile(xplane("input_bound"), copy)
        return analyze_host(copy)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_host_analysed_alone_keeps_its_evidence():
    part = _host("h0")
    assert part.host == "h0" and part.evidence.host == "h0" and part.file == "h0.xplane.pb"
    assert part.status.value == "NEEDS_ATTENTION" and part.step_time_ms > 0 and part.bytes > 0
    assert len(part.tools) == 15 and part.hlo_programs and part.hlo_kernels
    assert HostAnalysis.model_validate_json(part.model_dump_json()) == part


def test_tools_come_from_the_slowest_host_and_memory_from_the_fullest():
    slow = _host("h1").model_copy(update={"step_time_ms": _host("h1").step_time_ms * 2})
    full = _host("h2").model_copy(update={"peak_memory_bytes": (_host("h2").peak_memory_bytes or 0) + 1})
    parts = [_host("h0"), slow, full]
    assert pace_host(parts).host == "h1"
    merged = merge_hosts(parts, source="gs://b/s", session="s", missing={"h3": "timed out"})
    hosts = {tool.name: tool.host for tool in merged.tools if tool.status.value == "ok"}
    assert hosts["get_step_trace"] == "h1" and hosts["get_peak_allocations"] == "h2"
    assert [host.host for host in merged.hosts] == ["h0", "h1", "h2"]
    assert merged.profile.files == ["h0.xplane.pb", "h1.xplane.pb", "h2.xplane.pb"]
    assert merged.profile.bytes == 3 * _host("h0").bytes
    assert merged.missing_hosts == {"h3": "timed out"}
    assert len(merged.hlo_programs) == len(_host("h0").hlo_programs)  # the same programs on every host, once


def test_nothing_to_merge_is_an_error():
    with pytest.raises(ValueError, match="no host's evidence"):
        merge_hosts([], source="gs://b/s", session="s")
