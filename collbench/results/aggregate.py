"""Rows from rounds: what one row reports once one or more rounds have measured it.

One round gives the median of its samples and its order-statistics CI. Several rounds give the
geometric mean of the counted round medians, the rounds set aside as interference chosen by
the row's own rounds alone so that no other row, merge or sweep moves it, and a run-to-run CI
moderated by the file's noise model once a run's rows are known (``moderate_rows``). Pure
functions: the runner uses them after every size, ``collbench merge`` and the calibration
script on rounds read back from files. The method: docs/methodology.md, "Statistics"; the
fields: docs/results-format.md, "Row fields".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from collbench.results.records import (KEY_FIELDS, RoundData, Row, RowIdentity, backend_label,
                                       bandwidths, busiest_bytes, windows_sent)
from collbench.stats.noise import NoiseModel, noise_model
from collbench.stats.rounds import summarize_rounds
from collbench.stats.samples import summarize


def _median(values) -> float:
    values = [v for v in (values or ()) if v is not None and math.isfinite(v)]
    return float(np.median(values)) if values else math.nan


def round_data(round_number: int, samples_us, rank_means_us=None, *, precision_reached: bool,
               check: str, calls_per_sample: int = 1, overall_us=(), compute_us=(), window: int = 0,
               short: bool = False) -> RoundData:
    """One round's record for one row, its median and within-round CI computed from the samples
    (and, for a call started and completed apart, the medians of its overlap samples); ``window``:
    the messages a slow pair sent per sample, where fewer than its row's; ``short``: the budget
    ran out before --min-iters samples."""
    samples = np.asarray(samples_us, dtype=np.float64)
    s = summarize(samples)
    means = None if rank_means_us is None else tuple(float(m) for m in rank_means_us)
    return RoundData(round_number, s.n, s.p50, s.ci_low, s.ci_high, bool(precision_reached), check,
                     int(calls_per_sample), tuple(float(v) for v in samples), means,
                     _median(overall_us), _median(compute_us), int(window), bool(short))


def overlap_pct(overall_us: float, compute_us: float, pure_us: float) -> float:
    """OSU's overlap: how much of a call (``pure_us`` alone) the compute between its start and its
    completion hid, 100 · max(0, 1 − (overall − compute) / pure); nan where one is missing."""
    if not all(math.isfinite(v) for v in (overall_us, compute_us, pure_us)) or pure_us <= 0:
        return math.nan
    return 100.0 * max(0.0, 1.0 - (overall_us - compute_us) / pure_us)


def worst_check(checks: Sequence[str]) -> str:
    """ok if every checked round was ok; the largest wrong:N otherwise; skipped if none was
    checked."""
    wrong = [int(c.split(":", 1)[1]) for c in checks if c.startswith("wrong:")]
    if wrong:
        return f"wrong:{max(wrong)}"
    return "ok" if any(c == "ok" for c in checks) else "skipped"


def _rank_avg(rounds: Sequence[RoundData]) -> float:
    per_round = []
    for r in rounds:
        means = [m for m in (r.rank_means_us or ()) if m is not None and math.isfinite(m)]
        if means:
            per_round.append(float(np.mean(means)))
    return float(np.mean(per_round)) if per_round else math.nan


def build_row(identity: RowIdentity, rounds: Sequence[RoundData]) -> Row:
    """The row for ``identity`` from its rounds (at least one), in round order, with the CI of
    its own rounds alone; ``moderate_rows`` then brings in the file's noise model."""
    rounds = sorted(rounds, key=lambda r: r.round)
    medians = [r.time_us_p50 for r in rounds]
    across = summarize_rounds(medians)
    pooled_parts = [np.asarray(r.samples_us, dtype=np.float64) for r in rounds if r.samples_us]
    pooled = summarize(np.concatenate(pooled_parts)) if pooled_parts else None
    if len(rounds) == 1:
        p50, lo, hi = rounds[0].time_us_p50, rounds[0].time_us_ci_low, rounds[0].time_us_ci_high
    else:
        p50, lo, hi = across.center, across.ci_low, across.ci_high
    algbw, busbw = bandwidths(busiest_bytes(identity), p50, identity.bus_factor)
    nan = math.nan
    set_aside = across.set_aside if len(rounds) > 1 else 0
    overall, compute = (_median([r.overall_us for r in rounds]),
                        _median([r.compute_us for r in rounds]))
    return Row(
        **{name: getattr(identity, name) for name in KEY_FIELDS},
        iterations=sum(r.iterations for r in rounds),
        time_us_p50=p50, time_us_ci_low=lo, time_us_ci_high=hi,
        time_us_mean=pooled.mean if pooled else nan, time_us_min=pooled.min if pooled else nan,
        time_us_p95=pooled.p95 if pooled else nan, time_us_p99=pooled.p99 if pooled else nan,
        time_us_max=pooled.max if pooled else nan, time_us_rank_avg=_rank_avg(rounds),
        algbw_gbps=algbw, busbw_gbps=busbw, check=worst_check([r.check for r in rounds]),
        precision_reached=all(r.precision_reached for r in rounds), rounds=len(rounds),
        run_to_run_cv=across.cv, rounds_disagree=across.disagree, time_us_round_p50s=tuple(medians),
        rounds_set_aside=set_aside, overall_us=overall, compute_us=compute,
        overlap_pct=overlap_pct(overall, compute, p50),
        window_used=min(windows_sent(rounds, identity.window)),
        rounds_short=sum(bool(r.short) for r in rounds))


def noise_stratum(row) -> tuple:
    """The stratum of a row's noise (``stats.noise``): its backend setup and its timing. Rows of
    one stratum meet the same machine through the same code path; a trend against their time
    covers what their sizes change."""
    return backend_label(row), row.timing


def moderate(row: Row, model: Optional[NoiseModel], bus_factor: Optional[float] = None) -> Row:
    """``row`` with its file's noise model brought in (unchanged without a model, or with a
    single round): the rounds it sets aside, the centre and run-to-run CI of those it keeps, and
    whether they spread beyond what the row's trend allows (‡). Cheap: only what comes from the
    round medians is recomputed."""
    if model is None or row.rounds < 2:
        return row
    across = summarize_rounds(row.time_us_round_p50s, prior=model, stratum=noise_stratum(row))
    if not math.isfinite(across.center):
        return row
    if bus_factor is None:
        bus_factor = row.busbw_gbps / row.algbw_gbps if row.algbw_gbps else 0.0
    algbw, busbw = bandwidths(busiest_bytes(row), across.center, bus_factor)
    return dataclasses.replace(row, time_us_p50=across.center, time_us_ci_low=across.ci_low,
                               time_us_ci_high=across.ci_high, run_to_run_cv=across.cv,
                               algbw_gbps=algbw, busbw_gbps=busbw,
                               rounds_set_aside=across.set_aside, rounds_disagree=across.disagree,
                               overlap_pct=overlap_pct(row.overall_us, row.compute_us,
                                                       across.center))


def file_noise(rows: Sequence[Row]) -> Optional[NoiseModel]:
    """The noise model of a file's rows, each in its stratum (None with too few rows of rounds)."""
    rows = list(rows)
    return noise_model([r.time_us_round_p50s for r in rows], [noise_stratum(r) for r in rows])


def moderate_rows(rows: Sequence[Row]) -> list:
    """``rows`` with each run-to-run CI moderated by the file's noise model."""
    model = file_noise(rows)
    return [moderate(row, model) for row in rows]
