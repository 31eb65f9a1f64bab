"""Significance tests for comparing two runs: pure functions on arrays (numpy only, no scipy).

* ``mann_whitney`` — the two-sided Mann–Whitney U (Wilcoxon rank-sum) test on raw samples,
  normal approximation with tie correction and continuity correction. It is the same
  p-value as ``scipy.stats.mannwhitneyu(x, y, method="asymptotic")``; the tests check that.
  The normal approximation is what every sample count collbench stores can afford (the exact
  distribution is quadratic in the counts) and is accurate from a handful of samples per side.
* ``holm`` — Holm–Bonferroni adjusted p-values: with many sizes compared at once, the chance
  that *any* row is flagged by luck stays at alpha (family-wise error rate), which is what a
  CI gate wants: a spurious red build costs more than a regression caught one run later.
* ``ci_overlap`` — the fallback for files without samples (CSV): two 95% confidence intervals
  of the median that do not overlap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MannWhitney:
    u_statistic: float      # U of the first sample: pairs (x, y) with x > y, ties counting 1/2
    z_score: float          # continuity-corrected, signed: positive when y tends to be larger
    p_value: float          # two-sided
    prob_y_greater: float   # U of y / (n_x n_y): chance that a random y exceeds a random x


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1-based ranks with ties given their average rank, and the size of every tie group."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.r_[True, ordered[1:] != ordered[:-1]]
    group = np.cumsum(starts) - 1
    bounds = np.r_[np.flatnonzero(starts), len(values)]
    average = 0.5 * (bounds[:-1] + 1 + bounds[1:])     # mean of ranks start+1 .. end
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = average[group]
    return ranks, np.diff(bounds)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney(x, y) -> MannWhitney:
    """Two-sided Mann–Whitney U test of samples ``x`` against ``y`` (each at least one value)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n_x, n_y = len(x), len(y)
    if n_x == 0 or n_y == 0:
        raise ValueError("mann_whitney needs at least one sample on each side")
    ranks, ties = _average_ranks(np.concatenate([x, y]))
    u_x = float(ranks[:n_x].sum()) - n_x * (n_x + 1) / 2.0
    u_y = n_x * n_y - u_x
    n = n_x + n_y
    mean = n_x * n_y / 2.0
    tie_term = float((ties.astype(np.float64) ** 3 - ties).sum()) / (n * (n - 1)) if n > 1 else 0.0
    variance = n_x * n_y / 12.0 * ((n + 1) - tie_term)
    if variance <= 0:      # every value tied: no evidence of any difference
        return MannWhitney(u_x, 0.0, 1.0, 0.5)
    sd = math.sqrt(variance)
    distance = abs(u_y - mean)
    z = max(distance - 0.5, 0.0) / sd
    p_value = min(1.0, 2.0 * _normal_sf(z))
    return MannWhitney(u_x, math.copysign(z, u_y - mean), p_value, u_y / (n_x * n_y))


def holm(p_values) -> list:
    """Holm–Bonferroni adjusted p-values, in the order given (compare each with alpha)."""
    p = [float(v) for v in p_values]
    m = len(p)
    adjusted = [0.0] * m
    running = 0.0
    for step, index in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - step) * p[index]))
        adjusted[index] = running
    return adjusted


def ci_overlap(low_a: float, high_a: float, low_b: float, high_b: float) -> bool:
    """Whether two intervals share any point."""
    return max(low_a, low_b) <= min(high_a, high_b)
