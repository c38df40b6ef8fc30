"""How findings quote what comes from a profile: as data, never as words of their own."""

from __future__ import annotations

import json


def quoted(name: str) -> str:
    """A profile string as evidence: JSON-quoted, so it reads as data wherever it lands."""
    return json.dumps(name, ensure_ascii=False)
