"""Pure statistics on arrays of timing samples (no MPI, no torch).

The confidence interval of the median is distribution-free: it comes from order statistics.
For n samples the number of samples below the true median is Binomial(n, 1/2), so the j-th
and (n-j+1)-th smallest samples bracket the median with probability 1 - 2*P(B <= j-1).
j is the largest rank that keeps that probability at or above the confidence level (exact
binomial up to 1000 samples, normal approximation above).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from collbench.stats.distributions import normal_quantile
from collbench.stats.calibration import CONFIDENCE

_EXACT_BINOMIAL_MAX_N = 1000


@lru_cache(maxsize=4096)
def median_ci_indices(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """0-based order-statistic indices (lo, hi) bracketing the median, or None if n is too small."""
    alpha = 1.0 - confidence
    if n <= _EXACT_BINOMIAL_MAX_N:
        # j = 1-based rank of the lower bound: the largest j with P(B <= j-1) <= alpha/2.
        log_half_n = -n * math.log(2.0)
        cdf, j = 0.0, 0
        while j + 1 <= n // 2:
            cdf += math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                            + log_half_n)
            if cdf > alpha / 2:
                break
            j += 1
        if j == 0:
            return None
    else:
        z = normal_quantile(1.0 - alpha / 2)
        j = max(1, int(math.floor(n / 2.0 - z * math.sqrt(n) / 2.0)))
    return j - 1, n - j


def median_ci(samples: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(low, high) confidence interval of the median; (nan, nan) when there are too few samples."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    ranks = median_ci_indices(len(x), confidence)
    if ranks is None:
        return math.nan, math.nan
    return float(x[ranks[0]]), float(x[ranks[1]])


def relative_ci_halfwidth(samples: np.ndarray, confidence: float = CONFIDENCE) -> float:
    """Half the CI width divided by the median; inf when it cannot be computed."""
    x = np.asarray(samples, dtype=np.float64)
    if len(x) == 0:
        return math.inf
    lo, hi = median_ci(x, confidence)
    med = float(np.median(x))
    if math.isnan(lo) or med <= 0:
        return math.inf
    return (hi - lo) / (2.0 * med)


@dataclass(frozen=True)
class Summary:
    """Order statistics of a sample set, in the samples' unit."""

    n: int
    p50: float
    ci_low: float
    ci_high: float
    mean: float
    min: float
    p95: float
    p99: float
    max: float


def summarize(samples: np.ndarray, confidence: float = CONFIDENCE) -> Summary:
    x = np.asarray(samples, dtype=np.float64)
    if len(x) == 0:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan, nan, nan)
    lo, hi = median_ci(x, confidence)
    p50, p95, p99 = np.percentile(x, [50, 95, 99])
    return Summary(len(x), float(p50), lo, hi, float(x.mean()), float(x.min()), float(p95),
                   float(p99), float(x.max()))
