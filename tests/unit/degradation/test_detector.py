"""The degradation analyzer on synthetic series: quiet on noise, quick on real slowdowns."""

from __future__ import annotations

import random

import pytest

from mldiag.domain.degradation import DetectorParams, MetricPoint, Transition, detect_degradation


def series(step_times, duty=None):
    return [MetricPoint(step=i, step_time_seconds=t, duty_cycle=None if duty is None else duty[i])
            for i, t in enumerate(step_times)]


def jitter(rng, base, n, spread=0.10):
    return [base * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_no_false_trigger_on_a_steady_noisy_series(seed):
    rng = random.Random(seed)
    assert detect_degradation(series(jitter(rng, 0.200, 1000))) == []


def test_single_outliers_do_not_trigger():
    rng = random.Random(1)
    times = jitter(rng, 0.2, 300)
    for index in range(40, 300, 17):
        times[index] = 2.0  # a checkpoint or GC pause now and then
    assert detect_degradation(series(times)) == []


def test_compilation_spike_at_the_start_is_not_a_baseline_or_an_alert():
    rng = random.Random(2)
    times = [5.0, 3.0, 1.0, 0.5, 0.3] + jitter(rng, 0.2, 200)
    assert detect_degradation(series(times)) == []


@pytest.mark.parametrize("seed", range(20))
def test_a_sustained_20_percent_slowdown_triggers_within_10_points(seed):
    rng = random.Random(seed)
    healthy = jitter(rng, 0.200, 100)
    slow = jitter(rng, 0.240, 50)
    changes = detect_degradation(series(healthy + slow))
    assert changes, "the slowdown was not detected"
    index, transition, reason = changes[0]
    assert transition is Transition.OPENED
    assert 100 <= index < 110
    assert "above the baseline" in reason


def test_recovery_closes_the_event():
    rng = random.Random(3)
    times = jitter(rng, 0.2, 60) + jitter(rng, 0.26, 30) + jitter(rng, 0.2, 30)
    changes = detect_degradation(series(times))
    assert [t for _, t, _ in changes] == [Transition.OPENED, Transition.CLOSED]
    assert changes[1][0] >= 90


def test_duty_cycle_drop_triggers_even_with_steady_step_time():
    rng = random.Random(4)
    duty = [0.9 * (1 + rng.uniform(-0.03, 0.03)) for _ in range(60)] + [0.7] * 20
    changes = detect_degradation(series([0.2] * 80, duty))
    assert changes and "duty cycle" in changes[0][2]


def test_parameters_are_per_run():
    rng = random.Random(5)
    times = jitter(rng, 0.2, 60, spread=0.02) + jitter(rng, 0.22, 40, spread=0.02)  # 10 % slower
    assert detect_degradation(series(times)) == []
    strict = DetectorParams(step_time_slowdown=0.05)
    assert detect_degradation(series(times), strict)[0][1] is Transition.OPENED


def test_bad_points_are_refused():
    with pytest.raises(ValueError):
        MetricPoint(step_time_seconds=0)
    with pytest.raises(ValueError):
        MetricPoint(step_time_seconds=1, duty_cycle=1.5)
