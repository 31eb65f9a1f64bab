"""The result record: one frozen row per (collective, backend, dtype, op, world size, size, timing).

Rows are the only thing exporters and renderers see. Times are in microseconds, bandwidths in
GB/s with GB = 1e9 bytes, computed from the median time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Optional

SCHEMA = "collbench.result"
SCHEMA_VERSION = 1

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
    iterations: int          # timed samples taken
    time_us_p50: float       # median over iterations of the per-iteration max over ranks
    time_us_ci_low: float    # 95% confidence interval of that median (order statistics)
    time_us_ci_high: float
    time_us_mean: float
    time_us_min: float
    time_us_p95: float
    time_us_p99: float
    time_us_max: float
    time_us_rank_avg: float  # average of the per-rank mean times (as OSU reports)
    algbw_gbps: float        # size_bytes / median time
    busbw_gbps: float        # algbw times the collective's bus factor
    check: str               # ok, wrong:N or skipped
    precision_reached: bool  # CI half-width reached --precision before --max-time ran out

    def key(self) -> tuple:
        return tuple(getattr(self, name) for name in KEY_FIELDS)

    def to_dict(self) -> dict:
        return asdict(self)


ROW_FIELDS = tuple(f.name for f in fields(Row))


def bandwidths(size_bytes: int, median_us: float, bus_factor: float) -> tuple[float, float]:
    if not size_bytes or not median_us or math.isnan(median_us):
        return 0.0, 0.0
    algbw = size_bytes / (median_us * 1e-6) / 1e9
    return algbw, algbw * bus_factor


@dataclass
class RunResult:
    """A run: metadata, rows in measurement order, and each row's raw samples (µs)."""

    metadata: dict
    rows: list = field(default_factory=list)
    samples: list = field(default_factory=list)      # per row: per-iteration max over ranks
    rank_means: list = field(default_factory=list)   # per row: each rank's mean time
    notes: list = field(default_factory=list)
    extras: list = field(default_factory=list)       # per row: JSON-only details (calls_per_sample)
    cache: dict = field(default_factory=dict, repr=False, compare=False)   # exporters' memo

    def add(self, row: Row, samples: Optional[list] = None, rank_means: Optional[list] = None,
            extra: Optional[dict] = None) -> None:
        self.rows.append(row)
        self.extras.append(dict(extra or {}))
        self.samples.append(list(samples) if samples is not None else None)
        self.rank_means.append(list(rank_means) if rank_means is not None else None)
