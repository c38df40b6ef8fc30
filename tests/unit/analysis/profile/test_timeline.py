"""The timeline the raw-event read saves: every event kept in file order, and XProf's limit on the events
it scans. tests/integration/analysis/test_timeline_against_xprof.py checks its answers against XProf's own."""

from __future__ import annotations

import json

from analysis_support import saved, xplane  # noqa: F401 (saved is a fixture)

from mldiag.analysis.profile import timeline as timeline_module
from mldiag.analysis.profile.timeline import Timeline, TimelineLine, aggregate_events


def _first(timeline, events):
    lines, left = [], events
    for line in timeline.lines:
        lines.append(TimelineLine(line.plane, line.name, line.ids[:left], line.durations_ps[:left]))
        left -= len(lines[-1].ids)
    return Timeline(timeline.names, lines)


def test_like_xprof_it_stops_after_its_limit_of_events(saved, monkeypatch):
    whole = saved("unfused_small_ops")
    everything = json.loads(aggregate_events([whole], ".*"))
    assert not everything["truncated"] and everything["events_scanned"] == sum(len(line.ids) for line in whole.lines)

    monkeypatch.setattr(timeline_module, "MAX_EVENTS_SCANNED", 1000)
    limited = json.loads(aggregate_events([whole, whole], ".*"))
    assert limited["truncated"] and limited["events_scanned"] == 1001  # XProf counts the one past the limit in
    monkeypatch.setattr(timeline_module, "MAX_EVENTS_SCANNED", 10**9)
    assert limited["aggregates"] == json.loads(aggregate_events([_first(whole, 1001)], ".*"))["aggregates"]


def test_every_event_of_the_file_is_kept_in_file_order(saved):
    from jaxlib import _profile_data

    profile = _profile_data.ProfileData.from_file(str(xplane("mi300x_gemm")))
    timeline = saved("mi300x_gemm")
    read = [(plane.name, line.name, [event.name for event in line.events]) for plane in profile.planes
            for line in plane.lines]
    assert read == [(line.plane, line.name, [timeline.names[i] for i in line.ids]) for line in timeline.lines]
