"""``docs/accuracy.md`` is written from the expectation files as they are: regenerate it when they change."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from quality_support import REPO, load_expectations

pytestmark = pytest.mark.quality

REGENERATE = "regenerate it: PYTHONPATH=shared python scripts/accuracy_table.py"


def _script():
    spec = importlib.util.spec_from_file_location("accuracy_table", REPO / "scripts" / "accuracy_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


ACCURACY = _script()


def test_the_accuracy_table_is_written_from_the_expectation_files_as_they_are():
    page = ACCURACY.DOC.read_text(encoding="utf-8")
    documents = load_expectations()
    assert ACCURACY.written_digest(page) == ACCURACY.expectations_digest(documents), (
        f"docs/accuracy.md shows other expectations than tests/quality/expectations; {REGENERATE}")
    rows = re.findall(r"^\| `([\w.-]+)` \|", page, re.MULTILINE)
    assert rows == sorted(documents), f"docs/accuracy.md has rows for {rows}; {REGENERATE}"
    for fixture, document in documents.items():
        (row,) = [line for line in page.splitlines() if line.startswith(f"| `{fixture}` |")]
        missing = [spec["id"] for spec in document.get("expectations") or [] if f"`{spec['id']}`:" not in row]
        assert not missing, f"{fixture}: docs/accuracy.md does not list {missing}; {REGENERATE}"


@pytest.mark.parametrize("change", [
    lambda documents: documents.pop("input_bound"),
    lambda documents: documents["input_bound"]["expectations"].append({"id": "new", "status": ["OPTIMAL"]}),
    lambda documents: documents["input_bound"]["expectations"][0].update(known_wrong="today it is wrong"),
    lambda documents: documents["input_bound"]["truth"]["step_ms"].update(value=50.0),
    lambda documents: documents["input_bound"].update(invariants_known_wrong={"busy_plus_idle_is_one": "why"}),
])
def test_the_digest_changes_with_what_the_table_shows(change):
    documents = load_expectations()
    before = ACCURACY.expectations_digest(documents)
    change(documents)
    assert ACCURACY.expectations_digest(documents) != before


def test_how_a_truth_was_measured_is_not_in_the_table():
    documents = load_expectations()
    before = ACCURACY.expectations_digest(documents)
    documents["input_bound"]["truth"]["step_ms"]["how"] = "by another clock"
    assert ACCURACY.expectations_digest(documents) == before
