"""Where the committed test profiles are, the facts measured when they were made, helpers to read results,
and the ``saved`` timelines fixture (unit and integration tests of the timeline share it)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PROFILES = Path(__file__).resolve().parents[2] / "fixtures" / "profiles"
THIRD_PARTY = PROFILES / "third_party"
GENERATED = ("compute_bound", "input_bound", "unfused_small_ops", "recompiling", "hostile")


def xplane(name: str) -> Path:
    """The profile file of a fixture: a generated one by workload name, or a third-party folder."""
    folder = THIRD_PARTY / name if (THIRD_PARTY / name).is_dir() else PROFILES / name
    (found,) = folder.rglob("*.xplane.pb")
    return found


def facts(name: str) -> dict[str, Any]:
    return json.loads((PROFILES / name / "facts.json").read_text())


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a JSON document."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    """``saved(name)``: the timeline the raw-event read saves for a fixture profile (import it to use it)."""
    from mldiag.analysis.loop.raw_events import read_host_evidence
    from mldiag.analysis.profile.timeline import Timeline

    folder = tmp_path_factory.mktemp("timelines")

    @functools.cache
    def timeline(name: str) -> Timeline:
        path = folder / f"{name}.timeline.npz"
        read_host_evidence(xplane(name), path)
        return Timeline.load(path)

    return timeline
