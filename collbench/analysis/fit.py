"""The latency–bandwidth (alpha–beta, Hockney) model t(n) = α + n/β, fitted to median times.

The fit minimises the *relative* residuals, sum(((α + n/β) - t) / t)², i.e. weighted least
squares with weights 1/t². Plain least squares would be decided by the largest sizes alone
(their times are thousands of times larger) and leave α, the small-message latency, to noise.
Both parameters are kept non-negative: when the unconstrained optimum has α < 0 or 1/β < 0,
the best fit on the boundary is taken (α = 0, or no size dependence at all: β = ∞).

Fit quality is the root-mean-square relative error of the model over the fitted points
(0.05: the model is off by about 5% on a typical size). A single α–β line cannot follow
protocol switches (eager to rendezvous, algorithm changes), and this number shows how much
that matters for a given sweep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from collbench.results.records import BY_SIZE, KEY_FIELDS


MIN_POINTS = 3
_NEGLIGIBLE = 1e-9
#: What one fit is over: the rows of one identity but for their size (a backend's buffers and
#: payload, a split's group and a pair each have their own)
GROUP_FIELDS = tuple(name for name in KEY_FIELDS if name not in BY_SIZE)


@dataclass(frozen=True)
class AlphaBetaFit:
    alpha_us: float          # start-up latency, µs
    beta_gbps: float         # asymptotic bandwidth size_bytes / time, GB/s (1e9 bytes/s); inf: no
                             # size term
    half_peak_bytes: float   # n½ = α·β: the size at which bandwidth reaches half of β
    rms_rel_error: float     # root-mean-square of (model - t) / t over the points
    points: int

    def predict_us(self, size_bytes) -> np.ndarray:
        # µs per byte
        inverse = 0.0 if math.isinf(self.beta_gbps) else 1.0 / (self.beta_gbps * 1e3)
        return self.alpha_us + np.asarray(size_bytes, dtype=np.float64) * inverse


def _solve(design: np.ndarray, columns: tuple) -> tuple:
    """Least squares of design[:, columns] @ x = 1; returns (full parameter vector, residual)."""
    x = np.zeros(design.shape[1])
    sub = design[:, list(columns)]
    solution = np.linalg.lstsq(sub, np.ones(len(design)), rcond=None)[0]
    x[list(columns)] = solution
    return x, float(np.sum((design @ x - 1.0) ** 2))


def fit_alpha_beta(size_bytes, time_us) -> Optional[AlphaBetaFit]:
    """Fit t = α + n/β to the points with n > 0 and finite t > 0; None with fewer than
    MIN_POINTS."""
    n = np.asarray(size_bytes, dtype=np.float64)
    t = np.asarray(time_us, dtype=np.float64)
    keep = (n > 0) & np.isfinite(t) & (t > 0)
    n, t = n[keep], t[keep]
    if len(np.unique(n)) < MIN_POINTS:
        return None
    # keeps the two columns of similar magnitude
    scale = float(n.max())
    # unknowns: α, scale/β  (relative residuals)
    design = np.column_stack([1.0 / t, (n / scale) / t])
    candidates = [_solve(design, (0, 1)), _solve(design, (0,)), _solve(design, (1,))]
    feasible = [(x, res) for x, res in candidates if x[0] >= 0 and x[1] >= 0]
    (alpha_us, slope), _ = min(feasible, key=lambda c: c[1])
    alpha_us, inverse_bw = float(alpha_us), float(slope) / scale      # µs, µs per byte
    largest = alpha_us + inverse_bw * scale
    if inverse_bw * scale <= _NEGLIGIBLE * largest:         # round-off, not a size term
        inverse_bw = 0.0
    if alpha_us <= _NEGLIGIBLE * largest:
        alpha_us = 0.0
    beta_bytes_per_us = math.inf if inverse_bw <= 0 else 1.0 / inverse_bw
    model = alpha_us + n * inverse_bw
    rms = float(np.sqrt(np.mean(((model - t) / t) ** 2)))
    half_peak = alpha_us * beta_bytes_per_us if alpha_us > 0 else 0.0
    return AlphaBetaFit(alpha_us, beta_bytes_per_us / 1e3, half_peak, rms, int(len(n)))


@dataclass(frozen=True)
class GroupFit:
    group: tuple              # values of GROUP_FIELDS
    fit: Optional[AlphaBetaFit]
    bus_factor: float         # busbw / algbw of the group's rows (nan when unknown)
    points: int               # rows with a size in the group

    def field(self, name: str):
        return self.group[GROUP_FIELDS.index(name)]

    @property
    def columns(self) -> dict:
        """The group's identity, by column name."""
        return dict(zip(GROUP_FIELDS, self.group))

    @property
    def bus_beta_gbps(self) -> float:
        return self.fit.beta_gbps * self.bus_factor if self.fit else math.nan


def _bus_factor(rows: list) -> float:
    for r in rows:
        if (r.algbw_gbps and math.isfinite(r.algbw_gbps) and r.algbw_gbps > 0
                and math.isfinite(r.busbw_gbps)):
            return r.busbw_gbps / r.algbw_gbps
    return math.nan


def fit_rows(rows) -> list:
    """One fit per row identity but the size (GROUP_FIELDS), over the rows' medians."""
    groups: dict = {}
    for r in rows:
        if r.size_bytes > 0:
            groups.setdefault(tuple(getattr(r, f) for f in GROUP_FIELDS), []).append(r)
    return [GroupFit(key,
                     fit_alpha_beta([r.size_bytes for r in group], [r.time_us_p50 for r in group]),
                     _bus_factor(group), len(group))
            for key, group in groups.items()]
