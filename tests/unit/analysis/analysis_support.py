"""Where the committed test profiles are, the facts measured when they were made, and helpers to read results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
