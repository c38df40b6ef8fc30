"""What a document query means, whichever store runs it.

Both document stores follow Firestore's rules, so that a query returns the same
documents in the same order on SQLite, the emulator and Firestore itself:

- a field is a dotted path into the document (``labels.team``); the first
  segment is an identifier, later ones may also hold ``-`` (label keys);
- results are ordered by the explicit ``order_by`` fields, then by every field
  compared with an inequality that ``order_by`` does not name (in lexicographic
  order), then by the document key, each implicit order taking the direction of
  the last explicit one;
- a document without an ordered field is left out of the results.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mldiag.domain.errors import InvalidArgument
from mldiag.ports import OrderBy, Where

KEY = "__name__"
"""The pseudo-field that orders by document key (Firestore's own name for it)."""

INEQUALITIES = frozenset({"!=", "<", "<=", ">", ">="})

_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)*$")


def field_segments(field: str) -> list[str]:
    """The segments of a dotted field path; :class:`InvalidArgument` if it is not one."""
    if not isinstance(field, str) or not _FIELD.match(field):
        raise InvalidArgument(f"cannot query on {field!r}", field="filter")
    return field.split(".")


def result_order(where: Sequence[Where], order_by: Sequence[OrderBy]) -> list[OrderBy]:
    """The complete ordering of a query's results, ending with the :data:`KEY` tie-break."""
    descending = order_by[-1].descending if order_by else False
    ordered = {order.field for order in order_by}
    compared = {condition.field for condition in where if condition.op in INEQUALITIES} - ordered
    implicit = sorted(compared, key=field_segments)
    return [
        *order_by,
        *(OrderBy(field, descending) for field in implicit),
        OrderBy(KEY, descending),
    ]
