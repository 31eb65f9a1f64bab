"""Run-to-run statistics: pure functions on the per-round medians of one row (no MPI).

A round is one measurement of the whole sweep; its median sees the launch-to-launch variation
that one launch's samples cannot. ``summarize_rounds`` gives a row's centre (the geometric
mean of its counted round medians), its 95% CI on their logs, moderated by the file's noise
model (``noise``), the coefficient of variation, and whether the rounds disagree. Whole runs of
one side are in ``runs``; the change between two sides in ``change``. The method:
docs/methodology.md, "Rounds" and "Statistics".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from collbench.stats.distributions import t_quantile
from collbench.stats.calibration import BETWEEN_RUNS_FACTOR, CONFIDENCE
from collbench.stats.noise import (NoiseModel, SpreadPrior, clean_rounds, moderated, own_rounds,
                                   positive, set_aside_above, state_level)

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
    center: float        # geometric mean of the counted round medians; the median itself for one
                         # round
    ci_low: float        # 95% CI of the centre from the spread of the rounds; nan under 2 rounds
    ci_high: float       # (up to the level a state of the machine held a fifth of the rounds at:
                         # noise.state_level)
    cv: float            # standard deviation / mean of the counted round medians; nan under 2
                         # rounds
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
        half = (t_quantile(0.5 + confidence / 2, prior.df) * prior.log_sd
                * math.sqrt(1.0 + BETWEEN_RUNS_FACTOR ** 2))
        return RoundsSummary(1, center, center * math.exp(-half),
                             _reaching(center * math.exp(half), state), nan, nan, False, set_aside)
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
    return RoundsSummary(n, center, float(np.exp(logs.mean() - half)),
                         _reaching(math.exp(top), state), cv, sd, bool(disagree), set_aside)


def _reaching(high: float, state: float) -> float:
    """A CI's upper end, raised to a state's level (log; nan: none) where that lies above it."""
    return float(max(high, math.exp(state))) if math.isfinite(state) else float(high)
