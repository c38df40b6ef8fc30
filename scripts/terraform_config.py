"""Terraform configuration read with python-hcl2, as plain Python values.

Shared by the offline checks of ``terraform/`` (``check_terraform_schema.py`` and
``tests/unit/terraform``). python-hcl2 keeps string literals quoted (``'"x"'``),
writes expressions as ``"${...}"`` and marks blocks with ``__is_block__``; the
helpers here turn that into labels, literals, blocks and arguments.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions

_OPTIONS = SerializationOptions(with_comments=False)
_MARKER = "__is_block__"
_LABELED_BLOCKS = {"resource": 2, "data": 2, "module": 1, "variable": 1, "output": 1, "provider": 1}


@dataclass(frozen=True)
class Block:
    """One top-level block of a ``.tf`` file: ``resource "type" "name" { ... }`` and the like."""

    kind: str
    labels: tuple[str, ...]
    body: dict[str, Any]
    file: Path

    @property
    def address(self) -> str:
        parts = ([] if self.kind == "resource" else [self.kind]) + list(self.labels)
        return ".".join(parts)


def unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def literal(value: Any) -> str | None:
    """The text of a plain string literal; ``None`` for an expression or an interpolated string."""
    if not isinstance(value, str) or "${" in value:
        return None
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return None


def _is_block_body(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if item.get(_MARKER):
        return True
    # A labeled block (`dynamic "x" { ... }`) is a {label: body} wrapper around its body.
    labeled = [v for k, v in item.items() if not k.startswith("__")]
    return bool(labeled) and all(isinstance(v, dict) and v.get(_MARKER) for v in labeled)


def is_block(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_block_body(item) for item in value)


def arguments(body: dict[str, Any]) -> dict[str, Any]:
    """The ``name = value`` arguments of a block body (nested blocks and markers left out)."""
    return {k: v for k, v in body.items() if not k.startswith("__") and not is_block(v)}


def nested_blocks(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(type, body)`` of each nested block, ``dynamic "x"`` blocks included as type ``dynamic``."""
    for key, value in body.items():
        if not key.startswith("__") and is_block(value):
            for item in value:
                yield key, item


def dynamic_blocks(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(generated block type, content body)`` of each ``dynamic`` block in ``body``."""
    for kind, dynamic in nested_blocks(body):
        if kind != "dynamic":
            continue
        for label, spec in dynamic.items():
            if label.startswith("__"):
                continue
            for content_kind, content in nested_blocks(spec):
                if content_kind == "content":
                    yield unquote(label), content


def _labeled(kind: str, entry: dict[str, Any], depth: int) -> Iterator[tuple[tuple[str, ...], dict]]:
    for label, inner in entry.items():
        if label.startswith("__"):
            continue
        if depth == 1:
            yield (unquote(label),), inner
        else:
            for rest, body in _labeled(kind, inner, depth - 1):
                yield (unquote(label), *rest), body


@functools.lru_cache(maxsize=512)
def _parse(text: str) -> dict[str, Any]:
    # Keyed by content: the checks parse the same files again in every planted copy.
    return hcl2.loads(text, serialization_options=_OPTIONS)


def load_file(path: Path) -> list[Block]:
    """The top-level blocks of one file; their bodies are shared, read-only parse results."""
    document = _parse(path.read_text(encoding="utf-8"))
    blocks: list[Block] = []
    for kind, entries in document.items():
        if kind.startswith("__"):
            continue
        for entry in entries:
            depth = _LABELED_BLOCKS.get(kind, 0)
            if depth == 0:
                blocks.append(Block(kind, (), entry, path))
            else:
                blocks.extend(Block(kind, labels, body, path) for labels, body in _labeled(kind, entry, depth))
    return blocks


def load_module(directory: Path) -> list[Block]:
    """Every top-level block of the ``.tf`` files directly in ``directory``."""
    blocks: list[Block] = []
    for path in sorted(directory.glob("*.tf")):
        blocks.extend(load_file(path))
    return blocks


def module_dirs(root: Path) -> list[Path]:
    """Each directory under ``root`` (itself included) that holds ``.tf`` files."""
    return sorted(
        {path.parent for path in root.rglob("*.tf") if ".terraform" not in path.parts}
    )


def local_values(blocks: list[Block]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for block in blocks:
        if block.kind == "locals":
            values.update(arguments(block.body))
    return values


def walk_strings(value: Any) -> Iterator[str]:
    """Every string inside a parsed value, at any depth."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if not key.startswith("__"):
                yield from walk_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk_strings(item)


_LOCAL_SOURCE = re.compile(r"^\.{1,2}/")


def local_module_source(block: Block) -> Path | None:
    """The directory of a ``module`` block whose source is a relative path; else ``None``."""
    source = literal(block.body.get("source"))
    if source is None or not _LOCAL_SOURCE.match(source):
        return None
    return (block.file.parent / source).resolve()
