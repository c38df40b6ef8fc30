"""The quality harness's checks: what an expectation file may ask of an analysis, and the invariants.

Every check takes ``analysis.json`` as a dict (the report the product writes)
and returns ``None`` when it holds or a one-line reason when it does not.

An expectation file (``expectations/<fixture>.yaml``) names the profile, its
``truth`` (numbers with a tolerance and how they were measured) and a list of
``expectations``, each with an ``id`` and exactly one check:

* ``status: [..]``: the health status is one of these;
* ``p0_p1_categories: [..]``: there is a P0 or P1 finding, and every P0/P1 finding's category is one of these;
* ``never_p0_p1: [..]``: no P0/P1 finding has one of these categories;
* ``top_mentions: [..]``: the top finding's title, description or evidence names one of these (case-insensitive);
* ``finding: {category, priorities, mentions}``: some finding matches all that is given;
* ``never_says: [..]``: neither the summary nor any finding contains one of these (case-insensitive);
* ``value: <path>`` with ``truth: <key>`` (within the truth's ``rel``/``abs`` tolerance) or with
  ``at_least``/``at_most`` (a number, or a truth key); ``<path>`` is dotted, list items by index
  (``hosts.0.devices``);
* ``text: <path>`` with ``mentions: [..]``: the string (or list of strings) at the path contains one of these
  (a path step ``parts[useful=false]`` keeps the list items whose field reads so: see ``at_path``).

``baseline: <fixture>`` adds "What changed" against that fixture's analysis
(``comparison``), as the analysis worker does for an automatic capture.

``known_wrong: "<what the analyser gets wrong today>"`` turns an expectation into
a strict expected failure: CI stays green while it fails, and goes red the day
it passes, so that the mark is removed. ``invariants_known_wrong`` does the same
for an invariant, by name.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

Check = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], str | None]  # (analysis, spec, truth)

FRACTION_KEY = re.compile(r"(_fraction|^share_of_.*|^roofline_efficiency)$")
PRIORITY_ORDER = ("P0", "P1", "P2", "P3")
# Sections of analysis.json that hold the product's own figures; XProf's raw tool output is not ours to check.
OWN_SECTIONS = ("metrics", "health", "hosts", "findings", "comparison")


# --- reading analysis.json ------------------------------------------------------------------


def at_path(document: Any, path: str) -> Any:
    """The value at a dotted path; ``key[field=value]`` keeps the items of the list under ``key`` whose
    ``field`` reads ``value`` (``parts[useful=false].0``: the largest part that is not the model's work)."""
    value = document
    for part in path.split("."):
        if part.endswith("]") and "[" in part:
            key, condition = part[:-1].split("[", 1)
            field, wanted = condition.split("=", 1)
            items = value.get(key) if isinstance(value, dict) else None
            value = [item for item in items or [] if isinstance(item, dict) and _reads(item.get(field)) == wanted]
            continue
        if isinstance(value, list):
            value = value[int(part)] if part.isdigit() and int(part) < len(value) else None
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def _reads(value: Any) -> str:
    """A JSON value as a path condition spells it: ``true``, ``false``, or the text."""
    return json.dumps(value) if isinstance(value, bool) or value is None else str(value)


def findings_by_priority(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings, most urgent first (stable within a priority)."""
    return sorted(analysis.get("findings", []), key=lambda f: PRIORITY_ORDER.index(f["priority"]))


def urgent(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in analysis.get("findings", []) if f["priority"] in ("P0", "P1")]


def finding_text(finding: dict[str, Any]) -> str:
    return "\n".join([finding["title"], finding.get("what", ""), *finding.get("evidence", [])])


def everything_said(analysis: dict[str, Any]) -> str:
    parts = [analysis.get("summary", "")]
    for finding in analysis.get("findings", []):
        parts += [finding_text(finding), finding.get("impact", ""), finding.get("fix", "")]
    return "\n".join(parts)


def _mentions_any(text: str, needles: list[str]) -> bool:
    return any(needle.lower() in text.lower() for needle in needles)


def _describe(finding: dict[str, Any] | None) -> str:
    return f'{finding["priority"]} {finding["category"]} "{finding["title"]}"' if finding else "no finding"


# --- expectation checks ---------------------------------------------------------------------


def check_status(analysis: dict[str, Any], spec: dict[str, Any], truth: dict[str, Any]) -> str | None:
    if analysis["status"] not in spec["status"]:
        return f"status {analysis['status']}, expected one of {spec['status']}"
    return None


def check_p0_p1_categories(analysis: dict[str, Any], spec: dict[str, Any], truth: dict[str, Any]) -> str | None:
    found = urgent(analysis)
    if not found:
        return f"no P0/P1 finding; expected one of category {spec['p0_p1_categories']}"
    wrong = [f for f in found if f["category"] not in spec["p0_p1_categories"]]
    if wrong:
        return f"{_describe(wrong[0])} is not one of {spec['p0_p1_categories']}"
    return None


def check_never_p0_p1(analysis: dict[str, Any], spec: dict[str, Any], truth: dict[str, Any]) -> str | None:
    wrong = [f for f in urgent(analysis) if f["category"] in spec["never_p0_p1"]]
    return f"{_describe(wrong[0])} should not be said" if wrong else None


def check_top_mentions(analysis: dict[str, Any], spec: dict[str, Any], truth: dict[str, Any]) -> str | None:
    ordered = findings_by_priority(analysis)
    top = ordered[0] if ordered else None
    if top is None or not _mentions_any(finding_text(top), spec["top_mentions"]):
        return f"the top finding ({_describe(top)}) names none of {spec['top_mentions']}"
    return None


def check_finding(analysis: dict[str, Any], spec: dict[str, Any], truth: dict[str, Any]) -> str | None:
    wanted = spec["finding"]
    for finding in analysis.get("findings", []):
        if "category" in wanted and finding["category"] != wanted["category"]:
            continue
        if "priorities" in wanted and finding["priority"] not in wanted["priorities"]:
            continue
        if "mentions" in wanted and not _mentions_any(finding_text(finding), wanted["mentions"]):
            continue
        return None
    findings = "; ".join(map(_describe, analysis.get("findings", []))) or "none"
    return f"no finding matches {wanted} (findings: {findings})"


def check_never_says(analysis: dict[str, Any], spec: dict[str, Any], truth: dict[str, Any]) -> str | None:
    said = everything_said(analysis).lower()
    wrong = [text for text in spec["never_says"] if text.lower() in said]
    return f"the report says {wrong[0]!r}" if wrong else None


def _bound(value: Any, truth: dict[str, Any]) -> float:
    return truth[value]["value"] if isinstance(value, str) else value


def check_value(analysis: dict[str, Any], spec: dict[str, Any], truth: dict[str, Any]) -> str | None:
    actual = at_path(analysis, spec["value"])
    if not isinstance(actual, int | float) or isinstance(actual, bool):
        return f"{spec['value']} is {actual!r}, not a number"
    if "truth" in spec:
        expected = truth[spec["truth"]]
        allowed = max(expected.get("abs", 0.0), expected.get("rel", 0.0) * abs(expected["value"]))
        if abs(actual - expected["value"]) > allowed + 1e-12:
            return (f"{spec['value']} = {actual:.6g}, truth {spec['truth']} = {expected['value']:.6g} "
                    f"(within {allowed:.3g})")
    if "at_least" in spec and actual < _bound(spec["at_least"], truth):
        return f"{spec['value']} = {actual:.6g} < {_bound(spec['at_least'], truth):.6g}"
    if "at_most" in spec and actual > _bound(spec["at_most"], truth):
        return f"{spec['value']} = {actual:.6g} > {_bound(spec['at_most'], truth):.6g}"
    return None


def check_text(analysis: dict[str, Any], spec: dict[str, Any], truth: dict[str, Any]) -> str | None:
    actual = at_path(analysis, spec["text"])
    if isinstance(actual, list) and all(isinstance(line, str) for line in actual):
        actual = "\n".join(actual)
    if not isinstance(actual, str) or not _mentions_any(actual, spec["mentions"]):
        return f"{spec['text']} is {actual!r}, which names none of {spec['mentions']}"
    return None


CHECKS: dict[str, Check] = {
    "status": check_status,
    "p0_p1_categories": check_p0_p1_categories,
    "never_p0_p1": check_never_p0_p1,
    "top_mentions": check_top_mentions,
    "finding": check_finding,
    "never_says": check_never_says,
    "value": check_value,
    "text": check_text,
}


def check_kind(spec: dict[str, Any]) -> str:
    """The one check an expectation asks for; ``ValueError`` when it asks for none or several."""
    kinds = [key for key in CHECKS if key in spec]
    if len(kinds) != 1:
        raise ValueError(f"expectation {spec.get('id')!r} must have exactly one of {sorted(CHECKS)}, has {kinds}")
    return kinds[0]


def run_check(analysis: dict[str, Any], spec: dict[str, Any], truth: dict[str, Any]) -> str | None:
    return CHECKS[check_kind(spec)](analysis, spec, truth)


# --- invariants, asserted on every analysis ---------------------------------------------------


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}.{index}")
    else:
        yield path, value


def _fraction_values(value: Any) -> list[float]:
    """The numbers a fraction field holds: itself, a series of them, or a comparison's before and after."""
    if isinstance(value, dict):
        value = [value.get("before"), value.get("after")]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int | float) and not isinstance(v, bool)]
    return [value] if isinstance(value, int | float) and not isinstance(value, bool) else []


def fractions_in_unit_range(analysis: dict[str, Any]) -> str | None:
    """Every fraction or share the analysis states (``*_fraction``, ``share_of_*``, roofline efficiency) is in [0, 1]."""
    def visit(value: Any, path: str) -> Iterator[str]:
        if isinstance(value, dict):
            for key, item in value.items():
                here = f"{path}.{key}"
                if FRACTION_KEY.search(key):
                    for number in _fraction_values(item):
                        if not 0.0 <= number <= 1.0:
                            yield f"{here} = {number:.4g}"
                yield from visit(item, here)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from visit(item, f"{path}.{index}")

    bad = [issue for section in OWN_SECTIONS for issue in visit(analysis.get(section), section)]
    return f"outside [0, 1]: {', '.join(bad[:5])}" if bad else None


def busy_plus_idle_is_one(analysis: dict[str, Any]) -> str | None:
    """Busy and idle add up to the whole: in ``health``, per host (idle ms over the mean step) and
    wherever an object states both a busy and an idle fraction."""
    problems = []

    def visit(value: Any, path: str) -> None:
        if isinstance(value, dict):
            busy = value.get("busy_fraction", value.get("compute_fraction"))
            idle = value.get("idle_fraction")
            if isinstance(busy, int | float) and isinstance(idle, int | float) and abs(busy + idle - 1) > 0.01:
                problems.append(f"{path}: busy {busy:.3f} + idle {idle:.3f} = {busy + idle:.3f}")
            for key, item in value.items():
                visit(item, f"{path}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                visit(item, f"{path}.{index}")

    visit(analysis.get("health"), "health")
    visit(analysis.get("hosts"), "hosts")
    for index, host in enumerate(analysis.get("hosts", [])):
        busy, idle_ms, step = host.get("busy_fraction"), host.get("idle_ms_per_step"), host.get("step_ms") or {}
        if isinstance(busy, int | float) and isinstance(idle_ms, int | float) and step.get("mean"):
            total = busy + idle_ms / step["mean"]
            if abs(total - 1) > 0.05:  # the busy fraction is a mean of ratios, the idle time a mean of times
                problems.append(f"hosts.{index}: busy {busy:.3f} + idle {idle_ms:.3f} ms of a "
                                f"{step['mean']:.3f} ms step = {total:.3f}")
    return "; ".join(problems) if problems else None


PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?%")


def titles_within_a_step(analysis: dict[str, Any]) -> str | None:
    """No finding's title claims more than 100 % of anything (a step, the device time)."""
    for finding in analysis.get("findings", []):
        for match in PERCENT.finditer(finding["title"]):
            if float(match.group(1)) > 100:
                return f'"{finding["title"]}" claims {match.group(0)}'
    return None


def optimal_matches_status(analysis: dict[str, Any]) -> str | None:
    """``health.optimal`` is true exactly when the status is OPTIMAL."""
    optimal, status = analysis["health"].get("optimal"), analysis["status"]
    if bool(optimal) != (status == "OPTIMAL"):
        return f"health.optimal is {optimal} while the status is {status}"
    return None


# A number the report quotes: a measurement with its unit (time, size, percent), or a decimal
# figure such as "busy fraction 0.419". Plain integers are counts (steps, events, "9 of 20")
# and ratios ("21x") are derived, so neither is looked up. Names in quotes or backticks are
# profile strings, not figures, and are skipped with everything glued to a word ("gfx942",
# "GPU:4", "f32[5,1024]").
QUOTED_NAME = re.compile(r'"[^"]*"|`[^`]*`|\'[^\']*\'')
QUOTED_NUMBER = re.compile(
    r"(?<![\w.:/\[,#-])(?<!\w\()(?P<number>\d+(?:,\d{3})*(?:\.(?P<decimals>\d+))?)"
    r"(?:\s?(?P<unit>%|ms|µs|us|ns|s|GiB|MiB|KiB|TiB|GB|MB|KB|TB|B|bytes)(?![\w])|(?P<ratio>x)(?![\w]))?"
    r"(?![\w.\]:])"
)
UNIT_SCALES = {  # what a stored number may be multiplied by to read in the quoted unit
    "%": (100.0, 1.0),
    "ms": (1.0, 1e3, 1e-3, 1e-6),
    "µs": (1.0, 1e3, 1e6, 1e-3),
    "us": (1.0, 1e3, 1e6, 1e-3),
    "ns": (1.0, 1e6, 1e9),
    "s": (1.0, 1e-3, 1e-9),
    "B": (1.0,), "bytes": (1.0,),
    "KiB": (2.0**-10,), "MiB": (2.0**-20,), "GiB": (2.0**-30,), "TiB": (2.0**-40,),
    "KB": (1e-3,), "MB": (1e-6,), "GB": (1e-9,), "TB": (1e-12,),
    None: (1.0,),
}

BYTE_UNITS = {"KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"}


def quoted_numbers(text: str, keep_names: bool = False) -> Iterator[tuple[str, float, int, str | None]]:
    """``(as written, value, decimals, unit)`` for each number ``text`` quotes (see QUOTED_NUMBER)."""
    bare = text if keep_names else QUOTED_NAME.sub(" ", text)
    for match in QUOTED_NUMBER.finditer(bare):
        unit, decimals = match.group("unit"), match.group("decimals")
        if match.group("ratio") or (unit is None and decimals is None):
            continue
        yield match.group(0), float(match.group("number").replace(",", "")), len(decimals or ""), unit


# A size field named for its unit (XProf's "size_mib", "peak_memory_usage_gib"): its value in bytes.
SIZE_FIELD = re.compile(r"_(?P<unit>kib|mib|gib)$")
SIZE_FIELD_BYTES = {"kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30}


def stored_numbers(analysis: dict[str, Any]) -> list[float]:
    """The numbers analysis.json holds outside the findings: every numeric field (a size field named for its
    unit in bytes too), and the figures in the text the follow-up tools answered and the HLO detectors wrote
    (which findings quote)."""
    numbers = []
    for path, value in _leaves({key: value for key, value in analysis.items() if key not in ("findings", "summary")}):
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            numbers.append(float(value))
            if sized := SIZE_FIELD.search(path):
                numbers.append(float(value) * SIZE_FIELD_BYTES[sized.group("unit")])
        elif isinstance(value, str) and path.startswith(("followups.", "hlo_issues.")):
            # A size written in a text ("768 KiB") is stored in bytes, as a size field is.
            numbers += [number / UNIT_SCALES[unit][0] if unit in BYTE_UNITS else number
                        for _, number, _, unit in quoted_numbers(value, keep_names=True)]
    return numbers


def is_stored(value: float, decimals: int, unit: str | None, numbers: list[float]) -> bool:
    """Whether some stored number, in the quoted unit and rounded as quoted, reads ``value``."""
    slack = 0.5 * 10.0**-decimals * 1.001 + 1e-9
    for scale in UNIT_SCALES[unit]:
        for number in numbers:
            if abs(number * scale - value) <= slack:
                return True
    return False


def quoted_numbers_exist(analysis: dict[str, Any]) -> str | None:
    """Every number quoted in a finding's evidence is in analysis.json (in its unit, up to the rounding shown)."""
    numbers = stored_numbers(analysis)
    missing = []
    for finding in analysis.get("findings", []):
        for line in finding.get("evidence", []):
            for written, value, decimals, unit in quoted_numbers(line):
                if not is_stored(value, decimals, unit, numbers):
                    missing.append(f'"{written}" in "{line[:90]}"')
    return f"not in analysis.json: {'; '.join(missing[:4])}" if missing else None


# A ratio a title states: "24995375x", "1,200×", "3.5 x"; not a shape ("4x4") or a quoted name.
RATIO = re.compile(r"(?<![\w.])(\d+(?:,\d{3})*(?:\.\d+)?)\s?[x×](?![\w])")
MAX_TITLE_RATIO = 1000


def no_huge_ratio_in_titles(analysis: dict[str, Any]) -> str | None:
    """No finding's title states a ratio above 1000x: one that large divides by a near-zero denominator."""
    for finding in analysis.get("findings", []):
        for match in RATIO.finditer(QUOTED_NAME.sub(" ", finding["title"])):
            if float(match.group(1).replace(",", "")) > MAX_TITLE_RATIO:
                return f'"{finding["title"]}" states {match.group(0)}'
    return None


# The causes during which a device computes (collectives included, as in the busy fraction); every other
# part of an attribution is time the devices spend on no compute: transfers, or idle while the host works.
COMPUTING_CAUSES = ("device_compute", "collectives")
FRACTION_TOLERANCE = 0.02


def _computing_share(attribution: dict[str, Any]) -> float:
    return sum(part["share"] for part in attribution["parts"] if part["cause"] in COMPUTING_CAUSES)


def _other_share(attribution: dict[str, Any]) -> float:
    return sum(part["share"] for part in attribution["parts"] if part["cause"] not in COMPUTING_CAUSES)


def time_weighted_fractions(analysis: dict[str, Any]) -> str | None:
    """The busy and idle fractions of ``metrics`` and ``health`` are the attribution's shares of the loop's time.

    They are means over the hosts that state a busy fraction, so they are compared with the mean of those
    hosts' attributions, within 0.02; an analysis where such a host has no attribution has nothing to compare.
    """
    counted = [host for host in analysis.get("hosts", []) if host.get("busy_fraction") is not None]
    attributions = [host.get("attribution") for host in counted]
    if not attributions or None in attributions:
        return None
    computing = sum(map(_computing_share, attributions)) / len(attributions)
    other = sum(map(_other_share, attributions)) / len(attributions)
    stated = {"metrics.busy_fraction": (analysis["metrics"].get("busy_fraction"), computing),
              "health.compute_fraction": (analysis["health"].get("compute_fraction"), computing),
              "health.idle_fraction": (analysis["health"].get("idle_fraction"), other)}
    wrong = [f"{path} is {'none' if value is None else f'{value:.3f}'}, the attribution's share {share:.3f}"
             for path, (value, share) in stated.items()
             if value is None or abs(value - share) > FRACTION_TOLERANCE]
    return "; ".join(wrong) if wrong else None


def attribution_sums_to_loop(analysis: dict[str, Any]) -> str | None:
    """On every host with an attribution of the loop's wall time, its parts sum to the loop (within 2 %)."""
    problems = []
    for index, host in enumerate(analysis.get("hosts", [])):
        attribution = host.get("attribution")
        if not attribution:
            continue
        total, loop = sum(part["ms"] for part in attribution["parts"]), attribution["loop_ms"]
        if abs(total - loop) > 0.02 * loop:
            problems.append(f"hosts.{index}: parts sum to {total:.4g} ms of a {loop:.4g} ms loop")
    return "; ".join(problems) if problems else None


INVARIANTS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "fractions_in_unit_range": fractions_in_unit_range,
    "busy_plus_idle_is_one": busy_plus_idle_is_one,
    "titles_within_a_step": titles_within_a_step,
    "optimal_matches_status": optimal_matches_status,
    "quoted_numbers_exist": quoted_numbers_exist,
    "no_huge_ratio_in_titles": no_huge_ratio_in_titles,
    "time_weighted_fractions": time_weighted_fractions,
    "attribution_sums_to_loop": attribution_sums_to_loop,
}
