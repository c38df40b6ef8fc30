"""Printing resources as the CLI's ``--format json|yaml|table`` asks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

console = Console()
errors = Console(stderr=True)


class Format(StrEnum):
    json = "json"
    yaml = "yaml"
    table = "table"


def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


def show(items: Sequence[dict[str, Any]] | dict[str, Any], fmt: Format, columns: Sequence[str] = ()) -> None:
    """Print one resource (a dict) or a list of them; tables show ``columns`` (dotted paths)."""
    if fmt is Format.json:
        print(json.dumps(items, indent=2, sort_keys=False))
        return
    if fmt is Format.yaml:
        print(yaml.safe_dump(items, sort_keys=False), end="")
        return
    if isinstance(items, dict):
        table = Table("FIELD", "VALUE", show_header=False)
        for key, value in items.items():
            table.add_row(key, _cell(value))
        console.print(table)
        return
    rows = list(items)
    columns = list(columns) or sorted({key for row in rows for key in row})
    table = Table(*[c.rsplit(".", 1)[-1].upper() for c in columns], show_lines=False)
    for row in rows:
        table.add_row(*[_cell(_lookup(row, column)) for column in columns])
    console.print(table)


def _lookup(row: dict[str, Any], dotted: str) -> Any:
    value: Any = row
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
