"""Partial updates with Google's ``update_mask`` semantics (AIP-134).

A path in the mask copies that field from the request body onto the stored
resource; a path whose field the body leaves out resets it to its default. No
mask means "every mutable field the body sets"; ``*`` means "every mutable
field". Output-only fields in the body are ignored unless the mask names them,
which is an error. A per-field ``merge`` lets a collection decide that a map is
merged entry by entry rather than replaced (profiler sessions' per-host
``targetSessions``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from mldiag.domain.errors import InvalidArgument
from mldiag.domain.resources import Resource
from mldiag.services.resources.listing import FieldPath, resolve_field

R = TypeVar("R", bound=Resource)
Merge = Callable[[Any, Any], Any]
_MISSING = object()


def parse_mask(model: type[Resource], mask: str, body: Mapping[str, Any], mutable: Collection[str]) -> list[FieldPath]:
    """The field paths an update touches (validated against ``mutable`` top-level JSON fields)."""
    mask = mask.strip()
    if mask == "*":
        return [resolve_field(model, name, field="updateMask") for name in mutable]
    if not mask:
        paths = [resolve_field(model, name, field="updateMask") for name in body]
        return [path for path in paths if path.top in mutable]
    paths = []
    for raw in mask.split(","):
        path = resolve_field(model, raw.strip(), field="updateMask")
        if path.top not in mutable:
            raise InvalidArgument(f"{path.top} cannot be updated", field="updateMask")
        paths.append(path)
    return paths


def apply_update(
    resource: R,
    body: Mapping[str, Any],
    mask: str,
    *,
    mutable: Collection[str],
    merge: Mapping[str, Merge] | None = None,
) -> R:
    """``resource`` with the masked fields of ``body`` applied (validated, a new object)."""
    model = type(resource)
    incoming = model.from_json(dict(body)).to_json_dict()
    updated = resource.to_json_dict()
    for path in parse_mask(model, mask, body, mutable):
        value = _get(incoming, path.keys)
        if len(path.keys) == 1 and merge and path.top in merge and value is not _MISSING:
            value = merge[path.top](updated.get(path.top), value)
        _put(updated, path.keys, value)
    return model.from_json(updated)


def assign(target: Resource, source: Resource) -> None:
    """Copy every field of ``source`` onto ``target`` in place (for repository ``mutate`` callbacks)."""
    for name in type(source).model_fields:
        setattr(target, name, getattr(source, name))


def _get(document: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    value: Any = document
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _put(document: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    for key in keys[:-1]:
        child = document.get(key)
        if not isinstance(child, dict):
            if value is _MISSING:
                return
            child = document[key] = {}
        document = child
    if value is _MISSING:
        document.pop(keys[-1], None)
    else:
        document[keys[-1]] = value
