"""The change between two sides' round medians (a baseline and a new run, each one or more runs
of rounds): pure functions on the log scale, as ``runstats`` (no MPI).

* ``within_spread`` and ``estimate_change`` — the change between two sets of runs of round
  medians (ratio of geometric means) with its CI and p-value. Two kinds of noise: the rounds of
  one run spread around the run's mean, and whole runs made at different times drift together
  (``stats.runs.drift_between_runs``). Rounds average out the first only; the second needs
  separate runs.
* ``paired_changes`` — the same for the pairs of one interleaved job.
* ``detectable_change`` and ``rounds_needed`` — what a given spread lets a comparison see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from collbench.stats.distributions import t_quantile, t_two_sided_p
from collbench.stats.noise import fit_trends, moderated
from collbench.stats.runs import log_runs, within_run_squares
from collbench.stats.calibration import (CONFIDENCE, MIN_LOG_SD, MIN_PAIR_SD,
                                         MIN_PAIRS_TO_SET_ASIDE, PAIR_WIDTH, PAIR_WIDTH_FEW)


@dataclass(frozen=True)
class Spread:
    """The spread of one row's round medians within runs (sd of logs), shared by both sides."""

    log_sd: float
    df: float            # degrees of freedom of that estimate (inf: assumed)
    source: str          # both, baseline, new (the sides with two or more rounds in a run), or
                         # assumed


def within_spread(baseline, new, *, assumed_log_sd: float) -> Spread:
    """How far the rounds of one run spread, from the rounds of both sides (each a list of runs,
    each run a list of round medians). With rounds on both sides the *larger* side's variance
    (never smaller than the pooled one: a noisy new run cannot borrow precision from a quiet
    baseline) with the pooled degrees of freedom; with rounds on one side, that side's; with
    none, ``assumed_log_sd``."""
    ssa, dfa = within_run_squares(log_runs(baseline))
    ssb, dfb = within_run_squares(log_runs(new))
    if dfa and dfb:
        return Spread(math.sqrt(max(ssa / dfa, ssb / dfb)), float(dfa + dfb), "both")
    if dfa:
        return Spread(math.sqrt(ssa / dfa), float(dfa), "baseline")
    if dfb:
        return Spread(math.sqrt(ssb / dfb), float(dfb), "new")
    return Spread(assumed_log_sd, math.inf, "assumed")


@dataclass(frozen=True)
class Change:
    """NEW against BASELINE on the log scale: ``estimate`` = log(ratio of geometric means)."""

    n_baseline: int      # rounds on each side
    n_new: int
    estimate: float      # log ratio; exp(estimate) = new / baseline
    se: float            # standard error of the estimate: rounds and drift between runs
    df: float            # degrees of freedom of the t distribution (Welch–Satterthwaite)
    ci_low: float        # log ratio bounds of the 95% CI
    ci_high: float
    p_value: float       # two-sided, against no change
    noise: str           # where the rounds' spread came from: both, baseline, new, assumed

    @property
    def ratio(self) -> float:
        return math.exp(self.estimate)


def run_concentration(runs) -> float:
    """sum(n_run²) / n²: the share of a side's mean that one run's drift carries (1 for one run;
    0 for none)."""
    sizes = [len(g) for g in runs]
    total = sum(sizes)
    return sum(n * n for n in sizes) / (total * total) if total else 0.0


def log_change(baseline, new) -> Optional[float]:
    """The difference of the sides' mean log medians (each a list of runs of round medians);
    None if either side has none: the point estimate of ``estimate_change``."""
    a, b = log_runs(baseline), log_runs(new)
    return _difference(a, b) if a and b else None


def _difference(a_logs: list, b_logs: list) -> float:
    return float(np.concatenate(b_logs).mean() - np.concatenate(a_logs).mean())


def estimate_change(baseline, new, *, spread: Spread, drift: tuple, known_var: float = 0.0,
                    confidence: float = CONFIDENCE) -> Optional[Change]:
    """The change from ``baseline`` to ``new`` (each a list of runs, each run a list of round
    medians); None if either side has none.

    The estimate is the difference of the sides' mean log medians. Its variance has three
    parts: the rounds' spread within a run, which averages out over all rounds; the drift of
    whole runs (``drift``: (sd, df)), which averages out only over separate runs — a side made
    of one run carries all of its run's drift; and ``known_var``, taken as known (what a busy
    machine may add to one side's rows and not the other's).
    """
    a, b = log_runs(baseline), log_runs(new)
    if not a or not b:
        return None
    na, nb = sum(len(g) for g in a), sum(len(g) for g in b)
    drift_sd, drift_df = drift
    within_var = max(spread.log_sd, MIN_LOG_SD) ** 2 * (1.0 / na + 1.0 / nb)
    drift_var = drift_sd ** 2 * (run_concentration(a) + run_concentration(b))
    variance = within_var + drift_var + known_var
    parts = [(within_var, spread.df), (drift_var, drift_df)]
    denominator = sum(v * v / df for v, df in parts if v > 0 and math.isfinite(df))
    df = variance * variance / denominator if denominator > 0 else math.inf
    se = math.sqrt(variance)
    estimate = _difference(a, b)
    half = t_quantile(0.5 + confidence / 2, df) * se
    return Change(na, nb, estimate, se, df, estimate - half, estimate + half,
                  t_two_sided_p(estimate / se, df), spread.source)


def pairs_kept(pairs: tuple) -> tuple:
    """The pairs (A's round median, B's) of one row whose log ratio B/A lies within the row's
    pair window of the median ratio (``calibration.PAIR_WIDTH``): what moved both sides during
    a pair cancels in its ratio, so a ratio far from the others' is one side's interference.
    Symmetric, so that it moves no estimate of a change; with fewer than
    MIN_PAIRS_TO_SET_ASIDE pairs, all are kept."""
    n = len(pairs)
    if n < MIN_PAIRS_TO_SET_ASIDE:
        return tuple(pairs)
    d = np.log(np.asarray([b for _, b in pairs], dtype=np.float64)) - \
        np.log(np.asarray([a for a, _ in pairs], dtype=np.float64))
    centre = float(np.median(d))
    spread = max(1.4826 * float(np.median(np.abs(d - centre))), MIN_PAIR_SD)
    width = (PAIR_WIDTH + PAIR_WIDTH_FEW / (n - 3)) * spread
    return tuple(p for p, x in zip(pairs, d) if abs(x - centre) <= width)


def paired_changes(rows_pairs, known_vars=None, confidence: float = CONFIDENCE,
                   strata=None) -> list:
    """Per row, the change from A to B estimated on its pairs — (A's round median, B's round
    median) of rounds measured one after the other in one job, both counted — or None with
    fewer than two pairs. The estimate is the mean log ratio within pairs: what moved the machine
    during a pair moved both of its rounds and cancels. Its variance is moderated by the trend
    of the rows' variances of those log ratios against their time, per stratum (``strata``: each
    row's; ``noise.fit_trends``), as ``summarize_rounds`` is, plus the row's ``known_vars``
    entry, taken as known (as ``estimate_change``'s ``known_var``)."""
    diffs = [None if len(pairs) < 2
             else np.log(np.asarray([b for _, b in pairs]))
             - np.log(np.asarray([a for a, _ in pairs])) for pairs in rows_pairs]
    times = [float(np.exp(np.median(np.log(np.asarray(pairs, dtype=np.float64)))))
             if d is not None else math.nan for d, pairs in zip(diffs, rows_pairs)]
    strata = list(strata) if strata is not None else [None] * len(diffs)
    trends = fit_trends(strata, times,
                        [float(d.var(ddof=1)) if d is not None else math.nan for d in diffs])
    out = []
    for d, t, stratum, known in zip(diffs, times, strata,
                                    known_vars if known_vars is not None else [0.0] * len(diffs)):
        if d is None:
            out.append(None)
            continue
        n = len(d)
        m = moderated(max(float(d.var(ddof=1)), MIN_LOG_SD ** 2), float(n - 1),
                      trends.variance(t, stratum))
        se = math.sqrt(m.variance / n + known)
        estimate = float(d.mean())
        half = t_quantile(0.5 + confidence / 2, m.df) * se
        out.append(Change(n, n, estimate, se, m.df, estimate - half, estimate + half,
                          t_two_sided_p(estimate / se, m.df), "paired"))
    return out


def detectable_change(se: float, df: float, critical: float, power: float = 0.8) -> float:
    """The relative change (0.12 for 12%) that a test calling |t| > ``critical`` significant
    detects with probability ``power`` when the estimate's standard error is ``se``."""
    if not (math.isfinite(se) and math.isfinite(critical)) or df <= 0:
        return math.nan
    return math.expm1((critical + t_quantile(power, df)) * se)


def rounds_needed(log_sd: float, half_width: float, *, drift_var: float = 0.0,
                  confidence: float = CONFIDENCE, limit: int = 1000) -> Optional[int]:
    """Rounds on each side (one run each) for the CI of a change to be at most ±``half_width``
    (relative) wide; None if more than ``limit`` — or if the drift between runs
    (``drift_var``: its share of the estimate's variance) alone is too wide, which no number
    of rounds in one run can fix."""
    if not math.isfinite(log_sd) or half_width <= 0:
        return None
    target = math.log1p(half_width)
    sd = max(log_sd, MIN_LOG_SD)

    def fits(n: int) -> bool:
        return (t_quantile(0.5 + confidence / 2, 2 * n - 2)
                * math.sqrt(sd * sd * 2.0 / n + drift_var) <= target)

    if not fits(limit):
        return None
    # the half-width shrinks as n grows: bisect for the first n that fits
    lo, hi = 1, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return max(hi, 2)
