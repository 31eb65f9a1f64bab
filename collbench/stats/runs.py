"""Whole runs of one side: the logs of each run's rounds, how far runs made at different times
drift together (``drift_between_runs``, ``estimate_drift``), which runs of a merged file lay far
above the others (``slow_runs``), and how far a run's fastest round lies below those it counts
(``floor_gap``). Pure functions on round medians grouped by run (no result files)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from collbench.stats.calibration import (DRIFT_FACTOR, DRIFT_OVERRULE_LEVEL, INTERFERENCE_WIDTH,
                                         MIN_CLEAN_SD, MIN_ROWS_FOR_PRIOR, MIN_RUNS_FOR_DRIFT)
from collbench.stats.distributions import chi2_quantile
from collbench.stats.noise import expected_fastest, positive


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

    A state of the machine can outlast the launches of a run, with no CPU meter showing why
    (benchmarks/README.md, "Slow runs of a merged baseline"). Noise only adds
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
    means = np.array([[g.mean() for g in log_runs(runs)] for runs in rows_runs
                      if len(log_runs(runs)) == k])
    distance = np.where(far, np.median(means - means[:, [fastest]], axis=0), 0.0)
    kept = effects[~far]
    return distance, float(np.std(kept, ddof=1)) if len(kept) > 1 else math.nan


def floor_gap(logs: np.ndarray, fastest: float, log_sd: float) -> float:
    """Noise only adds time, so a row's own time may lie as low as a run's fastest round rather
    than at the mean of those counted: how far the fastest lies below that mean beyond what the
    row's modelled spread ``log_sd`` (nan: without a model, the counted rounds' own) puts there.
    Squared and weighted by the run's share of the side's counted rounds squared (all of it for a
    side of one run), it is what keeps a stored baseline honest about states of the machine that
    outlast launches, where only one launch in several shows what a row could do (docs/compare.md,
    "Interference, busy rounds and what a shared machine adds"). Two sides of one interleaved job
    share such states pair by pair and do not need it."""
    sd = log_sd if math.isfinite(log_sd) else float(np.std(logs, ddof=1)) if len(logs) > 1 else 0.0
    return max(0.0, float(logs.mean()) - fastest + sd * expected_fastest(len(logs)))


def estimate_drift(units: list, sides: list) -> tuple:
    """((per-row sd, df), description) of the drift of whole runs: DRIFT_FACTOR times each row's
    modelled spread of rounds within a run (``units``), or the multiple of it that a side merged
    from enough runs measured, whichever is larger. ``sides``: per side, every row's rounds
    grouped by run, in the order of ``units``. One machine-wide factor, felt by each row in
    proportion to its noise."""
    best = ((DRIFT_FACTOR, math.inf),
            f"assumed: {DRIFT_FACTOR:g} × each row's modelled spread of rounds")
    for rows in sides:
        found = drift_between_runs(rows, units)
        # A side of several runs that drifted clearly more than assumed (beyond DRIFT_OVERRULE_LEVEL
        # of what the assumption allows for that many runs) overrules it.
        if (found is not None
                and found[0] ** 2 > DRIFT_FACTOR ** 2 * chi2_quantile(DRIFT_OVERRULE_LEVEL,
                                                                      found[1]) / found[1]
                and found[0] > best[0][0]):
            best = (found, f"measured over {int(found[1]) + 1} runs")
    (factor, df), source = best
    return ([factor * u for u in units], df), source
