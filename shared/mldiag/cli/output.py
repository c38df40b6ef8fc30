"""Printing resources as the CLI's ``--format json|yaml|table`` asks.

Tables are for reading and for copying from: an identifier (the ``id``
column, a resource name, a URI) is never cut or wrapped, so a copied one
works; other columns fold to fit a terminal. Where stdout is not a terminal
(a pipe, a file) nothing wraps lines, so a table takes the width its cells
need. Cells are printed as text, never as console markup: names and
findings come from profiles.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

console = Console()
errors = Console(stderr=True)

_IDENTIFIER = re.compile(r"^(projects/\S+|[a-z][a-z0-9+.-]*://\S+)$")
_UNBOUNDED = 1 << 16
_PADDING = 2  # a cell's space on either side
_FOLDED_MIN = 6  # the narrowest a folding column gets while identifiers push the table past the terminal


class Format(StrEnum):
    json = "json"
    yaml = "yaml"
    table = "table"


def cell(value: Any) -> str:
    """A value as a table shows it: JSON for lists and maps, nothing for null."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


def milliseconds(value: Any) -> str:
    """A time in milliseconds, as a table shows it."""
    return "" if value is None else f"{value:.2f} ms"


@dataclass(frozen=True)
class Column:
    """A table column: a dotted path into each resource, its header, and how a value reads."""

    path: str
    header: str = ""
    format: Callable[[Any], str] = cell

    @property
    def title(self) -> str:
        return self.header or re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", self.path.rsplit(".", 1)[-1]).upper()


def show(items: Sequence[dict[str, Any]] | dict[str, Any], fmt: Format, columns: Sequence[str | Column] = (),
         *, out: Console | None = None) -> None:
    """Print one resource (a dict) or a list of them; tables show ``columns`` (dotted paths or :class:`Column`)."""
    if fmt is Format.json:
        print(json.dumps(items, indent=2, sort_keys=False))
        return
    if fmt is Format.yaml:
        print(yaml.safe_dump(items, sort_keys=False), end="")
        return
    if isinstance(items, dict):
        _print(_table([Column("field"), Column("value")],
                      [[key, cell(value)] for key, value in items.items()], show_header=False), out or console)
        return
    rows = list(items)
    paths = columns or sorted({key for row in rows for key in row})
    chosen = [column if isinstance(column, Column) else Column(column) for column in paths]
    _print(_table(chosen, [[column.format(_lookup(row, column.path)) for column in chosen] for row in rows]),
           out or console)


def _table(columns: Sequence[Column], rows: list[list[str]], show_header: bool = True) -> Table:
    table = Table(show_header=show_header, padding=(0, _PADDING // 2))
    for index, column in enumerate(columns):
        values = [row[index] for row in rows]
        if column.path == "id" or (any(values) and all(_IDENTIFIER.match(v) for v in values if v)):
            # A fixed width is the one rich never shrinks before the others: the longest value, whole.
            table.add_column(column.title, no_wrap=True,
                             width=max(cell_len(v) for v in [column.title, *values]))
        else:
            table.add_column(column.title, overflow="fold")
    for row in rows:
        table.add_row(*[Text(value) for value in row])
    return table


def _print(table: Table, out: Console) -> None:
    if out.is_terminal:
        # Wider than the terminal only when its identifiers alone do not fit: then the terminal wraps the lines.
        narrowest = sum((column.width or _FOLDED_MIN) + _PADDING for column in table.columns) + len(table.columns) + 1
        width = max(out.width, narrowest)
    else:
        width = Measurement.get(out, out.options.update_width(_UNBOUNDED), table).maximum
    out.print(Segments(out.render(table, out.options.update_width(width))), crop=False)


def _lookup(row: dict[str, Any], dotted: str) -> Any:
    value: Any = row
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
