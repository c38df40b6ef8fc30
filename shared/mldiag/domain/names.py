"""Resource names: ``projects/P/locations/L/machineLearningRuns/R/<collection>/<id>``.

Ids end up in bucket paths and document keys, so they are validated here once:
letters, digits, ``.``, ``_`` and ``-``, at most 128 characters, never ``..``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from mldiag.domain.errors import InvalidArgument

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SANITIZE = re.compile(r"[^a-z0-9-]+")

RUNS = "machineLearningRuns"
SESSIONS = "profilerSessions"
TARGETS = "profilerTargets"
EVENTS = "monitoredEvents"
OPERATIONS = "operations"
CHILD_COLLECTIONS = (SESSIONS, TARGETS, EVENTS)


def is_id(value: object) -> bool:
    return isinstance(value, str) and bool(_ID.match(value)) and ".." not in value


def validate_id(value: str, *, field: str = "id") -> str:
    if not is_id(value):
        raise InvalidArgument(
            f"{value!r} is not a valid id (letters, digits, '.', '_', '-'; "
            "1-128 characters; starting with a letter or digit)",
            field=field,
        )
    return value


def id_from_text(text: str, *, max_length: int = 63) -> str:
    """A stable, valid id for free text (an SDK logical id, a run inferred from a path).

    Readable where the text allows, with a short hash suffix whenever anything
    was changed, so two texts that sanitize alike still get different ids.
    """
    lowered = text.strip().lower()
    slug = _SANITIZE.sub("-", lowered).strip("-") or "run"
    if slug == lowered and len(slug) <= max_length:
        return slug
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{slug[: max_length - 9].rstrip('-')}-{digest}"


@dataclass(frozen=True)
class LocationName:
    project: str
    location: str

    def __str__(self) -> str:
        return f"projects/{self.project}/locations/{self.location}"

    def run(self, run_id: str) -> RunName:
        return RunName(self.project, self.location, validate_id(run_id, field="machineLearningRunId"))

    def operation(self, operation_id: str) -> str:
        return f"{self}/{OPERATIONS}/{validate_id(operation_id, field='operationId')}"


@dataclass(frozen=True)
class RunName:
    project: str
    location: str
    run: str

    def __str__(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/{RUNS}/{self.run}"

    @property
    def parent(self) -> LocationName:
        return LocationName(self.project, self.location)

    def child(self, collection: str, child_id: str) -> ChildName:
        if collection not in CHILD_COLLECTIONS:
            raise InvalidArgument(f"unknown collection {collection!r}", field="name")
        return ChildName(self, collection, validate_id(child_id, field=f"{collection}Id"))


@dataclass(frozen=True)
class ChildName:
    run_name: RunName
    collection: str
    id: str

    def __str__(self) -> str:
        return f"{self.run_name}/{self.collection}/{self.id}"


def parse_location(name: str) -> LocationName:
    parts = name.strip("/").split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "locations":
        raise InvalidArgument(f"{name!r} is not projects/P/locations/L", field="parent")
    return LocationName(validate_id(parts[1], field="project"), validate_id(parts[3], field="location"))


def parse_run(name: str) -> RunName:
    parts = name.strip("/").split("/")
    if len(parts) != 6 or parts[4] != RUNS:
        raise InvalidArgument(f"{name!r} is not projects/P/locations/L/{RUNS}/R", field="name")
    return parse_location("/".join(parts[:4])).run(parts[5])


def parse_child(name: str, collection: str | None = None) -> ChildName:
    parts = name.strip("/").split("/")
    if len(parts) != 8 or (collection and parts[6] != collection):
        expected = collection or "<collection>"
        raise InvalidArgument(f"{name!r} is not projects/P/locations/L/{RUNS}/R/{expected}/ID", field="name")
    return parse_run("/".join(parts[:6])).child(parts[6], parts[7])


def short_name(name: str) -> str:
    """How a person names a run (``R``) or one of its children (``R/ID``); other names stay whole."""
    parts = name.strip("/").split("/")
    if parts[0] == "projects" and len(parts) in (6, 8) and parts[4] == RUNS:
        return "/".join(parts[5::2])
    return name


def parent_of(name: str) -> str:
    """The parent resource name: a run for children, a location for runs."""
    return name.rsplit("/", 2)[0]
