"""Constructed results for the compare, report, plot and file tests: real Rows, real exporters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from collbench.exporters import exporter_for, write_atomic
from collbench.results import Row, RunResult, bandwidths
from collbench.stats import summarize

BUS_FACTORS = {"allreduce": lambda n: 2 * (n - 1) / n, "bcast": lambda n: 1.0, "allgather": lambda n: (n - 1) / n,
               "barrier": lambda n: 0.0}


def metadata(**overrides) -> dict:
    meta = {"schema_version": 1, "timestamp": "2024-01-01T00:00:00+00:00", "collbench_version": "0.1.0",
            "world_size": 2, "hostnames": ["node1"], "rank_hosts": ["node1", "node1"], "ranks_per_node": 2,
            "cpu_model": "Test CPU", "versions": {"python": "3.11", "mpi_library": "MPICH Version: 4.2",
                                                  "mpi4py": "4.0"}}
    meta.update(overrides)
    return meta


def row_from_samples(samples, *, collective="allreduce", backend="mpi", size_bytes=1024, world_size=2,
                     dtype="float32", op="sum", timing="latency", check="ok") -> Row:
    """A Row whose statistics are computed from ``samples`` the way the harness computes them."""
    s = summarize(np.asarray(samples, dtype=np.float64))
    algbw, busbw = bandwidths(size_bytes, s.p50, BUS_FACTORS[collective](world_size))
    per_rank = size_bytes if collective in ("allreduce", "bcast") else size_bytes // world_size
    return Row(collective, backend, dtype, op if collective != "barrier" else "none", world_size, world_size,
               size_bytes, per_rank, size_bytes // 4, timing, s.n, s.p50, s.ci_low, s.ci_high, s.mean, s.min,
               s.p95, s.p99, s.max, s.mean, algbw, busbw, check, True)


def lognormal_samples(median_us: float, n: int, seed: int, spread: float = 0.05) -> list:
    rng = np.random.default_rng(seed)
    return [round(float(v), 4) for v in median_us * rng.lognormal(0.0, spread, n)]


def run_of(series: dict, *, meta=None, seed: int = 0, n: int = 40, scale: float = 1.0) -> RunResult:
    """A run with one row per ((collective, backend, size), base median µs); times multiplied by scale."""
    result = RunResult(metadata=meta or metadata())
    for i, ((collective, backend, size), median) in enumerate(series.items()):
        samples = lognormal_samples(median * scale, n, seed * 1000 + i)
        result.add(row_from_samples(samples, collective=collective, backend=backend, size_bytes=size),
                   samples, [float(np.mean(samples))] * 2)
    return result


def sweep(sizes=(8, 64, 1024, 8192, 65536), backends=("mpi",), alpha_us=3.0, beta_gbps=2.0) -> dict:
    """Medians following t = α + n/β for each backend."""
    return {("allreduce", b, s): alpha_us * (i + 1) + s / (beta_gbps * 1e3)
            for i, b in enumerate(backends) for s in sizes}


def write(result: RunResult, path) -> Path:
    path = Path(path)
    write_atomic(path, exporter_for(path).render(result))
    return path


def run_cli(args, cwd, *, timeout=120, env_extra=None) -> subprocess.CompletedProcess:
    """``python -m collbench ARGS`` in a real subprocess, as a user would run it."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE", "COLLBENCH_LAUNCHED")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "collbench", *[str(a) for a in args]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The stderr of a failed command, checked to be a single 'collbench: error:' line."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("collbench: error: "), proc.stderr
    return lines[0]
