"""Run-to-run statistics: pure functions on the per-round medians of one row (no MPI).

A *round* is one measurement of the whole sweep: a fresh launch when collbench starts the
ranks itself, a fresh communicator and fresh buffers inside a user's job. Launch-to-launch
variation (placement, page layout, connection set-up, neighbours) is what makes one launch's
numbers differ from the next, and the samples of one launch cannot see it; the round medians
can. Everything here works on their logarithms: times are positive and their spread is
multiplicative, so differences of logs are ratios.

* ``summarize_rounds`` — the centre (geometric mean of the round medians), a 95% CI of it
  (Student t on the log medians), the coefficient of variation, and whether the rounds
  disagree far beyond what their own within-round CIs allow.
* ``change`` — the change between two sets of round medians (ratio of geometric means) with
  its CI and p-value, the noise coming from whichever side has rounds to estimate it.
* ``detectable_change`` and ``rounds_needed`` — what a given spread lets a comparison see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from collbench.distributions import normal_quantile, t_quantile, t_two_sided_p

CONFIDENCE = 0.95
#: Rounds "disagree" when their medians spread this many times more than their own
#: within-round CIs say a median can move (standard deviations of the log medians).
DISAGREE_FACTOR = 3.0
#: The smallest run-to-run spread (sd of log medians) a comparison assumes: identical round
#: medians (a rounded file, a synthetic test) must not make every difference significant.
MIN_LOG_SD = 0.001


@dataclass(frozen=True)
class RoundsSummary:
    rounds: int
    center: float        # geometric mean of the round medians; the median itself for one round
    ci_low: float        # 95% CI of the centre from the spread of the rounds; nan under 2 rounds
    ci_high: float
    cv: float            # standard deviation / mean of the round medians; nan under 2 rounds
    log_sd: float        # standard deviation of the log round medians; nan under 2 rounds
    disagree: bool       # spread far beyond the within-round CIs (DISAGREE_FACTOR)


def _positive(values: Sequence[float]) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None and math.isfinite(v) and v > 0], dtype=np.float64)
    return x


def within_log_se(ci_low: float, ci_high: float) -> float:
    """Standard error of a log median implied by its 95% CI (half the log width / z)."""
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)) or ci_low <= 0 or ci_high < ci_low:
        return math.nan
    return (math.log(ci_high) - math.log(ci_low)) / (2.0 * normal_quantile(0.5 + CONFIDENCE / 2))


def summarize_rounds(medians: Sequence[float], within_cis: Optional[Sequence[tuple]] = None,
                     confidence: float = CONFIDENCE) -> RoundsSummary:
    """Statistics of one row across rounds. ``within_cis``: each round's own (low, high) CI of
    its median, used only to tell whether the rounds disagree."""
    x = _positive(medians)
    n = len(x)
    nan = math.nan
    if n == 0:
        return RoundsSummary(0, nan, nan, nan, nan, nan, False)
    logs = np.log(x)
    center = float(np.exp(logs.mean()))
    if n == 1:
        return RoundsSummary(1, float(x[0]), nan, nan, nan, nan, False)
    sd = float(logs.std(ddof=1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    cv = float(x.std(ddof=1) / x.mean())
    disagree = False
    if within_cis:
        se = np.asarray([within_log_se(lo, hi) for lo, hi in within_cis], dtype=np.float64)
        se = se[np.isfinite(se)]
        if len(se):
            typical = float(np.sqrt(np.mean(se ** 2)))
            disagree = sd > DISAGREE_FACTOR * max(typical, MIN_LOG_SD)
    return RoundsSummary(n, center, float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half)),
                         cv, sd, disagree)


@dataclass(frozen=True)
class Change:
    """NEW against BASELINE on the log scale: ``estimate`` = log(ratio of geometric means)."""

    n_baseline: int
    n_new: int
    estimate: float      # log ratio; exp(estimate) = new / baseline
    se: float            # standard error of the estimate
    df: float            # degrees of freedom of the t distribution (inf: an assumed spread)
    ci_low: float        # log ratio bounds of the 95% CI
    ci_high: float
    p_value: float       # two-sided, against no change
    noise: str           # where the spread came from: both, baseline, new, assumed

    @property
    def ratio(self) -> float:
        return math.exp(self.estimate)

    @property
    def log_sd(self) -> float:
        scale = math.sqrt(1.0 / self.n_baseline + 1.0 / self.n_new)
        return self.se / scale


def change(baseline: Sequence[float], new: Sequence[float], *, assumed_log_sd: float,
           confidence: float = CONFIDENCE) -> Optional[Change]:
    """The change from ``baseline`` to ``new`` round medians; None if either side has none.

    The spread of round medians is a property of the machine, so both sides share one
    estimate of it: with two or more rounds on each side the larger of the two sides' variances
    (never smaller than the pooled one, so a noisier side cannot hide behind a quiet one), with
    the pooled degrees of freedom; with one round on one side, the other side's; with one
    round on each, ``assumed_log_sd`` and the normal distribution.
    """
    a, b = np.log(_positive(baseline)), np.log(_positive(new))
    na, nb = len(a), len(b)
    if na == 0 or nb == 0:
        return None
    if na >= 2 and nb >= 2:
        sd = math.sqrt(max(a.var(ddof=1), b.var(ddof=1)))
        df, noise = float(na + nb - 2), "both"
    elif na >= 2:
        sd, df, noise = float(a.std(ddof=1)), float(na - 1), "baseline"
    elif nb >= 2:
        sd, df, noise = float(b.std(ddof=1)), float(nb - 1), "new"
    else:
        sd, df, noise = assumed_log_sd, math.inf, "assumed"
    sd = max(sd, MIN_LOG_SD)
    se = sd * math.sqrt(1.0 / na + 1.0 / nb)
    estimate = float(b.mean() - a.mean())
    half = t_quantile(0.5 + confidence / 2, df) * se
    return Change(na, nb, estimate, se, df, estimate - half, estimate + half,
                  t_two_sided_p(estimate / se, df), noise)


def detectable_change(log_sd: float, n_baseline: int, n_new: int, df: float, alpha: float,
                      power: float = 0.8) -> float:
    """The relative change that a two-sided t test at level ``alpha`` detects with probability
    ``power``, for this spread and these round counts (e.g. 0.12 for 12%)."""
    if not math.isfinite(log_sd) or df <= 0:
        return math.nan
    se = max(log_sd, MIN_LOG_SD) * math.sqrt(1.0 / n_baseline + 1.0 / n_new)
    return math.expm1((t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se)


def rounds_needed(log_sd: float, half_width: float, confidence: float = CONFIDENCE, limit: int = 1000) -> Optional[int]:
    """Rounds on each side for the CI of a change to be at most ±``half_width`` (relative) wide;
    None if more than ``limit``."""
    if not math.isfinite(log_sd) or half_width <= 0:
        return None
    target = math.log1p(half_width)
    sd = max(log_sd, MIN_LOG_SD)

    def fits(n: int) -> bool:
        return t_quantile(0.5 + confidence / 2, 2 * n - 2) * sd * math.sqrt(2.0 / n) <= target

    if not fits(limit):
        return None
    lo, hi = 1, limit                 # the half-width shrinks as n grows: bisect for the first n that fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return max(hi, 2)
