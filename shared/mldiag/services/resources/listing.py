"""List requests: a small AIP-160 ``filter``, AIP-132 ``orderBy`` and paging.

Supported filter grammar: ``field OP value`` terms joined by ``AND``, where OP is
one of ``= != < <= > >=`` and value is a bare word or a quoted string (which
may hold anything, ``\\"`` for a quote: ``displayName = "a (b) AND c"``). Fields are
the resource's JSON fields (``runPhase``, ``labels.team``, ``analysis.state``;
snake_case accepted) and values are read as the field's type, so
``runPhase = COMPLETED``, ``kind = on-demand`` and ``isMaster = true`` all work.
Anything else (``OR``, parentheses, functions) is refused with a clear message.
"""

from __future__ import annotations

import json
import re
import shlex
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from mldiag.domain.errors import InvalidArgument
from mldiag.domain.resources import Resource
from mldiag.ports import Operator, OrderBy, Where
from mldiag.services.repository import Page, Repository

R = TypeVar("R", bound=Resource)

_OPERATORS: dict[str, Operator] = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_TERM = re.compile(r"^(?P<field>[A-Za-z_][\w.-]*)\s*(?P<op><=|>=|!=|=|<|>)\s*(?P<value>.+)$", re.DOTALL)
_AND = re.compile(r"\s+AND\s+")
_UNSUPPORTED = re.compile(r"\s(OR|NOT)\s|^NOT\s|[()]")
_QUOTED = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")


NEWEST_FIRST = (OrderBy("createTime", descending=True),)


@dataclass(frozen=True)
class ListRequest:
    filter: str = ""
    order_by: str = ""
    page_size: int = 0
    page_token: str = ""


def list_page(repository: Repository[R], parent: str, request: ListRequest,
              default_order: Sequence[OrderBy] = NEWEST_FIRST) -> Page[R]:
    """One page of ``parent``'s children in ``repository``, filtered and ordered as asked."""
    return repository.list(
        parent,
        where=parse_filter(repository.model, request.filter),
        order_by=parse_order_by(repository.model, request.order_by, default_order),
        page_size=request.page_size,
        page_token=request.page_token,
    )


@dataclass(frozen=True)
class FieldPath:
    """A field of a resource's JSON, resolved against its model: the stored keys and the leaf type."""

    keys: tuple[str, ...]
    annotation: Any

    @property
    def dotted(self) -> str:
        return ".".join(self.keys)

    @property
    def top(self) -> str:
        return self.keys[0]


def resolve_field(model: type[BaseModel], path: str, *, field: str) -> FieldPath:
    """Map ``run_phase`` / ``runPhase`` / ``labels.team`` to stored JSON keys.

    Nested models resolve field by field; below a map (labels, configs) the rest of
    the path is taken verbatim as keys.
    """
    parts = path.split(".")
    keys: list[str] = []
    current: Any = model
    for index, part in enumerate(parts):
        if isinstance(current, type) and issubclass(current, BaseModel):
            found = _field(current, part)
            if found is None:
                raise InvalidArgument(f"{current.__name__} has no field {part!r}", field=field)
            key, current = found
            keys.append(key)
            continue
        if _is_map(current):
            keys.extend(parts[index:])
            return FieldPath(tuple(keys), _map_value_type(current))
        raise InvalidArgument(f"{'.'.join(parts[:index])!r} has no sub-fields", field=field)
    return FieldPath(tuple(keys), current)


def _field(model: type[BaseModel], name: str) -> tuple[str, Any] | None:
    """The stored key of ``model``'s field ``name`` (either spelling) and its type, or None."""
    for field_name, info in model.model_fields.items():
        if name in (field_name, info.alias):
            annotation = _unwrap_optional(info.annotation)
            return info.alias or field_name, Annotated[(annotation, *info.metadata)] if info.metadata else annotation
    # Derived, output-only fields (a session's sessionPhase) are stored with the resource, so they filter too.
    for field_name, computed in model.model_computed_fields.items():
        if name in (field_name, computed.alias):
            return computed.alias or field_name, computed.return_type
    return None


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _is_map(annotation: Any) -> bool:
    return get_origin(annotation) is dict


def _map_value_type(annotation: Any) -> Any:
    return get_args(annotation)[1]


def _typed_value(path: FieldPath, raw: str, *, quoted: bool) -> Any:
    """``raw`` as the field's JSON value: enums normalised, timestamps formatted, numbers parsed."""
    if path.annotation is Any:  # free-form maps (configs): a bare 32 is a number, "32" a string
        if quoted:
            return raw
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    adapter = TypeAdapter(path.annotation)
    try:
        value = adapter.validate_python(raw)
    except ValidationError:
        raise InvalidArgument(f"{raw!r} is not a valid value for {path.dotted}", field="filter") from None
    return adapter.dump_python(value, mode="json")


def parse_filter(model: type[Resource], text: str) -> list[Where]:
    """``runPhase = COMPLETED AND labels.team = "infra"`` → store conditions."""
    text = text.strip()
    if not text:
        return []
    conditions = []
    for term in _terms(text):
        match = _TERM.match(term.strip())
        if not match:
            raise InvalidArgument(f"cannot read {term.strip()!r}: expected 'field OP value'", field="filter")
        path = resolve_field(model, match["field"], field="filter")
        if isinstance(path.annotation, type) and issubclass(path.annotation, BaseModel):
            raise InvalidArgument(f"{path.dotted} is a message; filter on one of its fields", field="filter")
        raw = match["value"].strip()
        value = _typed_value(path, _unquote(raw), quoted=raw[:1] in "\"'")
        conditions.append(Where(path.dotted, _OPERATORS[match["op"]], value))
    return conditions


def _terms(text: str) -> list[str]:
    """The ``AND``-joined terms of a filter; quoted values may hold anything (``"a (b) AND c"``)."""
    bare = _QUOTED.sub(lambda quoted: "x" * len(quoted.group()), text)
    if _UNSUPPORTED.search(bare):
        raise InvalidArgument("only 'field OP value' terms joined by AND are supported", field="filter")
    terms, start = [], 0
    for joint in _AND.finditer(bare):
        terms.append(text[start:joint.start()])
        start = joint.end()
    return [*terms, text[start:]]


def _unquote(value: str) -> str:
    if value[:1] in "\"'":
        try:
            (unquoted,) = shlex.split(value)
        except ValueError:
            raise InvalidArgument(f"unbalanced quotes in {value!r}", field="filter") from None
        return unquoted
    return value


def parse_order_by(model: type[Resource], text: str, default: Sequence[OrderBy]) -> list[OrderBy]:
    """``createTime desc, displayName`` → store ordering (``default`` when empty)."""
    if not text.strip():
        return list(default)
    orders = []
    for clause in text.split(","):
        words = clause.split()
        if len(words) not in (1, 2) or (len(words) == 2 and words[1].lower() not in ("asc", "desc")):
            raise InvalidArgument(f"cannot read {clause.strip()!r}: expected 'field [asc|desc]'", field="orderBy")
        path = resolve_field(model, words[0], field="orderBy")
        orders.append(OrderBy(path.dotted, descending=len(words) == 2 and words[1].lower() == "desc"))
    return orders
