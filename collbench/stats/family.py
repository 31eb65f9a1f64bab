"""Multiple comparisons: max-T over the rows of one comparison.

A sweep compares a hundred rows or more at once, so a 5% level per row would flag several
unchanged rows every time. This module controls the family-wise error rate with a step-down
max-T adjustment (Westfall & Young 1993, algorithm 2.8), the null distribution of the largest
|t| simulated from the fitted noise model: each row's own round spread plus one shared drift.
Unlike Holm or Bonferroni it does not treat rows that drift together as independent, so it
keeps the power a family of correlated rows allows. The method and why not Holm:
docs/compare.md, "Many rows: false alarms"; what step-down gained: benchmarks/README.md,
"Starved ranks and step-down max-T".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from collbench.stats.calibration import DRAWS

CHUNK = 2_000
#: At most this many values (draws × rows, float64) in one array of the simulation: the draws go
#: in chunks of CHUNK, fewer when the rows are many, so that its memory is bounded (a few arrays of
#: 32 MB) however many rows there are; up to 2,097 rows the chunks, and the answer, are the same.
CELLS = 1 << 22


def _chi2_ratio(rng, df: np.ndarray, n: int) -> np.ndarray:
    """(n, rows) draws of chi²(df)/df per row; 1 where df is infinite (a spread taken as known)."""
    out = np.ones((n, len(df)))
    finite = np.isfinite(df)
    if finite.any():
        d = df[finite]
        out[:, finite] = rng.chisquare(d, size=(n, len(d))) / d
    return out


@dataclass(frozen=True)
class MaxT:
    adjusted: list       # per row: its step-down adjusted p-value
    critical: float      # the |t| the largest over every row reaches with probability alpha: a row
                         # beyond it is significant whatever the others do (single-step)


def max_t_adjust(t_values, within_var, within_df, drift_var, drift_df: float, *, known_var=None,
                 alpha: float = 0.05, draws: int = DRAWS, seed: int = 0) -> MaxT:
    """Step-down max-T adjusted p-values for rows with statistics ``t_values``.

    Each row's estimate has variance ``within_var[r] + drift_var[r] + known_var[r]``: its
    rounds' spread, estimated with ``within_df[r]`` degrees of freedom; its share of the drift
    of whole runs, one term common to every row, estimated with ``drift_df`` (``inf``: taken as
    known); and a variance of its own taken as known (what a busy machine may add to a row).
    Under no change, a simulated comparison draws one drift and every row's rounds, estimates
    the variances as the real comparison did, and records, for each row in order of |t|, the
    largest |t| over that row and those below it. Seeded: the same inputs give the same answer.
    """
    t = np.abs(np.asarray(t_values, dtype=np.float64))
    m = len(t)
    if m == 0:
        return MaxT([], float("nan"))
    vw = np.asarray(within_var, dtype=np.float64)
    dfw = np.asarray(within_df, dtype=np.float64)
    vd = np.asarray(drift_var, dtype=np.float64)
    vk = np.zeros(m) if known_var is None else np.asarray(known_var, dtype=np.float64)
    order = np.argsort(-t, kind="stable")          # largest |t| first
    t, vw, dfw, vd, vk = t[order], vw[order], dfw[order], vd[order], vk[order]
    rng = np.random.default_rng(seed)
    sd_drift, sd_own = np.sqrt(vd), np.sqrt(vw + vk)
    exceed = np.zeros(m)
    maxima = []
    done = 0
    chunk = min(CHUNK, max(1, CELLS // m))
    while done < draws:
        n = min(chunk, draws - done)
        shared = rng.standard_normal((n, 1)) * sd_drift
        deviation = rng.standard_normal((n, m))          # in place from here: one (n, m) array each
        deviation *= sd_own
        deviation += shared
        np.abs(deviation, out=deviation)
        estimated = _chi2_ratio(rng, dfw, n)
        estimated *= vw
        estimated += vk
        drift_scale = (rng.chisquare(drift_df, size=(n, 1)) / drift_df
                       if np.isfinite(drift_df) else 1.0)
        estimated += vd * drift_scale
        np.sqrt(estimated, out=estimated)
        deviation /= estimated
        del estimated
        # the largest over each row and the rows below it: a running maximum from the last row
        np.maximum.accumulate(deviation[:, ::-1], axis=1, out=deviation[:, ::-1])
        maxima.append(deviation[:, 0].copy())
        np.greater_equal(deviation, t[None, :], out=deviation)    # reached: 1.0, else 0.0
        exceed += deviation.sum(axis=0)
        done += n
    critical = float(np.quantile(np.concatenate(maxima), 1.0 - alpha))
    stepped = np.maximum.accumulate(np.minimum(1.0, (exceed + 1) / (draws + 1)))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return MaxT([float(p) for p in adjusted], critical)
