"""The timeline the raw-event read saves answers XProf's event aggregation exactly as XProf itself does
(XProf converts each profile here)."""

from __future__ import annotations

import json

import pytest
from analysis_support import saved, xplane  # noqa: F401 (saved is a fixture)

from mldiag.analysis.loop.raw_events import read_host_evidence
from mldiag.analysis.profile.timeline import Timeline, aggregate_events
from mldiag.analysis.profile.trace_names import COMMUNICATION
from mldiag.analysis.reasoning.followups import EVENT_FAMILIES, events_regex

QUERIES = [*EVENT_FAMILIES.values(), "(?i)convert", ".*"]


def xprof_answer(path, event_regex, group_by="event"):
    from xprof.cli.internal.oss.xplane_tools import aggregate_xplane_events

    return aggregate_xplane_events.__wrapped__(str(path), event_regex=event_regex, group_by=group_by)


@pytest.mark.parametrize(("name", "group_by"), [
    ("unfused_small_ops", "event"), ("recompiling", "event"), ("recompiling", "plane"), ("recompiling", "line"),
    ("mi300x_gemm", "event"), ("mi300x_gemm", "line"),
])
def test_the_answer_is_xprofs_own(saved, name, group_by):
    for event_regex in QUERIES:
        assert aggregate_events([saved(name)], event_regex, group_by) == xprof_answer(xplane(name), event_regex,
                                                                                       group_by), event_regex


def test_named_events_match_exactly_those_events(saved):
    event_regex = events_regex(["wrapped_convert", "%copy"])
    answer = json.loads(aggregate_events([saved("unfused_small_ops")], event_regex))
    assert {group["event"] for group in answer["aggregates"]} == {"wrapped_convert", "copy"}
    assert json.dumps(answer, indent=2) == xprof_answer(xplane("unfused_small_ops"), event_regex)


@pytest.mark.parametrize("group_by", ["event", "plane", "line"])
def test_tpu_events_timed_to_the_picosecond_count_as_xprof_counts_them(saved, group_by):
    collectives = "(?i)" + COMMUNICATION.pattern
    answer = aggregate_events([saved("tpu_v6e4_inference")], collectives, group_by)
    assert answer == xprof_answer(xplane("tpu_v6e4_inference"), collectives, group_by)
    totals = [group["total_duration_ps"] for group in json.loads(answer)["aggregates"]]
    assert any(total % 1000 for total in totals)  # picoseconds that whole nanoseconds would have lost


def test_events_named_by_a_number_are_left_to_xprof_or_approximated(tmp_path):
    import jax
    import jax.numpy as jnp

    jax.profiler.start_trace(str(tmp_path / "trace"), create_perfetto_link=False)
    for step in range(3):
        with jax.profiler.TraceAnnotation("12345", msg="load batch"):
            (jnp.ones(8) + step).block_until_ready()
    jax.profiler.stop_trace()
    (profile,) = (tmp_path / "trace").rglob("*.xplane.pb")
    read_host_evidence(profile, tmp_path / "saved.timeline.npz")
    timeline = Timeline.load(tmp_path / "saved.timeline.npz")

    # XProf names these events after the id of their interned message; the raw-event reader keeps their names.
    named_by_xprof = {group["event"] for group in json.loads(xprof_answer(profile, ".*"))["aggregates"]}
    assert not {"12345", "load batch"} & named_by_xprof
    assert aggregate_events([timeline], ".*") is None
    groups = json.loads(aggregate_events([timeline], "^12345$", approximate=True))["aggregates"]
    assert [(group["event"], group["count"]) for group in groups] == [("12345", 3)]
