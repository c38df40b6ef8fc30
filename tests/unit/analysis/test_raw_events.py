"""The raw-event reader: interval arithmetic, nesting, steps, and what it refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
from analysis_support import facts, xplane
from pydantic import TypeAdapter, ValidationError

from mldiag.analysis.host_evidence import HostEvidence, StepSource
from mldiag.analysis.profiles import UnreadableProfile
from mldiag.analysis.raw_events import _parents, _Union, read_host_evidence


def test_union_covers_overlaps_once_and_clips_to_each_window():
    union = _Union(np.array([0, 5, 20, 22]), np.array([10, 12, 25, 24]))
    windows = np.array([[0, 30], [6, 21], [12, 20], [100, 200]])
    assert union.covered(windows).tolist() == [17, 7, 0, 0]


def test_nesting_finds_each_events_parent_and_self_time():
    starts = np.array([0, 1, 2, 5, 20])
    ends = np.array([10, 4, 3, 9, 21])
    assert _parents(starts, ends).tolist() == [-1, 0, 1, 0, -1]


def test_steps_come_from_the_step_markers():
    evidence = read_host_evidence(xplane("input_bound"))
    assert evidence.step_source is StepSource.STEP_MARKERS and evidence.step_marker == "train"
    assert evidence.steps == facts("input_bound")["steps"] == len(evidence.series.step_ms)
    assert evidence.series.step_ms[0] > 0 and evidence.series.gap_before_ms[0] == 0.0
    assert evidence.host == "fixture-host" and evidence.dispatches_per_step == 1.0


def test_the_evidence_the_reader_prints_validates_back_whole_and_nothing_else():
    evidence = read_host_evidence(xplane("input_bound"))
    printed = evidence.to_json()
    assert TypeAdapter(HostEvidence).validate_json(printed) == evidence
    with pytest.raises(ValidationError, match="surprise"):
        TypeAdapter(HostEvidence).validate_json(json.dumps({**json.loads(printed), "surprise": 1}))
    evidence.busy_fraction = float("nan")
    with pytest.raises(ValueError, match="not JSON compliant"):
        evidence.to_json()


def test_compilation_inside_steps_is_counted():
    evidence = read_host_evidence(xplane("recompiling"))
    assert evidence.compiles_in_steps == facts("recompiling")["compiles_in_steps"]
    assert evidence.compile_ms_per_step > 0.5 * evidence.step_ms.mean
    assert all(ms > 0 for ms in evidence.series.compile_ms)


@pytest.mark.parametrize("content", [b"", b"not a protobuf at all\n", b"\x0a\xff\xff\xff\xff\x0f"])
def test_anything_but_an_xspace_is_refused(tmp_path, content):
    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(content)
    with pytest.raises(UnreadableProfile):
        read_host_evidence(bad)


def test_a_truncated_profile_is_refused(tmp_path):
    whole = xplane("input_bound").read_bytes()
    cut = tmp_path / "host.xplane.pb"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UnreadableProfile, match="not a readable XSpace"):
        read_host_evidence(cut)


