"""The result record: one frozen row per (collective, backend, dtype, op, world size, size, timing),
and what each round of the sweep measured for it.

Rows are what exporters and renderers see. Times are in microseconds, bandwidths in GB/s with
GB = 1e9 bytes, computed from ``time_us_p50``. With several rounds a row's figures combine
them (``collbench.results.aggregate``); each round's own median, CI and samples stay in ``RoundData``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional

SCHEMA = "collbench.result"
SCHEMA_VERSION = 3

KEY_FIELDS = ("collective", "backend", "dtype", "op", "world_size", "ranks_per_node",
              "size_bytes", "per_rank_bytes", "count", "timing")


@dataclass(frozen=True)
class Row:
    collective: str          # allreduce, bcast, ...
    backend: str             # mpi, mpi-pickle, gloo, nccl
    dtype: str               # element type, e.g. float32
    op: str                  # reduction op, "none" for collectives that do not reduce
    world_size: int          # ranks taking part
    ranks_per_node: int      # most ranks sharing one host
    size_bytes: int          # message size as nccl-tests defines it (README, Methodology, "Sizes")
    per_rank_bytes: int      # each rank's share: size_bytes for allreduce/bcast/reduce, else size_bytes/n
    count: int               # elements in size_bytes
    timing: str              # latency or throughput
    iterations: int          # timed samples taken, all rounds together
    time_us_p50: float       # one round: median of the samples; several: geometric mean of the round
                             # medians, rounds set aside as interference left out
    time_us_ci_low: float    # 95% CI of time_us_p50: one round, from its samples (order statistics);
    time_us_ci_high: float   # several, from the spread of the round medians (Student t on their logs)
    time_us_mean: float      # mean, min, p95, p99, max: over the samples of every round
    time_us_min: float
    time_us_p95: float
    time_us_p99: float
    time_us_max: float
    time_us_rank_avg: float  # average of the per-rank mean times (as OSU reports)
    algbw_gbps: float        # size_bytes / median time
    busbw_gbps: float        # algbw times the collective's bus factor
    check: str               # ok, wrong:N or skipped
    precision_reached: bool  # every round's CI reached --precision before its share of --max-time ran out
    rounds: int = 1          # rounds that measured this row
    run_to_run_cv: float = math.nan     # standard deviation / mean of the round medians (2+ rounds)
    rounds_disagree: bool = False       # round medians spread far beyond their within-round CIs
    time_us_round_p50s: tuple = ()      # each round's median, in round order
    rounds_set_aside: int = 0           # rounds whose median lay far above the fastest round's
                                        # (interference: runstats.clean_rounds), left out of p50 and its CI

    def key(self) -> tuple:
        return tuple(getattr(self, name) for name in KEY_FIELDS)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in ROW_FIELDS}     # shallow: asdict deep-copies


ROW_FIELDS = tuple(f.name for f in fields(Row))


def bandwidths(size_bytes: int, median_us: float, bus_factor: float) -> tuple[float, float]:
    if not size_bytes or not median_us or math.isnan(median_us):
        return 0.0, 0.0
    algbw = size_bytes / (median_us * 1e-6) / 1e9
    return algbw, algbw * bus_factor


@dataclass(frozen=True)
class RoundData:
    """What one round measured for one row (JSON only; CSV keeps the rows)."""

    round: int                    # 1-based round number, as in the metadata's ``rounds``
    iterations: int
    time_us_p50: float            # this round's median
    time_us_ci_low: float         # its within-round 95% CI (order statistics)
    time_us_ci_high: float
    precision_reached: bool
    check: str                    # ok, wrong:N or skipped
    calls_per_sample: int = 1     # calls timed together in one sample (throughput mode: k)
    samples_us: Optional[tuple] = None      # per iteration: max over ranks (latency) or loop / k
    rank_means_us: Optional[tuple] = None   # each rank's mean time


@dataclass
class RunResult:
    """A run: metadata, rows in file order, and per row what each round measured."""

    metadata: dict
    rows: list = field(default_factory=list)
    rounds: list = field(default_factory=list)       # per row: tuple of RoundData, in round order
    notes: list = field(default_factory=list)
    # memo of what is derived from the rows while they stay the same objects: exporters' JSON text,
    # ranks.row_views' views (the per-rank report's too)
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    def add(self, row: Row, rounds: tuple = ()) -> None:
        self.rows.append(row)
        self.rounds.append(tuple(rounds))

    def round_numbers(self, i: int) -> tuple:
        """The rounds row ``i`` was measured in (1, 2, ... when the file does not say)."""
        data = self.rounds[i] if i < len(self.rounds) else ()
        if data:
            return tuple(d.round for d in data)
        return tuple(range(1, self.rows[i].rounds + 1))


def root_rank(metadata: dict) -> int:
    """The run's root rank (``settings.root``); 0 where the file does not say."""
    settings = metadata.get("settings") if isinstance(metadata, dict) else None
    root = settings.get("root") if isinstance(settings, dict) else None
    return root if isinstance(root, int) and not isinstance(root, bool) and root >= 0 else 0


def tidy_library_version(text: str) -> str:
    """The MPI library's name and version from what it says of itself: "MPICH Version:      5.0.2"
    (and more lines) becomes "MPICH 5.0.2"; "Open MPI v5.0.7, package: ..." becomes "Open MPI v5.0.7"."""
    lines = str(text).strip().splitlines()
    first = " ".join(lines[0].split()) if lines else ""
    first = first.split(",")[0].strip()
    return first.replace(" Version: ", " ").replace(" version: ", " ")
