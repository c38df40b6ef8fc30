"""What a reasoning model may claim: only what the collected data shows.

A finding from Gemini is kept only if its evidence holds up against everything
the analysis collected (the 15 tools, the raw-event signals, the attribution of
the loop's time, the HLO detectors, the follow-ups):

* every name it quotes (``"..."`` or `````...`````), and every HLO-style name
  it writes bare (``fusion.12``, ``copy-start.3``), occurs in the profile's
  data;
* every number in its evidence lines is a collected value as written at the
  precision quoted, directly or in another unit (fraction as percent; ps, ns,
  us, ms and s; bytes as KiB, MiB, GiB); small counts (up to 10) are free;
* at least one evidence line cites something checkable (a name or a number);
* profile text (a long name with spaces, such as an instruction hidden in an
  annotation) appears only in evidence, never in the title, explanation,
  impact or fix, where it would read as the report's own words.

The summary follows the same number rule and may not repeat profile names at
all: names belong in the evidence, quoted, as the offline analyst writes them.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from mldiag.analysis.evidence import Analysis, Followup
from mldiag.domain.resources import Finding

FREE_COUNT = 10
MAX_SUMMARY_CHARS = 1200  # 3 to 5 sentences
MIN_SUMMARY_NAME = 8  # shorter profile names ("copy", "dot") are ordinary words in a summary
PROSE_NAME = 20  # a profile name this long with a space in it reads as a sentence
_QUOTED = re.compile(r'"([^"\n]{1,400})"|`([^`\n]{1,400})`')
_HLO_NAME = re.compile(r"(?<![\w%.\-])%?[A-Za-z_][\w\-]*(?:\.\d+)+(?![\w.])")
# A number standing on its own or before a unit ("48.3 ms", "87%", "48ms"); not the digits of a name (f32, P0).
_NUMBER = re.compile(r"(?<![\w.%\-])-?\d+(?:\.(\d+))?(?:[eE][-+]?\d+)?(?!\.?\d)")
_SCALES = (1.0, 100.0, 1e-3, 1e3, 1e-6, 1e6, 1e-9, 1e-12, 1 / 1024, 1 / 1024**2, 1 / 1024**3)
TIMINGS = "seconds"  # how long the analysis's own steps took: nothing about the profile, and never the same twice


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            yield float(value)
    elif isinstance(value, str):
        for match in _NUMBER.finditer(value):
            yield float(match.group(0))
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != TIMINGS:
                yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)


def profile_names(analysis: Analysis) -> set[str]:
    """Every string the profile itself supplied: op, module, event, thread, host and file names."""
    names: set[str] = set()
    for host in analysis.hosts:
        names.update((host.host, host.file, host.step_marker, *host.compute_lanes))
        for op in host.top_ops:
            names.update((op.name, op.expression))
        names.update(a.name for a in (*host.host_activities, *host.between_steps, *host.dispatched,
                                      *host.dispatch_origins, *host.programs))
        for activity in (*host.host_activities, *host.between_steps, *host.while_waiting, *host.transfers):
            names.update((activity.name, activity.thread, *(owner.name for owner in activity.owners)))
        for family in host.op_families.values():
            names.update(family.examples)
        if host.attribution is not None:
            names.update(name for part in host.attribution.parts for name in (part.name, part.thread))
    for issues in analysis.hlo_issues.values():
        for issue in issues:
            names.update((issue.module, issue.instruction, issue.runs_as, *issue.shapes))
    for program in analysis.hlo_programs:
        names.update((program.module, program.largest_temporary, *program.parameters, *program.parameters.values(),
                      *program.computing_fusions))
    for kernel in analysis.kernels:
        names.update((kernel.name, kernel.hlo_op, *kernel.custom_calls, *kernel.programs))
    names.update(program.program for program in analysis.roofline)
    for slow in (*analysis.slow_precision, *analysis.narrow_matmuls, *analysis.dense_updates,
                 *analysis.unfolded_inputs, *analysis.subsampled_results, *analysis.uncached_decoding,
                 *analysis.costly_product_orders, *analysis.per_example_weights,
                 *analysis.triangular_running_sums, *analysis.pairwise_by_broadcast,
                 *analysis.kronecker_products, *analysis.masked_results, *analysis.full_jacobians,
                 *analysis.zeroed_work):
        names.update(slow.kernels)
    for decomposition in analysis.decompositions:
        names.update((*decomposition.kernels, *decomposition.targets))
    names.update(analysis.profile.files)
    return names - {""}


class EvidenceIndex:
    """The names and numbers an analysis collected, for checking what a model cites."""

    def __init__(self, analysis: Analysis, followups: Iterable[Followup] = ()):
        followups = list(followups)
        self.names = profile_names(analysis)
        collected = analysis.to_json_dict()
        tool_data = [tool["data"] for tool in collected["tools"] if tool.get("data") is not None]
        texts = [*self.names, *_strings(tool_data), *(f.output for f in followups), *(f.showed for f in followups)]
        self._haystack = "\n".join(texts)
        values = set(_numbers(collected)) | set(_numbers([f.output for f in followups]))
        derived = {v * scale for v in values for scale in _SCALES}
        derived |= {1 - v for v in values if 0 <= v <= 1} | {(1 - v) * 100 for v in values if 0 <= v <= 1}
        self._values = sorted(derived)

    def has_name(self, name: str) -> bool:
        name = name.strip()
        return len(name) >= 2 and (name in self._haystack or name.removeprefix("%") in self._haystack)

    def has_number(self, text: str, decimals: int) -> bool:
        value = float(text)
        if decimals == 0 and value.is_integer() and abs(value) <= FREE_COUNT:
            return True
        tolerance = 0.5 * 10 ** -decimals + 1e-9 * abs(value)
        index = bisect.bisect_left(self._values, value - tolerance)
        return index < len(self._values) and self._values[index] <= value + tolerance

    def prose_names_in(self, text: str, minimum: int = PROSE_NAME) -> list[str]:
        """Profile names long and sentence-like enough that repeating them outside evidence is an echo."""
        lowered = text.lower()
        return [n for n in self.names if len(n) >= minimum and " " in n.strip() and n.lower() in lowered]


def _unquoted(text: str) -> str:
    return _QUOTED.sub(" ", text)


def _unknown_names(text: str, index: EvidenceIndex) -> list[str]:
    cited = [a or b for a, b in _QUOTED.findall(text)] + _HLO_NAME.findall(_unquoted(text))
    return [name for name in cited if not index.has_name(name)]


def _unknown_numbers(text: str, index: EvidenceIndex) -> list[str]:
    return [m.group(0) for m in _NUMBER.finditer(_unquoted(text))
            if not index.has_number(m.group(0), len(m.group(1) or ""))]


def _checkable(line: str) -> bool:
    return bool(_QUOTED.search(line) or _HLO_NAME.search(_unquoted(line)) or any(
        not (m.group(1) is None and abs(float(m.group(0))) <= FREE_COUNT) for m in _NUMBER.finditer(_unquoted(line))))


def why_unsupported(finding: Finding, index: EvidenceIndex) -> str:
    """Why the finding's evidence does not hold up; "" when it does."""
    if not finding.evidence:
        return "cites no evidence"
    prose = " ".join((finding.title, finding.what, finding.impact, finding.fix))
    for field_text in (prose, *finding.evidence):
        if unknown := _unknown_names(field_text, index):
            return f"names {json.dumps(unknown[0][:80])}, which is not in this profile"
    for line in finding.evidence:
        if unknown := _unknown_numbers(line, index):
            return f"cites {unknown[0]}, a value the collected data does not hold"
    if not any(_checkable(line) for line in finding.evidence):
        return "its evidence cites no name or value from the data"
    if echoed := index.prose_names_in(prose):
        return f"repeats profile text outside the evidence ({json.dumps(echoed[0][:80])})"
    return ""


def why_summary_unsupported(summary: str, index: EvidenceIndex) -> str:
    if len(summary) > MAX_SUMMARY_CHARS:
        return f"the summary is longer than {MAX_SUMMARY_CHARS} characters"
    if unknown := _unknown_numbers(summary, index):
        return f"the summary cites {unknown[0]}, a value the collected data does not hold"
    if named := [n for n in index.names if len(n) >= MIN_SUMMARY_NAME and n.lower() in summary.lower()]:
        return f"the summary repeats a profile name ({json.dumps(named[0][:80])}); names belong in the evidence"
    return ""
