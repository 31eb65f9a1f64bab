"""Run-to-run statistics: pure functions on the per-round medians of one row (no MPI).

A *round* is one measurement of the whole sweep: a fresh launch when collbench starts the
ranks itself, a fresh communicator and fresh buffers inside a user's job. Launch-to-launch
variation (placement, page layout, connection set-up, neighbours) is what makes one launch's
numbers differ from the next, and the samples of one launch cannot see it; the round medians
can. Everything here works on their logarithms: times are positive and their spread is
multiplicative, so differences of logs are ratios. How far a row's rounds are expected to
spread, and which of them count, is the file's noise model (``noise``).

* ``summarize_rounds`` — the centre (geometric mean of the counted round medians), a 95% CI
  of it (Student t on their logs, moderated by the row's trend), the coefficient of variation,
  and whether the rounds spread beyond what the trend expects of the row.
* ``within_spread``, ``drift_between_runs`` and ``estimate_change`` — the change between two
  sets of runs of round medians (ratio of geometric means) with its CI and p-value. Two kinds
  of noise: the rounds of one run spread around the run's mean, and whole runs made at
  different times drift together (a machine-wide factor: on a shared VM, ±10% from one
  minute to the next). Rounds average out the first only; the second needs separate runs.
* ``paired_changes`` — the same for the pairs of one interleaved job.
* ``detectable_change`` and ``rounds_needed`` — what a given spread lets a comparison see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from collbench.measure.distributions import t_quantile, t_two_sided_p
from collbench.measure.noise import (BETWEEN_RUNS_FACTOR, INTERFERENCE_WIDTH, MIN_CLEAN_SD, MIN_LOG_SD,
                                    MIN_ROWS_FOR_PRIOR, NoiseModel, SpreadPrior, clean_rounds, fit_trends, moderated,
                                    positive)

CONFIDENCE = 0.95


def row_clean_sd(prior: Optional[SpreadPrior]) -> float:
    """The clean spread that decides which of a row's rounds count: its stratum's trend at its
    time (nan without one: every round counts). A row's own rounds are too few to tell
    interference from its ordinary spread: judged alone, ten lognormal rounds lost their top
    round often enough to bring the CI's coverage down to 0.89."""
    if prior is not None and math.isfinite(prior.window_sd):
        return prior.window_sd
    return math.nan


@dataclass(frozen=True)
class RoundsSummary:
    rounds: int          # rounds counted (those set aside as interference are not)
    center: float        # geometric mean of the counted round medians; the median itself for one round
    ci_low: float        # 95% CI of the centre from the spread of the rounds; nan under 2 rounds
    ci_high: float
    cv: float            # standard deviation / mean of the counted round medians; nan under 2 rounds
    log_sd: float        # standard deviation of their logs; nan under 2 rounds
    disagree: bool       # their spread lies beyond what the row's trend allows (noise.moderated): ‡
    set_aside: int = 0   # rounds set aside as interference (``clean_rounds``)


def summarize_rounds(medians: Sequence[float], confidence: float = CONFIDENCE, prior=None,
                     stratum=None) -> RoundsSummary:
    """Statistics of one row across rounds, interference set aside (``clean_rounds`` with the
    prior's window; without a prior every round counts). ``prior``: the row's SpreadPrior, or
    its file's NoiseModel (read at these medians in ``stratum``). With it the CI uses the
    moderated variance ((R-1)·sd² + d0·s0²) / (R-1+d0) and t with R-1+d0 degrees of freedom —
    or, where the rounds spread beyond what the trend allows (``disagree``), their own variance
    and R-1 — and carries the spread between whole runs (BETWEEN_RUNS_FACTOR × s0): it is meant
    to hold what the next run measures."""
    if isinstance(prior, NoiseModel):
        prior = prior.noise(medians, stratum)
    nan = math.nan
    values = [v if v is not None else nan for v in medians]
    keep = clean_rounds(values, row_clean_sd(prior))
    x = np.asarray(values, dtype=np.float64)[keep]
    set_aside = len(positive(values)) - len(x)
    n = len(x)
    if n == 0:
        return RoundsSummary(0, nan, nan, nan, nan, nan, False)
    logs = np.log(x)
    center = float(np.exp(logs.mean()))
    with_prior = prior is not None and math.isfinite(prior.log_sd)
    if n == 1:
        if not with_prior:
            return RoundsSummary(1, float(x[0]), nan, nan, nan, nan, False, set_aside)
        # Interference left one round: the row's trend still says how far it may lie.
        half = t_quantile(0.5 + confidence / 2, prior.df) * prior.log_sd * math.sqrt(1.0 + BETWEEN_RUNS_FACTOR ** 2)
        return RoundsSummary(1, float(x[0]), float(x[0] * math.exp(-half)), float(x[0] * math.exp(half)),
                             nan, nan, False, set_aside)
    sd = float(logs.std(ddof=1))
    var, df = sd * sd, float(n - 1)
    between, disagree = 0.0, False
    if with_prior:
        m = moderated(var, df, prior.log_sd ** 2, prior.df)
        var, df, disagree = m.variance, m.df, m.beyond
        between = (BETWEEN_RUNS_FACTOR * prior.log_sd) ** 2
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(var / n + between)
    cv = float(x.std(ddof=1) / x.mean())
    return RoundsSummary(n, center, float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half)),
                         cv, sd, disagree, set_aside)


@dataclass(frozen=True)
class Spread:
    """The spread of one row's round medians within runs (sd of logs), shared by both sides."""

    log_sd: float
    df: float            # degrees of freedom of that estimate (inf: assumed)
    source: str          # both, baseline, new (the sides with two or more rounds in a run), or assumed


def _within(groups) -> tuple:
    """(sum of squares around each run's mean, degrees of freedom) of log medians."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            ss += float(((g - g.mean()) ** 2).sum())
            df += len(g) - 1
    return ss, df


def _logs(groups) -> list:
    return [np.log(x) for x in (positive(g) for g in groups) if len(x)]


def within_spread(baseline, new, *, assumed_log_sd: float) -> Spread:
    """How far the rounds of one run spread, from the rounds of both sides (each a list of runs,
    each run a list of round medians). With rounds on both sides the *larger* side's variance
    (never smaller than the pooled one: a noisy new run cannot borrow precision from a quiet
    baseline) with the pooled degrees of freedom; with rounds on one side, that side's; with
    none, ``assumed_log_sd``."""
    ssa, dfa = _within(_logs(baseline))
    ssb, dfb = _within(_logs(new))
    if dfa and dfb:
        return Spread(math.sqrt(max(ssa / dfa, ssb / dfb)), float(dfa + dfb), "both")
    if dfa:
        return Spread(math.sqrt(ssa / dfa), float(dfa), "baseline")
    if dfb:
        return Spread(math.sqrt(ssb / dfb), float(dfb), "new")
    return Spread(assumed_log_sd, math.inf, "assumed")


#: Runs a side needs before its own drift between runs is trusted: with fewer, the estimate has
#: too few degrees of freedom to be anything but noise (calibration: with three runs it cost
#: more power than it bought, benchmarks/README.md).
MIN_RUNS_FOR_DRIFT = 3


def drift_between_runs(rows_runs, units=None) -> Optional[tuple]:
    """(sd, df) of the machine-wide factor that moves whole runs made at different times, from
    one side's rows, each a list of runs of round medians; None with fewer than
    MIN_RUNS_FOR_DRIFT runs. ``units``: per row, the spread its deviations are measured in (the
    drift is then a multiple of each row's; by default 1, a log sd).

    Each run's effect is the median over rows of its mean log median's deviation from the
    row's mean (the factor moves every row alike); their variance, less what the rounds' own
    spread explains, is the drift's."""
    k = max((len(_logs(runs)) for runs in rows_runs), default=0)
    if k < MIN_RUNS_FOR_DRIFT:
        return None
    effects, rows, within = _run_effects(rows_runs, k, units)
    if effects is None:
        return None
    variance = float(effects.var(ddof=1)) - (float(np.median(within)) / rows if within else 0.0)
    return math.sqrt(max(variance, 0.0)), float(k - 1)


def _run_effects(rows_runs, k: int, units=None) -> tuple:
    """(each run's effect, rows it was judged on, their within-run variances of a run's mean):
    the median over the rows that have all ``k`` runs of the run's mean log median's deviation
    from the row's mean, in the row's ``units``; (None, 0, []) without such a row."""
    deviations, within = [], []
    for i, runs in enumerate(rows_runs):
        logs = _logs(runs)
        unit = 1.0 if units is None else units[i]
        if len(logs) != k or not (math.isfinite(unit) and unit > 0):
            continue
        means = np.array([g.mean() for g in logs])
        deviations.append((means - means.mean()) / unit)
        ss, df = _within(logs)
        if df:
            within.append(ss / df * float(np.mean([1.0 / len(g) for g in logs])) / unit ** 2)
    if not deviations:
        return None, 0, []
    return np.median(np.array(deviations), axis=0), len(deviations), within


def slow_runs(rows_runs, clean_sds) -> tuple:
    """(distances, kept spread): which runs of a side merged from several lay, on most rows, far
    above the side's fastest run. A run's sweep is judged in units of each row's clean spread
    (``clean_sds``, per row: its trend's, floored as the interference window floors it): a run
    more than INTERFERENCE_WIDTH of them above the fastest run that another confirms (the rule
    ``clean_rounds`` applies to rounds) is set aside. ``distances``: per run, the median over
    rows of its log distance above that fastest run where it is set aside, else 0.
    ``rows_runs``: per row, the side's runs in one order, each a list of round medians (an
    empty list where a run counted none).

    A state of the machine can outlast the launches of a run: on the calibration VM one quiet
    run in ten was 18% slower on every row, with no CPU meter showing why. Noise only adds
    time, so such a run says nothing about the code that the faster ones do not; merged into a
    baseline it moves the baseline and makes the drift between runs look five times larger.
    Needs MIN_RUNS_FOR_DRIFT runs (a fastest and a second to confirm it, and one to judge) and
    MIN_ROWS_FOR_PRIOR rows that have them all; otherwise every run counts. ``kept spread``:
    how far the effects of the runs kept spread (sd, in units of each row's clean spread; nan
    with fewer than two), the drift they show."""
    k = len(rows_runs[0]) if rows_runs else 0
    none = (np.zeros(k), math.nan)
    if k < MIN_RUNS_FOR_DRIFT or any(len(runs) != k for runs in rows_runs):
        return none
    units = [max(sd, MIN_CLEAN_SD) if math.isfinite(sd) else math.nan for sd in clean_sds]
    effects, rows, _ = _run_effects(rows_runs, k, units)
    if effects is None or rows < MIN_ROWS_FOR_PRIOR:
        return none
    ordered = np.argsort(effects, kind="stable")
    gaps = np.nonzero(np.diff(effects[ordered]) <= INTERFERENCE_WIDTH)[0]
    if not len(gaps):                    # no two runs agree: no state of the machine to judge by
        return none
    fastest = ordered[gaps[0]]
    far = effects - effects[fastest] > INTERFERENCE_WIDTH
    means = np.array([[g.mean() for g in _logs(runs)] for runs in rows_runs if len(_logs(runs)) == k])
    distance = np.where(far, np.median(means - means[:, [fastest]], axis=0), 0.0)
    kept = effects[~far]
    return distance, float(np.std(kept, ddof=1)) if len(kept) > 1 else math.nan


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
    a, b = _logs(baseline), _logs(new)
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
    a, b = _logs(baseline), _logs(new)
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


def paired_changes(rows_pairs, known_vars=None, confidence: float = CONFIDENCE, strata=None) -> list:
    """Per row, the change from A to B estimated on its pairs — (A's round median, B's round
    median) of rounds measured one after the other in one job, both counted — or None with
    fewer than two pairs. The estimate is the mean log ratio within pairs: what moved the machine
    during a pair moved both of its rounds and cancels. Its variance is moderated by the trend
    of the rows' variances of those log ratios against their time, per stratum (``strata``: each
    row's; ``noise.fit_trends``), as ``summarize_rounds`` is, plus the row's ``known_vars``
    entry, taken as known (as ``estimate_change``'s ``known_var``)."""
    diffs = [None if len(pairs) < 2 else np.log(np.asarray([b for _, b in pairs])) - np.log(np.asarray([a for a, _ in pairs]))
             for pairs in rows_pairs]
    times = [float(np.exp(np.median(np.log(np.asarray(pairs, dtype=np.float64))))) if d is not None else math.nan
             for d, pairs in zip(diffs, rows_pairs)]
    strata = list(strata) if strata is not None else [None] * len(diffs)
    trends = fit_trends(strata, times, [float(d.var(ddof=1)) if d is not None else math.nan for d in diffs])
    out = []
    for d, t, stratum, known in zip(diffs, times, strata, known_vars if known_vars is not None else [0.0] * len(diffs)):
        if d is None:
            out.append(None)
            continue
        n = len(d)
        m = moderated(max(float(d.var(ddof=1)), MIN_LOG_SD ** 2), float(n - 1), trends.variance(t, stratum))
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


def rounds_needed(log_sd: float, half_width: float, *, drift_var: float = 0.0, confidence: float = CONFIDENCE,
                  limit: int = 1000) -> Optional[int]:
    """Rounds on each side (one run each) for the CI of a change to be at most ±``half_width``
    (relative) wide; None if more than ``limit`` — or if the drift between runs
    (``drift_var``: its share of the estimate's variance) alone is too wide, which no number
    of rounds in one run can fix."""
    if not math.isfinite(log_sd) or half_width <= 0:
        return None
    target = math.log1p(half_width)
    sd = max(log_sd, MIN_LOG_SD)

    def fits(n: int) -> bool:
        return t_quantile(0.5 + confidence / 2, 2 * n - 2) * math.sqrt(sd * sd * 2.0 / n + drift_var) <= target

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
