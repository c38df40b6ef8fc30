"""The quality harness: every profile's diagnosis and figures against ground truth measured outside the analyser.

One test per (fixture, expectation) of ``expectations/<fixture>.yaml`` and per
(fixture, invariant); the Gemini reasoner's findings, where a recorded
conversation exists for the fixture, are held to the same invariants. See
``README.md`` in this folder for the file format.
"""

from __future__ import annotations

from typing import Any

import pytest
from quality_checks import INVARIANTS, check_kind, run_check
from quality_support import GEMINI_RECORDINGS, REPO, baseline_source, load_expectations

pytestmark = pytest.mark.quality

EXPECTATIONS = load_expectations()


def _param(fixture: str, check: str, known_wrong: str | None, *values: Any):
    marks = [pytest.mark.xfail(strict=True, reason=known_wrong)] if known_wrong else []
    return pytest.param(fixture, check, *values, id=f"{fixture}::{check}", marks=marks)


def _expectation_params():
    for fixture, document in EXPECTATIONS.items():
        for spec in document.get("expectations", []):
            yield _param(fixture, spec["id"], spec.get("known_wrong"), spec)


def _invariant_params():
    for fixture, document in EXPECTATIONS.items():
        known_wrong = document.get("invariants_known_wrong") or {}
        for name in INVARIANTS:
            yield _param(fixture, name, known_wrong.get(name), name)


def _gemini_params():
    for fixture, document in EXPECTATIONS.items():
        if (GEMINI_RECORDINGS / f"{fixture}.json").exists():
            known_wrong = document.get("gemini_known_wrong") or {}
            for name in ("answered", "same_evidence", *INVARIANTS):
                yield _param(fixture, f"gemini:{name}", known_wrong.get(name), name)


@pytest.mark.parametrize(("fixture", "check", "spec"), list(_expectation_params()))
def test_expectation(fixture: str, check: str, spec: dict[str, Any], analyses, record_property) -> None:
    record_property("quality", (fixture, check))
    document = EXPECTATIONS[fixture]
    problem = run_check(analyses(document["source"], baseline_source(fixture, EXPECTATIONS)), spec,
                        document.get("truth") or {})
    assert problem is None, problem


@pytest.mark.parametrize(("fixture", "check", "invariant"), list(_invariant_params()))
def test_invariant(fixture: str, check: str, invariant: str, analyses, record_property) -> None:
    record_property("quality", (fixture, check))
    problem = INVARIANTS[invariant](analyses(EXPECTATIONS[fixture]["source"]))
    assert problem is None, problem


@pytest.mark.parametrize(("fixture", "check", "name"), list(_gemini_params()))
def test_gemini_reasoner(fixture: str, check: str, name: str, analyses, gemini_analyses, record_property) -> None:
    """Gemini reasons over the same evidence as the offline analyst, and its findings keep the invariants."""
    record_property("quality", (fixture, check))
    source = EXPECTATIONS[fixture]["source"]
    analysis = gemini_analyses(source, fixture)
    if name == "answered":
        investigation = analysis["investigation"]
        assert investigation["reasoner"] == "vertex" and not investigation["fallback_reason"], investigation
    elif name == "same_evidence":
        offline = analyses(source)
        for section in ("metrics", "hosts"):
            assert analysis[section] == offline[section], f"{section} differs from the offline analysis"
    else:
        problem = INVARIANTS[name](analysis)
        assert problem is None, problem


def test_every_expectation_file_is_well_formed() -> None:
    """Each file names an existing profile, one check per expectation, unique ids, and truth keys that exist."""
    assert EXPECTATIONS, "no expectation files"
    for fixture, document in EXPECTATIONS.items():
        assert document.get("fixture") == fixture, f"{fixture}.yaml names fixture {document.get('fixture')!r}"
        assert (REPO / document["source"]).is_file(), f"{fixture}: {document['source']} does not exist"
        assert document.get("baseline", fixture) in EXPECTATIONS, f"{fixture}: no fixture {document['baseline']!r}"
        truth = document.get("truth") or {}
        for key, number in truth.items():
            assert {"value", "how"} <= set(number), f"{fixture}: truth {key} needs a value and how it was measured"
        ids = [spec["id"] for spec in document.get("expectations", [])]
        assert len(ids) == len(set(ids)), f"{fixture}: duplicate expectation ids"
        for spec in document.get("expectations", []):
            check_kind(spec)
            for field in ("truth", "at_least", "at_most"):
                if isinstance(spec.get(field), str):
                    assert spec[field] in truth, f"{fixture}:{spec['id']}: no truth {spec[field]!r}"
        unknown = set(document.get("invariants_known_wrong") or {}) - set(INVARIANTS)
        assert not unknown, f"{fixture}: invariants_known_wrong names unknown invariants {unknown}"
