"""Compare two runs row by row: ratios, significance and verdicts, as frozen objects.

Nothing here prints; ``compare_render`` turns a ``Comparison`` into a table, markdown or JSON.
The rules are documented for users in docs/compare.md; in short:

* rows are matched on MATCH_FIELDS (collective, backend, dtype, op, world size, size, timing);
* ratio = new / baseline of the chosen metric;
* a row is "slower" or "faster" only when the change is beyond the threshold AND significant
  (Mann–Whitney on raw samples, Holm-adjusted over every row tested; without samples on both
  sides, non-overlapping 95% confidence intervals of the median); otherwise "same";
* the significance test is always on times, also for ``busbw_gbps`` (bandwidth is size / time).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Optional

import numpy as np

from collbench.comparability import comparability_warnings
from collbench.errors import UsageError
from collbench.results import Row, RunResult
from collbench.significance import ci_overlap, holm, mann_whitney

MATCH_FIELDS = ("collective", "backend", "dtype", "op", "world_size", "size_bytes", "timing")
METRICS = {"time_us_p50": True, "busbw_gbps": False}   # metric -> lower is better
VERDICTS = ("slower", "faster", "same", "new", "missing", "insufficient data")
DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05
MIN_SAMPLES = 5

TEST_MANN_WHITNEY = "mann-whitney"
TEST_CI_OVERLAP = "ci-overlap"
TEST_NONE = "none"


@dataclass(frozen=True)
class RowComparison:
    key: tuple                      # values of MATCH_FIELDS
    baseline: Optional[Row]
    new: Optional[Row]
    baseline_value: float           # the metric, nan when the row is absent
    new_value: float
    ratio: float                    # new / baseline; nan when either is absent or zero
    test: str                       # mann-whitney, ci-overlap or none
    p_value: Optional[float]        # Mann–Whitney, unadjusted
    p_adjusted: Optional[float]     # Holm-adjusted over all rows tested with Mann–Whitney
    significant: bool
    verdict: str                    # one of VERDICTS

    def field(self, name: str):
        return self.key[MATCH_FIELDS.index(name)]

    @property
    def change(self) -> float:
        """Relative change of the metric, (new - baseline) / baseline."""
        return self.ratio - 1.0


@dataclass(frozen=True)
class Comparison:
    baseline_name: str
    new_name: str
    metric: str
    threshold: float
    alpha: float
    rows: tuple
    warnings: tuple
    min_samples: int = MIN_SAMPLES

    @property
    def lower_is_better(self) -> bool:
        return METRICS[self.metric]

    @property
    def counts(self) -> dict:
        counted = Counter(r.verdict for r in self.rows)
        return {v: counted.get(v, 0) for v in VERDICTS}

    @property
    def regression(self) -> bool:
        return any(r.verdict == "slower" for r in self.rows)

    @property
    def tests_used(self) -> tuple:
        return tuple(t for t in (TEST_MANN_WHITNEY, TEST_CI_OVERLAP) if any(r.test == t for r in self.rows))

    @property
    def mann_whitney_count(self) -> int:
        return sum(1 for r in self.rows if r.test == TEST_MANN_WHITNEY)


def parse_threshold(text) -> float:
    """``5%`` or ``0.05`` -> 0.05. A bare number of 1 or more is ambiguous and refused."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"bad --threshold {raw!r}: expected a percentage like 5% or a fraction like 0.05") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"bad --threshold {raw!r}: must be a non-negative percentage like 5%")
    if value >= 1 and not raw.endswith("%"):
        raise UsageError(f"bad --threshold {raw!r}: ambiguous; write {raw}% or {value / 100:g}")
    return value


def match_key(row: Row) -> tuple:
    return tuple(getattr(row, name) for name in MATCH_FIELDS)


def _index(result: RunResult, name: str) -> dict:
    index = {}
    for i, row in enumerate(result.rows):
        key = match_key(row)
        if key in index:
            raise UsageError(f"{name}: two rows for {_describe(key)}; compare files of one run each")
        index[key] = i
    return index


def _describe(key: tuple) -> str:
    return " ".join(f"{name}={value}" for name, value in zip(MATCH_FIELDS, key))


def _samples(result: RunResult, i: int, name: str) -> Optional[np.ndarray]:
    raw = result.samples[i] if i < len(result.samples) else None
    if raw is None:
        return None
    try:
        values = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise UsageError(f"{name} row {i}: samples_us is not a list of numbers") from None
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise UsageError(f"{name} row {i}: samples_us is not a list of finite numbers")
    return values


def _metric(row: Optional[Row], metric: str) -> float:
    if row is None:
        return math.nan
    value = float(getattr(row, metric))
    return value if math.isfinite(value) and value > 0 else math.nan


def _has_ci(row: Row, min_samples: int) -> bool:
    return all(math.isfinite(v) for v in (row.time_us_ci_low, row.time_us_ci_high)) \
        and row.iterations >= min_samples


@dataclass(frozen=True)
class _Pending:
    """A matched row before multiple-comparison adjustment."""

    key: tuple
    base: Row
    new: Row
    ratio: float
    test: str
    p_value: Optional[float]
    ci_apart: bool
    new_is_larger: bool     # direction of the time difference the test saw


def _test(base: Row, new: Row, base_samples, new_samples, min_samples: int) -> tuple:
    """(test, p_value, ci_apart, new_is_larger) on times; test is none when data are too few."""
    if base_samples is not None and new_samples is not None:
        if len(base_samples) < min_samples or len(new_samples) < min_samples:
            return TEST_NONE, None, False, False
        result = mann_whitney(base_samples, new_samples)
        return TEST_MANN_WHITNEY, result.p_value, False, result.prob_y_greater > 0.5
    if not (_has_ci(base, min_samples) and _has_ci(new, min_samples)):
        return TEST_NONE, None, False, False
    apart = not ci_overlap(base.time_us_ci_low, base.time_us_ci_high, new.time_us_ci_low, new.time_us_ci_high)
    return TEST_CI_OVERLAP, None, apart, new.time_us_p50 > base.time_us_p50


def _verdict(p: _Pending, significant: bool, threshold: float, lower_is_better: bool) -> str:
    if p.test == TEST_NONE or not math.isfinite(p.ratio):
        return "insufficient data"
    beyond = abs(p.ratio - 1.0) > threshold
    metric_larger = p.ratio > 1.0
    # Bandwidth is size / time: a larger bandwidth must come with smaller times.
    agrees = metric_larger == p.new_is_larger if lower_is_better else metric_larger != p.new_is_larger
    if not (beyond and significant and agrees):
        return "same"
    return "slower" if metric_larger == lower_is_better else "faster"


def compare_runs(baseline: RunResult, new: RunResult, *, metric: str = "time_us_p50",
                 threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
                 baseline_name: str = "baseline", new_name: str = "new",
                 min_samples: int = MIN_SAMPLES) -> Comparison:
    """Match the rows of two runs and give each a verdict; UsageError when nothing matches."""
    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    base_index = _index(baseline, baseline_name)
    new_index = _index(new, new_name)
    common = [k for k in base_index if k in new_index]
    if not common:
        raise UsageError(f"{baseline_name} and {new_name} have no row in common "
                         f"({len(baseline.rows)} and {len(new.rows)} rows): incomparable")
    pending = []
    for key in common:
        b, n = base_index[key], new_index[key]
        base_row, new_row = baseline.rows[b], new.rows[n]
        test, p_value, apart, larger = _test(base_row, new_row, _samples(baseline, b, baseline_name),
                                             _samples(new, n, new_name), min_samples)
        ratio = _metric(new_row, metric) / _metric(base_row, metric)
        pending.append(_Pending(key, base_row, new_row, ratio, test, p_value, apart, larger))
    tested = [p for p in pending if p.test == TEST_MANN_WHITNEY]
    adjusted = dict(zip((p.key for p in tested), holm([p.p_value for p in tested])))
    by_key = {}
    for p in pending:
        p_adj = adjusted.get(p.key)
        significant = p.ci_apart if p.test == TEST_CI_OVERLAP else (p_adj is not None and p_adj < alpha)
        by_key[p.key] = RowComparison(p.key, p.base, p.new, _metric(p.base, metric), _metric(p.new, metric),
                                      p.ratio, p.test, p.p_value, p_adj, significant,
                                      _verdict(p, significant, threshold, METRICS[metric]))
    rows = []
    for key, i in base_index.items():
        row = baseline.rows[i]
        rows.append(by_key.get(key) or RowComparison(key, row, None, _metric(row, metric), math.nan, math.nan,
                                                     TEST_NONE, None, None, False, "missing"))
    for key, i in new_index.items():
        if key not in base_index:
            row = new.rows[i]
            rows.append(RowComparison(key, None, row, math.nan, _metric(row, metric), math.nan,
                                      TEST_NONE, None, None, False, "new"))
    warnings = comparability_warnings(baseline, new, baseline_name, new_name,
                                      [(r.baseline, r.new) for r in by_key.values()])
    return Comparison(baseline_name, new_name, metric, threshold, alpha, tuple(rows), tuple(warnings), min_samples)
