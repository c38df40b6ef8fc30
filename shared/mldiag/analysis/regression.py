"""The regression gate: does a candidate session regress against a baseline, and how sure is that?

``mldiag compare`` and the console's side-by-side page read the same verdict.
Step time is judged on the two sessions' step-time distributions (every host's
per-step series, pooled), not on their means, so that noise and a few slow
steps do not fail a build: a one-sided Mann-Whitney U test says whether the
candidate's steps are slower at all, and a bootstrap 95 % interval of the ratio
of the medians says by how much. Step time regresses only when both agree: the
test is significant and the whole interval lies beyond the allowed regression.
Peak memory has one value per session and is judged on it; a P0 finding whose
category the baseline has no P0 of is a regression too. Pure: numpy only.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
from pydantic import Field

from mldiag.analysis.comparison import compare
from mldiag.analysis.evidence import Analysis, Comparison, Evidence
from mldiag.domain.resources import Finding, Priority

SIGNIFICANCE = 0.01  # the Mann-Whitney p-value below which the candidate's steps are called slower
CONFIDENCE = 0.95  # of the bootstrap interval of the median ratio
BOOTSTRAP_RESAMPLES = 2000
MIN_STEPS = 3  # per session, for a distribution to be judged at all
DEFAULT_MAX_STEP_TIME_REGRESSION = 0.05
DEFAULT_MAX_MEMORY_REGRESSION = 0.10


class StepTimeTest(Evidence):
    """The two step-time distributions compared: how many steps, the medians, and how sure the change is."""

    baseline_steps: int
    candidate_steps: int
    baseline_median_ms: float | None = None
    candidate_median_ms: float | None = None
    median_change: float | None = None  # candidate median / baseline median - 1
    ci_low: float | None = None  # the bootstrap interval of median_change
    ci_high: float | None = None
    p_value: float | None = None  # one-sided Mann-Whitney U: the candidate's steps are slower
    note: str = ""  # why there is no test, when there is none


class Thresholds(Evidence):
    max_step_time_regression: float = DEFAULT_MAX_STEP_TIME_REGRESSION
    max_memory_regression: float = DEFAULT_MAX_MEMORY_REGRESSION


class Verdict(Evidence):
    """``mldiag compare``'s answer: the comparison, the step-time test, and the regressions found."""

    baseline: str
    candidate: str
    baseline_status: str
    candidate_status: str
    thresholds: Thresholds
    step_time: StepTimeTest
    comparison: Comparison
    new_p0: list[str] = Field(default_factory=list)  # titles of the candidate's P0 findings of a new category
    regressions: list[str] = Field(default_factory=list)  # one sentence each; empty when the candidate passes

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)


def step_times(analysis: Analysis) -> list[float]:
    """Every host's per-step times, pooled (each host keeps up to its first thousand steps)."""
    return [step for host in analysis.hosts for step in host.series.step_ms]


def mann_whitney_greater(baseline: np.ndarray, candidate: np.ndarray) -> float:
    """One-sided p-value that the candidate's values tend to be larger: the normal approximation with ties
    corrected and a continuity correction (close to exact from about 8 values per side)."""
    n1, n2 = len(candidate), len(baseline)
    pooled = np.concatenate([candidate, baseline])
    order = pooled.argsort(kind="mergesort")
    ranks = np.empty(len(pooled))
    sorted_values = pooled[order]
    _, first, counts = np.unique(sorted_values, return_index=True, return_counts=True)
    for start, count in zip(first, counts, strict=True):
        ranks[order[start:start + count]] = start + (count + 1) / 2  # ties share their mean rank
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    n = n1 + n2
    tie_term = float(((counts ** 3) - counts).sum()) / (n * (n - 1))
    variance = n1 * n2 / 12 * ((n + 1) - tie_term)
    if variance <= 0:
        return 1.0 if u <= n1 * n2 / 2 else 0.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def median_ratio_interval(baseline: np.ndarray, candidate: np.ndarray) -> tuple[float, float]:
    """The bootstrap percentile interval (``CONFIDENCE``) of candidate median / baseline median - 1.

    Seeded from the data, so that the same two sessions always get the same interval.
    """
    rng = np.random.default_rng(zlib.crc32(np.concatenate([baseline, candidate]).tobytes()))
    base = np.median(rng.choice(baseline, (BOOTSTRAP_RESAMPLES, len(baseline))), axis=1)
    cand = np.median(rng.choice(candidate, (BOOTSTRAP_RESAMPLES, len(candidate))), axis=1)
    ratios = cand / base - 1
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def compare_step_times(baseline: list[float], candidate: list[float]) -> StepTimeTest:
    """Compare two step-time distributions (milliseconds); no test when either has fewer than ``MIN_STEPS``."""
    test = StepTimeTest(baseline_steps=len(baseline), candidate_steps=len(candidate))
    if len(baseline) < MIN_STEPS or len(candidate) < MIN_STEPS:
        test.note = f"too few steps to compare distributions (at least {MIN_STEPS} per session)"
        return test
    base, cand = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    if (base <= 0).any():
        test.note = "the baseline has steps of no duration"
        return test
    test.baseline_median_ms, test.candidate_median_ms = float(np.median(base)), float(np.median(cand))
    test.median_change = test.candidate_median_ms / test.baseline_median_ms - 1
    test.ci_low, test.ci_high = median_ratio_interval(base, cand)
    test.p_value = mann_whitney_greater(base, cand)
    return test


def _p0s(findings: list[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.priority is Priority.P0]


def judge(baseline: Analysis, candidate: Analysis, baseline_name: str, candidate_name: str,
          thresholds: Thresholds | None = None) -> Verdict:
    """The candidate against the baseline: the "What changed" comparison, the step-time test, the regressions."""
    thresholds = thresholds or Thresholds()
    step = compare_step_times(step_times(baseline), step_times(candidate))
    comparison = compare(candidate, baseline, baseline_name)
    regressions = []
    limit = thresholds.max_step_time_regression
    if step.p_value is not None and step.ci_low is not None and step.median_change is not None:
        if step.p_value < SIGNIFICANCE and step.ci_low > limit:
            regressions.append(
                f"Median step time rose {step.median_change:+.1%} (95% CI {step.ci_low:+.1%} to {step.ci_high:+.1%}, "
                f"p={step.p_value:.2g}), beyond the allowed {limit:.0%}.")
    elif (ratio := comparison.step_time_ms.ratio) is not None and ratio > limit:
        regressions.append(f"Step time rose {ratio:+.1%}, beyond the allowed {limit:.0%} ({step.note}).")
    memory = comparison.peak_memory_bytes.ratio
    if memory is not None and memory > thresholds.max_memory_regression:
        regressions.append(f"Peak memory rose {memory:+.1%}, beyond the allowed "
                           f"{thresholds.max_memory_regression:.0%}.")
    known = {finding.category for finding in _p0s(baseline.findings)}
    new_p0 = [finding.title for finding in _p0s(candidate.findings) if finding.category not in known]
    regressions.extend(f"New P0: {title}" for title in new_p0)
    return Verdict(
        baseline=baseline_name, candidate=candidate_name,
        baseline_status=baseline.status.value, candidate_status=candidate.status.value,
        thresholds=thresholds, step_time=step, comparison=comparison, new_p0=new_p0, regressions=regressions,
    )
