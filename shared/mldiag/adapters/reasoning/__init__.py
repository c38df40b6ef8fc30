"""Reasoning models an investigation can ask: Gemini on Vertex AI; and the investigation the settings choose."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mldiag.analysis.reasoning.investigation import Investigator
    from mldiag.config import Settings

# The settings :func:`investigator` reads: all a process needs to investigate as this deployment does.
REASONER_SETTINGS = frozenset({"reasoner", "project", "vertex_model", "vertex_location", "vertex_endpoint"})


def investigator(settings: Settings, reasoner: str | None = None) -> Investigator:
    """The investigation the settings ask for (``reasoner`` overrides ``settings.reasoner``): Gemini on Vertex AI
    with the offline reasoner to fall back on, or the offline reasoner alone."""
    from mldiag.analysis.reasoning.investigation import Investigator
    from mldiag.analysis.reasoning.offline import OfflineReasoner

    offline = OfflineReasoner()
    if (reasoner or settings.reasoner) == "vertex":
        from mldiag.adapters.reasoning.vertex import VertexReasoner

        return Investigator(VertexReasoner.from_settings(settings), offline)
    return Investigator(offline, offline)
