"""Write ``docs/accuracy.md``: what the analyst gets right on every profile of the quality suite, and what not.

Each fixture of ``tests/quality/expectations`` is analysed as the quality suite
analyses it (``mldiag analyze``'s offline reasoner, through the suite's own
support code), every expectation and invariant is checked with the suite's own
checks, and the table says per fixture: the hardware, the workload, the truth
figures checked against the analyser's, the verdict (pass, or known wrong and
why) and what is checked. The page carries a digest of what it shows from the
expectation files; ``tests/quality/test_accuracy_table.py`` fails when they
change and the page was not written again.

    PYTHONPATH=shared python scripts/accuracy_table.py            # writes docs/accuracy.md
    PYTHONPATH=shared python scripts/accuracy_table.py --out -    # prints it

The exit status is 1 when an expectation fails or a known-wrong one passes (the
quality suite fails on both); the page says so in the verdict.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "quality"))

from quality_checks import INVARIANTS, at_path, check_kind, run_check  # noqa: E402
from quality_support import GEMINI_RECORDINGS, baseline_source, load_expectations, offline_analysis  # noqa: E402

DOC = REPO / "docs" / "accuracy.md"
DIGEST_MARK = "<!-- expectations digest: "
PASS, KNOWN_WRONG, FAIL, FIXED = "pass", "known wrong", "FAIL", "passes though marked known wrong"


# --- what the page shows from the expectation files -------------------------------------------------------


def shown(documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Everything of the expectation files the page shows (how a truth was measured is not), and the invariants."""
    return {
        "invariants": list(INVARIANTS),
        "fixtures": {
            fixture: {
                "source": document["source"],
                "description": document.get("description", ""),
                "baseline": document.get("baseline"),
                "expectations": document.get("expectations") or [],
                "invariants_known_wrong": document.get("invariants_known_wrong") or {},
                "truth": {key: {k: v for k, v in number.items() if k != "how"}
                          for key, number in (document.get("truth") or {}).items()},
            }
            for fixture, document in sorted(documents.items())
        },
    }


def expectations_digest(documents: dict[str, dict[str, Any]]) -> str:
    canonical = json.dumps(shown(documents), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def written_digest(page: str) -> str | None:
    """The digest a written page carries; None for a page without one."""
    if DIGEST_MARK not in page:
        return None
    return page.split(DIGEST_MARK, 1)[1].split(" ", 1)[0]


# --- checking -----------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    check: str
    outcome: str
    reason: str = ""  # why it is known wrong, or what failed


@dataclass
class FixtureResult:
    fixture: str
    document: dict[str, Any]
    analysis: dict[str, Any]
    expectations: list[Verdict] = field(default_factory=list)
    invariants: list[Verdict] = field(default_factory=list)


def _verdict(check: str, problem: str | None, known_wrong: str | None) -> Verdict:
    if known_wrong:
        return Verdict(check, KNOWN_WRONG, known_wrong) if problem else Verdict(check, FIXED, known_wrong)
    return Verdict(check, FAIL, problem) if problem else Verdict(check, PASS)


def check_fixture(fixture: str, documents: dict[str, dict[str, Any]]) -> FixtureResult:
    """``fixture``'s analysis, checked as the quality suite checks it (``documents``: every expectation file)."""
    document = documents[fixture]
    analysis = offline_analysis(document["source"], baseline_source(fixture, documents))
    truth = document.get("truth") or {}
    result = FixtureResult(fixture, document, analysis)
    for spec in document.get("expectations") or []:
        result.expectations.append(_verdict(spec["id"], run_check(analysis, spec, truth), spec.get("known_wrong")))
    known_wrong = document.get("invariants_known_wrong") or {}
    plain = offline_analysis(document["source"])
    for name, invariant in INVARIANTS.items():
        result.invariants.append(_verdict(name, invariant(plain), known_wrong.get(name)))
    return result


# --- rendering ----------------------------------------------------------------------------------------------


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _tolerance(number: dict[str, Any]) -> str:
    if number.get("rel"):
        return f" ±{number['rel']:.0%}"
    return f" ±{_number(number['abs'])}" if number.get("abs") else " exactly"


def hardware(analysis: dict[str, Any]) -> str:
    hosts = analysis.get("hosts") or []
    kinds = sorted({f"{host['devices']} × {host['device_type']}" for host in hosts})
    return f"{len(hosts)} host{'' if len(hosts) == 1 else 's'}: {', '.join(kinds)}" if hosts else "no host read"


def abstentions(analysis: dict[str, Any]) -> list[str]:
    """What the analysis declines to state for this profile, rather than guess."""
    metrics, hosts = analysis["metrics"], analysis.get("hosts") or []
    said = []
    if any(host["step_source"] == "profile_window" for host in hosts):
        said.append("no training steps (programs by calls instead)")
    elif metrics.get("step_time_ms") is None:
        said.append("no step time")
    if metrics.get("busy_fraction") is None:
        said.append("no busy fraction")
    if metrics.get("peak_memory_bytes") is None:
        said.append("no peak memory")
    elif metrics.get("memory_capacity_bytes") is None:
        said.append("memory capacity unknown")
    if metrics.get("roofline_efficiency") is None:
        said.append("no roofline")
    return said


def _describe_check(spec: dict[str, Any]) -> str:
    kind = check_kind(spec)
    if kind == "value":
        bounds = [f"= truth `{spec['truth']}`"] if "truth" in spec else []
        bounds += [f"≥ {_bound_text(spec['at_least'])}"] if "at_least" in spec else []
        bounds += [f"≤ {_bound_text(spec['at_most'])}"] if "at_most" in spec else []
        return f"`{spec['value']}` {' '.join(bounds)}"
    if kind == "text":
        return f"`{spec['text']}` names {_listed(spec['mentions'])}"
    if kind == "finding":
        wanted = spec["finding"]
        parts = [wanted.get("category", "any category"), "/".join(wanted.get("priorities", []))]
        mentions = f" naming {_listed(wanted['mentions'])}" if "mentions" in wanted else ""
        return f"a finding ({' '.join(p for p in parts if p)}){mentions}"
    words = {"status": "status is", "p0_p1_categories": "P0/P1 findings are", "never_p0_p1": "no P0/P1 finding is",
             "top_mentions": "the top finding names", "never_says": "never says"}
    return f"{words[kind]} {_listed(spec[kind])}"


def _bound_text(bound: Any) -> str:
    return f"truth `{bound}`" if isinstance(bound, str) else _number(bound)


def _listed(items: list[Any]) -> str:
    return " or ".join(f"`{item}`" for item in items)


def _truth_checked(result: FixtureResult) -> list[str]:
    """Each truth an expectation compares a figure with: its value and tolerance, and the analyser's figure."""
    truth = result.document.get("truth") or {}
    lines = []
    for spec in result.document.get("expectations") or []:
        if "value" not in spec:
            continue
        actual = _number(at_path(result.analysis, spec["value"]))
        for check, kind in (("truth", ""), ("at_least", ", a lower bound"), ("at_most", ", an upper bound")):
            key = spec.get(check)
            if isinstance(key, str):
                tolerance = _tolerance(truth[key]) if check == "truth" else kind
                lines.append(f"`{key}` {_number(truth[key]['value'])}{tolerance}: analyser {actual}")
    return list(dict.fromkeys(lines))  # two checks of one truth against one figure read as one


def _verdict_text(result: FixtureResult) -> str:
    verdicts = result.expectations + result.invariants
    lines = [f"{sum(v.outcome == PASS for v in result.expectations)} of {len(result.expectations)} expectations "
             f"and {sum(v.outcome == PASS for v in result.invariants)} of {len(result.invariants)} invariants pass"]
    lines += [f"{v.outcome}: `{v.check}`: {v.reason}" for v in verdicts if v.outcome != PASS]
    return "<br>".join(_cell(line) for line in lines)


def row(result: FixtureResult) -> str:
    document = result.document
    checks = [f"`{spec['id']}`: {_describe_check(spec)}" for spec in document.get("expectations") or []]
    if "baseline" in document:
        checks.append(f"what changed against `{document['baseline']}`")
    cells = [f"`{result.fixture}`", hardware(result.analysis), document.get("description", ""),
             "<br>".join(_truth_checked(result)) or "none (diagnosis only)", _verdict_text(result),
             "<br>".join(checks), "; ".join(abstentions(result.analysis)) or "nothing"]
    return "| " + " | ".join(cell if "<br>" in cell else _cell(cell) for cell in cells) + " |"


PREFACE = """\
# Accuracy of the analyst

What `mldiag analyze` gets right on every profile of the quality suite
([tests/quality](../tests/quality/README.md)), and what it gets wrong today.
Each profile is analysed as `mldiag analyze` does it with the offline reasoner,
and its diagnosis and figures are compared with truths measured outside the
analyser:

* **Generated CPU loops** (`scripts/make_profile_fixtures.py`) time themselves
  in the same run as the profile: `time.perf_counter` around each part with
  `block_until_ready`, ablations under the same profiler options (the loop
  without its host work, the collectives replaced by local math), compilations
  counted by a `jax.monitoring` listener, the step program's
  `memory_analysis()`.
* **GPU and TPU captures** were measured by hand from their traces with
  `scripts/measure_device_trace.py` (JAX's own trace reader, not the analyser),
  and `tests/quality/test_truth.py` measures every such number again.
* **Older CPU fixtures**: the figures their generator recorded in `facts.json`.

A *known wrong* verdict is an expectation the analyser fails today: the suite
holds it as a strict expected failure, so it turns red the day it passes and the
mark is removed. The analyst abstains rather than guess: without step markers
and with several programs it reports no training steps (the programs by their
calls instead) and no step time; without a device memory capacity (CPU) it
states no memory pressure; without XProf's roofline model for the hardware it
gives no roofline efficiency; "Abstains on" says which applies to each profile.
Where a recorded Gemini conversation exists ({gemini}), the Gemini reasoner's
findings are held to the same invariants, and a finding whose names or numbers
the collected data does not hold is dropped.
"""


def render(results: list[FixtureResult], digest: str) -> str:
    expectations = [v for r in results for v in r.expectations]
    invariants = [v for r in results for v in r.invariants]
    counts = {outcome: sum(v.outcome == outcome for v in expectations + invariants)
              for outcome in (KNOWN_WRONG, FAIL, FIXED)}
    summary = (f"**{len(results)} fixtures, {len(expectations)} expectations, "
               f"{sum(v.outcome == KNOWN_WRONG for v in expectations)} known wrong**; "
               f"{len(INVARIANTS)} invariants on every fixture "
               f"({', '.join(f'`{name}`' for name in INVARIANTS)}), "
               f"{sum(v.outcome == KNOWN_WRONG for v in invariants)} known wrong.")
    if counts[FAIL] or counts[FIXED]:
        summary += f" **{counts[FAIL]} failing and {counts[FIXED]} passing though marked known wrong.**"
    gemini = ", ".join(f"`{path.stem}`" for path in sorted(GEMINI_RECORDINGS.glob("*.json"))) or "none"
    header = ("| Profile | Hardware | Workload | Truth checked: truth, the analyser's figure | Verdict "
              "| What is checked | Abstains on |\n|---|---|---|---|---|---|---|")
    return "\n".join([
        f"{DIGEST_MARK}{digest} (written by scripts/accuracy_table.py from tests/quality/expectations) -->",
        PREFACE.format(gemini=gemini), summary, "", header, *map(row, results), ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DOC), help="where to write the page; - for standard output")
    args = parser.parse_args(argv)
    documents = load_expectations()
    results = [check_fixture(fixture, documents) for fixture in documents]
    page = render(results, expectations_digest(documents))
    if args.out == "-":
        sys.stdout.write(page)
    else:
        Path(args.out).write_text(page, encoding="utf-8")
    broken = [f"{r.fixture}::{v.check} ({v.outcome})" for r in results for v in r.expectations + r.invariants
              if v.outcome in (FAIL, FIXED)]
    for line in broken:
        print(f"not as the expectation files say: {line}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
