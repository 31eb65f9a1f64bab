"""The noise model of a result file: how far each row's rounds spread, and which rounds count.

Rows bound by per-call overhead move far more from round to round than rows bound by
bandwidth, so the spread of a row's round medians is modelled per stratum (one backend setup
and one timing) with a trend against the row's time, and every term that scales with a row's
noise (the prior that moderates its spread, the spread between runs, the drift of whole runs,
the machine's state) uses the row's own modelled sd. A row's own rounds alone decide which
of them make its p50 (``own_rounds``). The model and its fit: docs/methodology.md,
"Statistics"; its figures: benchmarks/README.md, "The noise model".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from collbench.stats.distributions import f_quantile, normal_quantile
from collbench.stats.calibration import (DISAGREE_LEVEL, INTERFERENCE_WIDTH, MIN_CLEAN_SD,
                                         MIN_LOG_SD,
                                         MIN_ROUNDS_TO_SET_ASIDE, MIN_ROWS_FOR_PRIOR, OWN_WIDTH,
                                         OWN_WIDTH_FEW, PRIOR_DF, STATE_LOG_SHIFT, STATE_SEEN_SHARE)


#: The shapes the trend is fitted over: w = 0 (flat), 1 (absolute jitter only) and between them
#: evenly in log(w / (1 − w)), from an absolute jitter felt only by rows 10⁴ times shorter than the
#: typical one to a relative one felt only by rows 10⁴ times longer.
_SHAPES = (0.0,) + tuple(float(1.0 / (1.0 + np.exp(-u)))
                         for u in np.linspace(-18.0, 18.0, 145)) + (1.0,)


def _blom(k: int, n: int) -> float:
    """Expected k-th smallest of n standard normal draws (Blom's approximation)."""
    return normal_quantile((k - 0.375) / (n + 0.25))


def expected_fastest(n: int) -> float:
    """Expected smallest of n standard normal draws (0 for one)."""
    return _blom(1, n) if n > 1 else 0.0


def positive(values: Sequence[float]) -> np.ndarray:
    """The finite, positive ones of ``values`` (missing and non-positive medians measure
    nothing)."""
    return np.asarray([v for v in values if v is not None and math.isfinite(v) and v > 0],
                      dtype=np.float64)


def row_time(medians: Sequence[float]) -> float:
    """The time a row's trend is read at: the median of its round medians, which interference
    hitting fewer than half of them cannot move (µs; nan without one)."""
    x = positive(medians)
    return float(np.median(x)) if len(x) else math.nan


def lower_half_scale(logs: np.ndarray) -> float:
    """The spread of a row's rounds from the fastest to the middle one, as a normal sd: what
    interference that hits fewer than half of the rounds cannot move. nan under 3 rounds."""
    n = len(logs)
    if n < 3:
        return math.nan
    x = np.sort(logs)
    half = (n + 1) // 2
    return float((x[half - 1] - x[0]) / (_blom(half, n) - _blom(1, n)))


def interference_window(clean_sd: float) -> float:
    """How far (log) above the fastest a round may lie and still count: INTERFERENCE_WIDTH clean
    spreads (nan without a clean spread)."""
    return INTERFERENCE_WIDTH * max(clean_sd, MIN_CLEAN_SD) if math.isfinite(clean_sd) else math.nan


def _within(medians: Sequence[float], window: float) -> np.ndarray:
    """Which of ``medians`` lie within ``window`` (log) of the fastest round that another round
    confirms (a boolean per median); nan window: every positive median."""
    x = np.asarray([v if v is not None and math.isfinite(v) and v > 0 else math.nan
                    for v in medians],
                   dtype=np.float64)
    ok = np.isfinite(x)
    if ok.sum() < 2 or not math.isfinite(window):
        return ok
    logs = np.log(np.where(ok, x, 1.0))
    ordered = np.sort(logs[ok])
    confirmed = np.nonzero(ordered[1:] - ordered[:-1] <= window)[0]
    anchor = ordered[confirmed[0]] if len(confirmed) else ordered[0]
    return ok & (logs <= anchor + window) & (logs >= anchor - window)


def clean_rounds(medians: Sequence[float], clean_sd: float) -> np.ndarray:
    """Which of ``medians`` count (a boolean per median): those within a window of
    INTERFERENCE_WIDTH × ``clean_sd`` above the fastest round that another round confirms —
    a lone round far faster than all others is a freak, not the machine at its best — and
    not below it by more than the window. Non-positive or missing medians never count;
    ``clean_sd`` nan: every positive median counts. The rule for whole runs' rounds judged in
    a file's units (``analysis.runs``); a row's own rounds: ``own_rounds``."""
    return _within(medians, interference_window(clean_sd))


def own_scale(logs: np.ndarray) -> float:
    """The spread of a row's rounds (logs) from the fastest to the one just past the middle, as a
    normal sd: what interference hitting fewer than half of the rounds cannot move. nan under
    MIN_ROUNDS_TO_SET_ASIDE rounds."""
    n = len(logs)
    if n < MIN_ROUNDS_TO_SET_ASIDE:
        return math.nan
    x = np.sort(logs)
    half = n // 2 + 1
    return float((x[half - 1] - x[0]) / (_blom(half, n) - _blom(1, n)))


def _own_width(logs: np.ndarray) -> float:
    scale = own_scale(logs)
    if not math.isfinite(scale):
        return math.nan
    return max((OWN_WIDTH + OWN_WIDTH_FEW / (len(logs) - 3)) * scale,
               interference_window(MIN_CLEAN_SD))


def own_window(medians: Sequence[float]) -> float:
    """How far (log) above its confirmed fastest round a row's round may lie and still count,
    from the row's own rounds and fixed constants alone (nan: every round counts). A lone round
    far faster than all the others would widen its own window; one further below the next than
    the others' window is judged by the others' spread."""
    logs = np.sort(np.log(positive(medians)))
    width = _own_width(logs)
    if len(logs) > MIN_ROUNDS_TO_SET_ASIDE and math.isfinite(width):
        rest = _own_width(logs[1:])
        if math.isfinite(rest) and logs[1] - logs[0] > rest:
            return rest
    return width


def own_rounds(medians: Sequence[float]) -> np.ndarray:
    """Which of a row's round medians count (a boolean per median), decided by its own rounds:
    those within ``own_window`` of the fastest round another confirms. Neither the other rows of
    its file nor a merge moves it, so neither moves the row's p50."""
    return _within(medians, own_window(medians))


def set_aside_above(medians: Sequence[float], keep: np.ndarray) -> np.ndarray:
    """The logs of the rounds of ``medians`` set aside above the slowest counted one (``keep``:
    ``clean_rounds``' answer), slowest first."""
    counted = positive([m for m, k in zip(medians, keep) if k])
    aside = positive([m for m, k in zip(medians, keep) if not k])
    if not len(counted):
        return np.zeros(0)
    return np.sort(np.log(aside[aside > counted.max()]))[::-1]


def state_level(above: np.ndarray, rounds: int) -> float:
    """The slowest level (log) that rounds set aside above the counted ones (``above``, slowest
    first) reached in at least STATE_SEEN_SHARE of a row's ``rounds``: the k-th slowest of them,
    k = ⌈share × rounds⌉; nan where fewer were set aside."""
    k = max(1, math.ceil(STATE_SEEN_SHARE * rounds - 1e-9))
    return float(above[k - 1]) if len(above) >= k else math.nan


@dataclass(frozen=True)
class Trend:
    """A stratum's variance of log medians against the row's time (the module's model)."""

    scale: float         # c: the variance at t_ref
    shape: float         # w: 0 flat, 1 absolute jitter only
    t_ref: float         # the stratum's typical time (µs): the geometric median of its rows'
    rows: int            # rows it was fitted on

    def variance(self, t: float) -> float:
        if not (math.isfinite(t) and t > 0):
            return math.nan
        return self.scale * ((1.0 - self.shape) + self.shape * (self.t_ref / t) ** 2)


def fit_trend(times, variances) -> Optional[Trend]:
    """The trend through rows' (time, variance) pairs: the shape with the least absolute deviation
    of the log variances from it (ties go to the flatter shape), scaled by the median of the
    variances over the shape. None without a pair. Variances are floored at MIN_LOG_SD²."""
    t = np.asarray(times, dtype=np.float64)
    v = np.maximum(np.asarray(variances, dtype=np.float64), MIN_LOG_SD ** 2)
    if not len(t):
        return None
    t_ref = float(np.exp(np.median(np.log(t))))
    log_v, relative = np.log(v), (t_ref / t) ** 2
    best_loss, best_shape = math.inf, 0.0
    for shape in _SHAPES:
        residual = log_v - np.log((1.0 - shape) + shape * relative)
        loss = float(np.abs(residual - np.median(residual)).sum())
        if loss < best_loss - 1e-9:
            best_loss, best_shape = loss, shape
    scale = float(np.median(v / ((1.0 - best_shape) + best_shape * relative)))
    return Trend(scale, best_shape, t_ref, len(t))


@dataclass(frozen=True)
class Trends:
    """A trend per stratum with MIN_ROWS_FOR_PRIOR rows, and the whole file's for the others."""

    by_stratum: dict
    pooled: Optional[Trend]

    def variance(self, t: float, stratum=None) -> float:
        """The variance the row's stratum expects at time ``t`` (nan without a trend)."""
        trend = self.by_stratum.get(stratum, self.pooled)
        return trend.variance(t) if trend is not None else math.nan


def fit_trends(strata, times, variances) -> Trends:
    """Per stratum, the trend of its rows' variances against their times; rows whose time or
    variance is not a finite number (nan) give nothing. A stratum of fewer than
    MIN_ROWS_FOR_PRIOR rows pools with the rest of the file; so does a file of too few rows, which
    then has no trend at all."""
    groups: dict = {}
    for stratum, t, v in zip(strata, times, variances):
        if math.isfinite(t) and t > 0 and math.isfinite(v) and v >= 0:
            groups.setdefault(stratum, []).append((t, v))
    every = [pair for pairs in groups.values() for pair in pairs]
    if len(every) < MIN_ROWS_FOR_PRIOR:
        return Trends({}, None)
    pooled = fit_trend(*zip(*every))
    own = {s: fit_trend(*zip(*pairs)) for s, pairs in groups.items()
           if len(pairs) >= MIN_ROWS_FOR_PRIOR}
    return Trends(own if len(groups) > 1 else {}, pooled)


@dataclass(frozen=True)
class SpreadPrior:
    """What a row's rounds are expected to spread by, from its stratum's trend at its time:
    ``window_sd`` decides which rounds are set aside as interference, ``log_sd`` (with weight
    ``df``) moderates the row's own spread and scales the spread between runs."""

    log_sd: float
    df: float
    rows: int
    window_sd: float = math.nan


@dataclass(frozen=True)
class NoiseModel:
    """A file's noise: the trend of its rows' clean spreads (the interference window) and of the
    variance of the rounds each row keeps (the prior), per stratum."""

    window: Trends
    spread: Trends
    rows: int                      # rows with two or more kept rounds the prior was fitted on
    df: float = PRIOR_DF

    def noise(self, medians: Sequence[float], stratum=None) -> SpreadPrior:
        """The prior of a row with these round medians in ``stratum``."""
        t = row_time(medians)
        window = self.window.variance(t, stratum)
        spread = self.spread.variance(t, stratum)
        return SpreadPrior(max(math.sqrt(spread), MIN_LOG_SD)
                           if math.isfinite(spread) else math.nan, self.df,
                           self.rows,
                           max(math.sqrt(window), MIN_CLEAN_SD)
                           if math.isfinite(window) else math.nan)


def noise_model(rows_medians, strata=None) -> Optional[NoiseModel]:
    """A file's noise model from its rows' round medians (``strata``: each row's stratum; by
    default one for all). The trend of the rows' lower halves' spread sets the interference
    window; the trend of the variance of the rounds each row keeps within its window is the
    prior for each row's own. None with fewer than MIN_ROWS_FOR_PRIOR rows of two or more rounds."""
    rows = [positive(m) for m in rows_medians]
    strata = list(strata) if strata is not None else [None] * len(rows)
    if sum(len(x) >= 2 for x in rows) < MIN_ROWS_FOR_PRIOR:
        return None
    times = [float(np.median(x)) if len(x) else math.nan for x in rows]
    logs = [np.log(x) for x in rows]
    window = fit_trends(strata, times, [lower_half_scale(g) ** 2 for g in logs])
    variances = []
    for g in logs:
        kept = g[own_rounds(np.exp(g))]
        variances.append(float(kept.var(ddof=1)) if len(kept) >= 2 else math.nan)
    spread = fit_trends(strata, times, variances)
    if spread.pooled is None:
        return None
    return NoiseModel(window, spread, sum(math.isfinite(v) for v in variances))


@dataclass(frozen=True)
class Moderated:
    variance: float
    df: float
    beyond: bool         # the row's own spread lies beyond its trend: it is not moderated


def moderated(variance: float, df: float, prior_variance: float,
              prior_df: float = PRIOR_DF) -> Moderated:
    """A row's variance moderated by its trend's, as limma does: (d·s² + d0·s0²) / (d + d0) with
    d + d0 degrees of freedom — unless the row's own lies beyond what the trend allows (the F test
    at DISAGREE_LEVEL): the trend does not describe that row, and its own rounds stand alone
    (robust limma's outliers, Phipson et al. 2016). No prior (nan): the row's own."""
    if not (math.isfinite(prior_variance) and prior_variance > 0) or df <= 0:
        return Moderated(variance, df, False)
    if variance / prior_variance > f_quantile(1.0 - DISAGREE_LEVEL, df, prior_df):
        return Moderated(variance, df, True)
    return Moderated((df * variance + prior_df * prior_variance) / (df + prior_df), df + prior_df,
                     False)


def machine_state(changes, units, strata) -> list:
    """Per row, how far a state of the machine may have moved it (log): the whole shift of its
    stratum (the median over its rows of the log change, each in units of the row's modelled
    spread ``units``) times the row's unit, up to STATE_LOG_SHIFT; with the stratum's median log
    change beside it, for the words. A state moves each row in proportion to its noise: on a GPU
    what moves the overhead-bound rows by 10% leaves the bandwidth-bound ones alone. Rows whose
    change is None do not count. A stratum of fewer than MIN_ROWS_FOR_PRIOR such rows reads the
    whole file's; a file of fewer has no sweep to tell a whole shift from a row's own: 0."""
    groups: dict = {}
    for i, (change, unit, stratum) in enumerate(zip(changes, units, strata)):
        if change is not None and math.isfinite(unit) and unit > 0:
            groups.setdefault(stratum, []).append(i)
    every = sorted(i for rows in groups.values() for i in rows)
    out = [(0.0, 0.0)] * len(changes)
    if len(every) < MIN_ROWS_FOR_PRIOR:
        return out

    def shift(rows):
        return (float(np.median([changes[i] / units[i] for i in rows])),
                float(np.median([changes[i] for i in rows])))

    pooled = shift(every)
    own = {s: shift(rows) for s, rows in groups.items() if len(rows) >= MIN_ROWS_FOR_PRIOR}
    for i, stratum in enumerate(strata):
        if not (math.isfinite(units[i]) and units[i] > 0):
            continue
        z, whole = own.get(stratum, pooled)
        out[i] = (min(abs(z) * units[i], STATE_LOG_SHIFT), whole)
    return out
