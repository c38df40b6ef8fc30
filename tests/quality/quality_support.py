"""Where the quality harness's files are, and the analyses it checks: offline as the CLI runs it, and with Gemini."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
EXPECTATIONS = Path(__file__).resolve().parent / "expectations"
GEMINI_RECORDINGS = REPO / "tests" / "fixtures" / "gemini"

# The Vertex AI stand-in the unit tests replay recorded conversations with.
sys.path.append(str(REPO / "tests" / "unit" / "analysis"))


def load_expectations() -> dict[str, dict[str, Any]]:
    """Every expectation file, by fixture name."""
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(EXPECTATIONS.glob("*.yaml"))}


def _session_files(source: str) -> list[Path]:
    from mldiag.analysis import find_session

    return list(find_session(REPO / source).files)


@functools.cache
def _offline(source: str):
    from mldiag.analysis import analyze_profile
    from mldiag.bootstrap import build_investigator
    from mldiag.config import Settings

    return analyze_profile(_session_files(source), source=source, investigate=build_investigator(Settings(), "offline"))


@functools.cache
def offline_analysis(source: str, baseline: str | None = None) -> dict[str, Any]:
    """``analysis.json`` as ``mldiag analyze --format json`` writes it: the offline reasoner's investigation.

    With ``baseline`` (another fixture's source), "What changed" against it, as the analysis
    worker adds it for an automatic capture that follows a degradation.
    """
    analysis = _offline(source)
    if baseline:
        from mldiag.analysis.comparison import compare

        analysis = analysis.model_copy(deep=True)
        analysis.comparison = compare(analysis, _offline(baseline), Path(baseline).parent.name)
    return analysis.to_json_dict()


@functools.cache
def gemini_analysis(source: str, recording: str) -> dict[str, Any]:
    """``analysis.json`` with Gemini as the reasoner, replaying a recorded conversation; only Vertex AI is faked."""
    from fake_gemini import FakeGemini, script
    from google.oauth2.credentials import Credentials

    from mldiag.adapters.reasoning.vertex import VertexReasoner
    from mldiag.analysis import analyze_profile
    from mldiag.analysis.reasoning.investigation import Investigator
    from mldiag.analysis.reasoning.offline import OfflineReasoner

    with FakeGemini(script(recording)) as fake:
        reasoner = VertexReasoner(project="quality-harness", location="us-central1", model="gemini-2.5-flash",
                                  endpoint=fake.url, credentials=Credentials(token="quality-harness"),
                                  retry_initial_delay_s=0.01)
        analysis = analyze_profile(_session_files(source), source=source,
                                   investigate=Investigator(reasoner, OfflineReasoner()))
    return analysis.to_json_dict()
