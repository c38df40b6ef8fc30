"""``mldiag compare``: the step-time test, the regression verdict, and the command's exit status."""

from __future__ import annotations

import json

import numpy as np
import pytest
from analysis_support import PROFILES
from typer.testing import CliRunner

from mldiag.analysis.regression import compare_step_times, mann_whitney_greater
from mldiag.cli.main import app

runner = CliRunner()
HEALTHY, DEGRADED = str(PROFILES / "demo_healthy"), str(PROFILES / "demo_degraded")


def _steps(seed: int, median_ms: float, count: int = 60) -> list[float]:
    """Step times with log-normal noise and a few stragglers, as a shared machine gives them."""
    rng = np.random.default_rng(seed)
    steps = median_ms * rng.lognormal(0, 0.05, count)
    steps[rng.choice(count, 3, replace=False)] *= 4
    return steps.tolist()


@pytest.mark.slow
def test_the_mann_whitney_p_value_matches_the_reference_implementation():
    stats = pytest.importorskip("scipy.stats")
    base, cand = np.array(_steps(1, 100)), np.array(_steps(2, 104))
    reference = stats.mannwhitneyu(cand, base, alternative="greater", method="asymptotic").pvalue
    assert mann_whitney_greater(base, cand) == pytest.approx(reference, rel=1e-6)
    tied = np.array([1.0, 1.0, 2.0, 2.0, 3.0]), np.array([2.0, 2.0, 3.0, 3.0, 3.0])
    reference = stats.mannwhitneyu(tied[1], tied[0], alternative="greater", method="asymptotic").pvalue
    assert mann_whitney_greater(*tied) == pytest.approx(reference, rel=1e-6)


def test_noise_and_stragglers_do_not_read_as_a_regression():
    for seed in range(20):
        test = compare_step_times(_steps(seed, 100), _steps(seed + 100, 100))
        assert not (test.p_value < 0.01 and test.ci_low > 0.05), (seed, test)


def test_a_slowdown_beyond_the_threshold_is_found_and_its_interval_holds_it():
    test = compare_step_times(_steps(1, 100), _steps(2, 130))
    assert test.p_value < 1e-6
    assert test.ci_low < 0.30 < test.ci_high and test.ci_low > 0.05
    assert test.median_change == pytest.approx(0.30, abs=0.04)


def test_too_few_steps_get_no_test_and_say_why():
    test = compare_step_times([100.0, 101.0], _steps(1, 100))
    assert test.p_value is None and "too few steps" in test.note


def _compare(*args: str):
    return runner.invoke(app, ["compare", *args])


@pytest.mark.slow
def test_the_demo_s_degraded_session_regresses_against_its_baseline():
    result = _compare(HEALTHY, DEGRADED)
    assert result.exit_code == 1, result.output
    assert "REGRESSED" in result.stdout and "Mann-Whitney U p=" in result.stdout and "95% CI" in result.stdout
    verdict = json.loads(_compare(HEALTHY, DEGRADED, "--format", "json").stdout)
    assert verdict["regressed"] and verdict["step_time"]["ci_low"] > 0.2
    assert verdict["regressions"][0].startswith("Median step time rose")


@pytest.mark.slow
def test_a_session_against_itself_passes_and_a_generous_threshold_lets_the_slowdown_pass():
    result = _compare(HEALTHY, HEALTHY, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["regressions"] == []
    assert _compare(HEALTHY, DEGRADED, "--max-step-time-regression", "40%").exit_code == 0


@pytest.mark.parametrize("args", [
    ["--max-step-time-regression", "five"],
    ["--max-memory-regression", "10"],
    ["--format", "yaml"],
])
def test_usage_errors_exit_2_with_one_line(args):
    result = _compare(HEALTHY, DEGRADED, *args)
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_a_folder_and_a_stored_session_cannot_be_mixed():
    result = _compare(HEALTHY, "s-123")
    assert result.exit_code == 2 and "not one of each" in " ".join(result.output.replace("│", " ").split())


def test_an_unreadable_folder_exits_3(tmp_path):
    (tmp_path / "empty").mkdir()
    result = _compare(str(tmp_path / "empty"), HEALTHY)
    assert result.exit_code == 3 and result.stderr.startswith("mldiag compare: ") and "Traceback" not in result.output



@pytest.mark.slow
def test_folders_from_different_hardware_are_compared_with_a_warning():
    result = _compare(str(PROFILES / "cpu" / "warmup_compile"), str(PROFILES / "tpu_v5e" / "warmup_compile"))
    assert result.stderr.splitlines() == ["mldiag compare: warning: the baseline ran on CPU, the candidate on "
                                          "TPU v5 Lite; their step times are not comparable"]
    assert "METRIC" in result.stdout
