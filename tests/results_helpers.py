"""Constructed results for the compare, report, plot and file tests: real Rows, real exporters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from collbench.results.aggregate import build_row, round_data
from collbench.results.records import (MPI_BACKENDS, USUAL_THREAD_LEVEL, Row, RowIdentity,
                                       RunResult, with_older)
from collbench.benchmarks.base import Roles
from collbench.benchmarks.registry import get_benchmark
from collbench.render.exporters import exporter_for
from collbench.results.paths import write_atomic


def metadata(**overrides) -> dict:
    meta = {"schema_version": 2, "timestamp": "2024-01-01T00:00:00+00:00",
            "collbench_version": "0.1.0",
            "world_size": 2, "hostnames": ["node1"], "rank_hosts": ["node1", "node1"],
            "ranks_per_node": 2,
            "settings": {"root": 0}, "cpu_model": "Test CPU",
            "versions": {"python": "3.11", "mpi_library": "MPICH Version: 4.2",
                                                  "mpi4py": "4.0"}}
    meta.update(overrides)
    return meta


def identity(*, collective="allreduce", backend="mpi", size_bytes=1024, world_size=2,
             dtype="float32", op="sum",
             timing="latency", pair=(0, 1), window=64, thread_level=None) -> RowIdentity:
    coll = get_benchmark(collective)
    per_rank = size_bytes if coll.size_is_per_rank else size_bytes // world_size
    level = (thread_level if thread_level is not None else USUAL_THREAD_LEVEL
             if backend in MPI_BACKENDS else "")
    return RowIdentity(**with_older(dict(thread_level=level,
        collective=collective, backend=backend, dtype=dtype, op=op if coll.reduces else "none",
        world_size=world_size, ranks_per_node=world_size, size_bytes=size_bytes,
                                         per_rank_bytes=per_rank,
        count=size_bytes // 4, timing=timing, bus_factor=coll.bus_factor(world_size),
        **coll.row_axes(Roles(pairs=(pair,), window=window)))))


def row_with_rounds(rounds_samples, *, check="ok", **key) -> tuple:
    """(Row, rounds) from one list of samples per round, built the way the runner builds them."""
    rounds = [round_data(i + 1, samples, [float(np.mean(samples))] * 2, precision_reached=True,
                         check=check)
              for i, samples in enumerate(rounds_samples)]
    return build_row(identity(**key), rounds), tuple(rounds)


def row_from_samples(samples, *, check="ok", **key) -> Row:
    """A one-round Row whose statistics are computed from ``samples``."""
    return row_with_rounds([samples], check=check, **key)[0]


def lognormal_samples(median_us: float, n: int, seed: int, spread: float = 0.05) -> list:
    rng = np.random.default_rng(seed)
    return [round(float(v), 4) for v in median_us * rng.lognormal(0.0, spread, n)]


def run_of(series: dict, *, meta=None, seed: int = 0, n: int = 40, scale=1.0, rounds: int = 5,
           launch_sd: float = 0.01) -> RunResult:
    """A run with one row per ((collective, backend, size), base median µs), times multiplied by
    ``scale`` (a number, or a dict of factors by key, 1 for the others); each round shifts every
    row by one launch effect (log sd ``launch_sd``)."""
    rng = np.random.default_rng(seed + 10_000)
    effects = rng.normal(0.0, launch_sd, rounds)
    result = RunResult(metadata=meta or metadata(rounds=[{"round": r + 1, "load": {"busy": False}}
                                                         for r in range(rounds)]))
    for i, ((collective, backend, size), median) in enumerate(series.items()):
        factor = scale.get((collective, backend, size), 1.0) if isinstance(scale, dict) else scale
        per_round = [lognormal_samples(median * factor * np.exp(effects[r]), n,
                                       seed * 1000 + i * 97 + r)
                     for r in range(rounds)]
        row, data = row_with_rounds(per_round, collective=collective, backend=backend,
                                    size_bytes=size)
        result.add(row, data)
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
           if k not in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
                        "COLLBENCH_LAUNCHED")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "collbench", *[str(a) for a in args]], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The stderr of a failed command, checked to be a single 'collbench: error:' line."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("collbench: error: "), proc.stderr
    return lines[0]


def wait_for_rows(path: Path, seconds: float = 90, pause: float = 0.2, job=None,
                  rows: int = 1) -> None:
    """Until the result file at ``path`` holds ``rows`` measured rows: the run is in its later
    sizes then. ``job``: the run's process, whose end stops the wait (its stderr then says
    why)."""
    import json
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (job is None or job.poll() is None):
        try:
            if len(json.loads(Path(path).read_text()).get("rows") or ()) >= rows:
                return
        except (OSError, ValueError, AttributeError):
            pass
        time.sleep(pause)
    said = f": {job.communicate(timeout=60)[1]}" if job is not None else ""
    raise AssertionError(f"the run never finished its first size{said}")
