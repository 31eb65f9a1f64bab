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
* ``drift_between_runs`` and ``slow_runs`` — one side's runs of round medians: how far whole
  runs made at different times drift together (a machine-wide factor: on a shared VM, ±10%
  from one minute to the next), and which runs of a merged file lay far above the others.

The change between two sides (a baseline and a new run), its CI and p-value: ``comparison``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from collbench.measure.distributions import t_quantile
from collbench.measure.noise import (BETWEEN_RUNS_FACTOR, INTERFERENCE_WIDTH, MIN_CLEAN_SD, MIN_ROWS_FOR_PRIOR,
                                    NoiseModel, SpreadPrior, clean_rounds, moderated, own_rounds, positive,
                                    set_aside_above, state_level)

CONFIDENCE = 0.95
#: The largest log an interval's end is given: a wild spread makes a huge end, not an overflow.
_LARGEST_LOG = 700.0


def row_clean_sd(prior: Optional[SpreadPrior]) -> float:
    """A row's clean spread in its file's model: the unit in which whole runs of a merged file
    are judged (``slow_runs``, ``analysis.runs.noisy_runs``); nan without a model. Which of a
    row's own rounds count is the row's alone (``noise.own_rounds``)."""
    if prior is not None and math.isfinite(prior.window_sd):
        return prior.window_sd
    return math.nan


@dataclass(frozen=True)
class RoundsSummary:
    rounds: int          # rounds counted (those set aside as interference are not)
    center: float        # geometric mean of the counted round medians; the median itself for one round
    ci_low: float        # 95% CI of the centre from the spread of the rounds; nan under 2 rounds
    ci_high: float       # (up to the level a state of the machine held a fifth of the rounds at: noise.state_level)
    cv: float            # standard deviation / mean of the counted round medians; nan under 2 rounds
    log_sd: float        # standard deviation of their logs; nan under 2 rounds
    disagree: bool       # their spread lies beyond what the row's trend allows (noise.moderated): ‡
    set_aside: int = 0   # rounds set aside as interference (``noise.own_rounds``)


def summarize_rounds(medians: Sequence[float], confidence: float = CONFIDENCE, prior=None,
                     stratum=None) -> RoundsSummary:
    """Statistics of one row across rounds. Its centre, the rounds it counts and the rounds it
    sets aside as interference are its own (``noise.own_rounds``): no other row, merge or sweep
    moves them. ``prior``: the row's SpreadPrior, or its file's NoiseModel (read at these medians
    in ``stratum``), which shapes only the interval and ‡: the counted rounds' variance is
    moderated ((R-1)·sd² + d0·s0²) / (R-1+d0) with t on R-1+d0 degrees of freedom — or, where it
    lies beyond what the trend allows, their own variance and R-1 — and the interval carries the
    spread between whole runs (BETWEEN_RUNS_FACTOR × s0): it is meant to hold what the next run
    measures. ‡ (``disagree``) judges the counted rounds within the model's window
    (``noise.clean_rounds``); where a fifth of the rounds or more lay above that window at a
    level (a state of the machine: ``noise.state_level``), the next run may settle there, and
    the CI reaches up to it."""
    if isinstance(prior, NoiseModel):
        prior = prior.noise(medians, stratum)
    nan = math.nan
    values = [v if v is not None else nan for v in medians]
    keep = own_rounds(values)
    x = np.asarray(values, dtype=np.float64)[keep]
    set_aside = len(positive(values)) - len(x)
    n = len(x)
    if n == 0:
        return RoundsSummary(0, nan, nan, nan, nan, nan, False)
    logs = np.log(x)
    center = float(x[0]) if n == 1 else float(np.exp(logs.mean()))
    with_prior = prior is not None and math.isfinite(prior.log_sd)
    # the file's model may mark the rounds far above its window as a state (the interval reaches
    # up to it) and judge the spread of the others (‡); it moves neither the centre nor the
    # rounds counted
    judged = keep & clean_rounds(values, row_clean_sd(prior)) if with_prior else keep
    state = state_level(set_aside_above(values, judged), len(positive(values)))
    if n == 1:
        if not with_prior:
            return RoundsSummary(1, center, nan, nan, nan, nan, False, set_aside)
        # Interference left one round: the row's trend still says how far it may lie.
        half = t_quantile(0.5 + confidence / 2, prior.df) * prior.log_sd * math.sqrt(1.0 + BETWEEN_RUNS_FACTOR ** 2)
        return RoundsSummary(1, center, center * math.exp(-half), _reaching(center * math.exp(half), state),
                             nan, nan, False, set_aside)
    sd = float(logs.std(ddof=1))
    var, df = sd * sd, float(n - 1)
    between, disagree = 0.0, False
    if with_prior:
        m = moderated(var, df, prior.log_sd ** 2, prior.df)
        var, df = m.variance, m.df
        between = (BETWEEN_RUNS_FACTOR * prior.log_sd) ** 2
        inside = np.log(np.asarray(values, dtype=np.float64)[judged])
        disagree = len(inside) > 1 and moderated(float(inside.var(ddof=1)), float(len(inside) - 1),
                                                 prior.log_sd ** 2, prior.df).beyond
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(var / n + between)
    cv = float(x.std(ddof=1) / x.mean())
    top = min(float(logs.mean() + half), _LARGEST_LOG)
    return RoundsSummary(n, center, float(np.exp(logs.mean() - half)), _reaching(math.exp(top), state),
                         cv, sd, bool(disagree), set_aside)


def _reaching(high: float, state: float) -> float:
    """A CI's upper end, raised to a state's level (log; nan: none) where that lies above it."""
    return float(max(high, math.exp(state))) if math.isfinite(state) else float(high)


def within_run_squares(groups) -> tuple:
    """(sum of squares around each run's mean, degrees of freedom) of log medians (each run's,
    as ``log_runs`` gives them)."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            ss += float(((g - g.mean()) ** 2).sum())
            df += len(g) - 1
    return ss, df


def log_runs(groups) -> list:
    """The logs of each run's positive round medians (``groups``: a list of runs, each a list of
    round medians), runs with none left out."""
    return [np.log(x) for x in (positive(g) for g in groups) if len(x)]


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
    k = max((len(log_runs(runs)) for runs in rows_runs), default=0)
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
        logs = log_runs(runs)
        unit = 1.0 if units is None else units[i]
        if len(logs) != k or not (math.isfinite(unit) and unit > 0):
            continue
        means = np.array([g.mean() for g in logs])
        deviations.append((means - means.mean()) / unit)
        ss, df = within_run_squares(logs)
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
    means = np.array([[g.mean() for g in log_runs(runs)] for runs in rows_runs if len(log_runs(runs)) == k])
    distance = np.where(far, np.median(means - means[:, [fastest]], axis=0), 0.0)
    kept = effects[~far]
    return distance, float(np.std(kept, ddof=1)) if len(kept) > 1 else math.nan
