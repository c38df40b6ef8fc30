"""Resource names and ids: the only strings that reach bucket paths and document keys."""

import pytest

from mldiag.domain import InvalidArgument
from mldiag.domain.names import id_from_text, parse_child, parse_run, short_name, validate_id


def test_round_trip():
    name = "projects/p1/locations/us-central1/machineLearningRuns/r-1/profilerSessions/2026_01_02_03_04_05"
    child = parse_child(name, "profilerSessions")
    assert str(child) == name
    assert str(child.run_name) == "projects/p1/locations/us-central1/machineLearningRuns/r-1"
    assert parse_run(str(child.run_name)).run == "r-1"


@pytest.mark.parametrize("bad", ["..", "a/b", "../etc", "", "-x", "a" * 129, "x..y", "sp ace", "nul\x00"])
def test_hostile_ids_are_refused(bad):
    with pytest.raises(InvalidArgument):
        validate_id(bad)


def test_wrong_collection_is_refused():
    with pytest.raises(InvalidArgument, match="profilerSessions"):
        parse_child("projects/p/locations/l/machineLearningRuns/r/monitoredEvents/e", "profilerSessions")


def test_ids_from_text_are_stable_valid_and_distinct():
    assert id_from_text("my-run") == "my-run"
    messy = id_from_text("My Run / 2026")
    assert messy == id_from_text("My Run / 2026")
    assert messy != id_from_text("my run 2026")
    validate_id(messy)
    validate_id(id_from_text("x" * 500))
    assert len(id_from_text("x" * 500)) <= 63


@pytest.mark.parametrize(("name", "short"), [
    ("projects/p/locations/l/machineLearningRuns/r1", "r1"),
    ("projects/p/locations/l/machineLearningRuns/r1/profilerSessions/s1", "r1/s1"),
    ("projects/p/locations/l/machineLearningRuns/r1/monitoredEvents/e1", "r1/e1"),
    ("projects/p/locations/l", "projects/p/locations/l"),
    ("gs://bucket/r1/plugins/profile/s1", "gs://bucket/r1/plugins/profile/s1"),
])
def test_a_person_names_a_run_and_its_children_by_their_ids(name, short):
    assert short_name(name) == short
