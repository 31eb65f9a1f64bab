import math

import numpy as np
import pytest

from collbench.stats.samples import median_ci, median_ci_indices, relative_ci_halfwidth, summarize


@pytest.mark.parametrize("n,ranks", [
    # Known distribution-free 95% intervals (1-based ranks from binomial tables, minus one).
    (6, (0, 5)), (10, (1, 8)), (20, (5, 14)), (50, (17, 32)), (100, (39, 60)),
])
def test_median_ci_ranks_match_tables(n, ranks):
    assert median_ci_indices(n) == ranks


def test_too_few_samples_have_no_interval():
    assert median_ci_indices(5) is None
    lo, hi = median_ci(np.arange(5.0))
    assert math.isnan(lo) and math.isnan(hi)
    assert relative_ci_halfwidth(np.arange(5.0)) == math.inf


def test_ci_of_ordered_values():
    lo, hi = median_ci(np.arange(1.0, 101.0))   # 1..100
    assert (lo, hi) == (40.0, 61.0)


def test_ci_covers_the_true_median_about_95_percent():
    rng = np.random.default_rng(1)
    hits = 0
    trials = 2000
    for _ in range(trials):
        lo, hi = median_ci(rng.exponential(1.0, size=40))
        hits += lo <= math.log(2) <= hi
    assert 0.93 <= hits / trials <= 0.99


def test_normal_approximation_is_continuous_with_exact():
    lo_exact, hi_exact = median_ci_indices(1000)
    lo_approx, hi_approx = median_ci_indices(1001)
    assert abs(lo_exact - lo_approx) <= 1 and abs(hi_exact - hi_approx) <= 2


def test_summarize_known_array():
    x = np.arange(1.0, 101.0)
    s = summarize(x)
    assert s.n == 100
    assert s.p50 == 50.5
    assert s.mean == 50.5
    assert s.min == 1.0 and s.max == 100.0
    assert s.p95 == pytest.approx(95.05)
    assert s.p99 == pytest.approx(99.01)
    assert (s.ci_low, s.ci_high) == (40.0, 61.0)


def test_summarize_empty():
    s = summarize(np.array([]))
    assert s.n == 0 and math.isnan(s.p50)


def test_relative_halfwidth_shrinks_with_more_samples():
    rng = np.random.default_rng(0)
    few = relative_ci_halfwidth(rng.normal(10, 1, 30))
    many = relative_ci_halfwidth(rng.normal(10, 1, 3000))
    assert many < few / 4
