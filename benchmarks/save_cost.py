#!/usr/bin/env python3
"""Does keeping results safe cost the same for the 10,000th size as for the first?

    python benchmarks/save_cost.py            # both parts, about two minutes on 2 cores
    python benchmarks/save_cost.py --quick    # 3,000 sizes instead of 10,000

1. In one process, rank 0's output (collector, journal, result files) takes 10,000 measured
   sizes, one round each, 20 samples and 2 ranks per size, as a sweep with ``--iters 20``
   would hand them over, writing a JSON and a CSV file. Printed: the time each size costs the
   output, by thousands (mean and max). Up to 500 rows the files are rewritten after every
   size (so they are current for any ordinary sweep); beyond, the rewrites take at most 5% of
   the time. Flat means the last thousand's typical size costs about what the second's does.
2. End to end: ``collbench allreduce -n 2 --sizes 4-40000:+4 --iters 1 --warmup 0
   --rounds 1 -o r.json -o r.csv``, 10,000 sizes, every check done: wall time and the sizes in
   the file (before the journal, this run got through 7,995 sizes in 300 s).

Exit status 0 when the last thousand's median size costs within 2x the second thousand's, the
sizes after the first thousand (scheduled rewrites included) cost on average within 2x that,
and the end-to-end run finishes every size; 1 otherwise. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from collbench.results.aggregate import round_data
from collbench.results.records import RowIdentity, with_older
from collbench.results.collector import Collector
from collbench.live.files import EVERY_SIZE_ROWS
from collbench.live.output import Output, OutputSettings

LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
               "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "COLLBENCH_LAUNCHED",
               "TORCHELASTIC_RUN_ID")
FLAT_FACTOR = 2.0


def in_process(sizes: int, folder: Path) -> bool:
    settings = OutputSettings(outputs=(str(folder / "r.json"), str(folder / "r.csv")), quiet=True)
    collector = Collector({"collbench_version": "bench", "hostnames": ["h"], "settings": {}})
    out = Output(settings, collector, total_steps=0)
    rng = np.random.default_rng(1)
    costs = []
    for i in range(sizes):
        size = 4 * (i + 1)
        identity = RowIdentity(**with_older(dict(
            collective="allreduce", backend="mpi", dtype="float32", op="sum", world_size=2,
            ranks_per_node=2,
            size_bytes=size, per_rank_bytes=size, count=size // 4, timing="latency",
            bus_factor=1.0)))
        data = round_data(1, rng.lognormal(3, 0.2, 20), [20.0, 21.0], precision_reached=False,
                          check="ok")
        started = time.perf_counter()
        out.add(identity, (0, 0, size, 0), data)
        costs.append(time.perf_counter() - started)
    started = time.perf_counter()
    out.finish()
    final = time.perf_counter() - started
    print(f"1. output cost per size, {sizes} sizes (µs): thousand: median / mean / max")
    step = 1000
    medians = []
    for k in range(0, sizes, step):
        chunk = costs[k:k + step]
        medians.append(statistics.median(chunk))
        print(f"   {k + 1:>6}-{k + len(chunk):<6} {medians[-1] * 1e6:9.1f} / "
              f"{statistics.fmean(chunk) * 1e6:9.1f} / {max(chunk) * 1e6:9.1f}")
    rows = len(json.loads((folder / "r.json").read_text())["rows"])
    total = sum(costs)
    print(f"   total {total:.2f} s for {sizes} sizes, final write {final * 1e3:.0f} ms, "
          f"{rows} rows in r.json, r.json {os.path.getsize(folder / 'r.json') / 1e6:.1f} MB")
    # The first EVERY_SIZE_ROWS sizes rewrite the files every time (files current for any
    # ordinary sweep); from there on what a size costs must not grow with the sizes before it:
    # the typical (median) size of the last thousand against that of the second; and the
    # scheduled rewrites, which do grow, are paid for out of a bounded share: every size after
    # the first thousand, rewrites included (mean), against the second thousand's median.
    steady = medians[1] if len(medians) > 1 else medians[0]
    later = statistics.fmean(costs[step:]) if len(costs) > step else steady
    flat = (medians[-1] <= FLAT_FACTOR * max(steady, 1e-6)
            and later <= FLAT_FACTOR * max(steady, 1e-6))
    print(f"   median size, last thousand / second thousand: {medians[-1] / steady:.2f}; every "
          "size after the first thousand, rewrites included (mean) / second thousand's median: "
          f"{later / steady:.2f} (targets <= {FLAT_FACTOR:g}); every size rewrites the files up to "
          f"{EVERY_SIZE_ROWS} rows: at most {max(costs[:EVERY_SIZE_ROWS]) * 1e3:.1f} ms then")
    return flat and rows == sizes


def end_to_end(sizes: int, folder: Path) -> bool:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    cmd = [sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--sizes",
           f"4-{4 * sizes}:+4", "--iters", "1",
           "--warmup", "0", "--rounds", "1", "--no-shuffle", "--timeout", "0", "-q", "-o", "r.json",
           "-o", "r.csv"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=1800)
    wall = time.monotonic() - started
    try:
        rows = len(json.loads((folder / "r.json").read_text())["rows"])
    except (OSError, ValueError):
        rows = 0
    print(f"2. {' '.join(cmd[2:])}")
    print(f"   exit {proc.returncode}, {wall:.1f} s wall, {rows} of {sizes} sizes in r.json, "
          f"{wall / max(rows, 1) * 1e3:.1f} ms per size")
    if err.strip():
        print("   stderr: " + err.strip().splitlines()[-1])
    return proc.returncode == 0 and rows == sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-end-to-end", action="store_true")
    args = parser.parse_args()
    sizes = 3000 if args.quick else 10_000
    ok = True
    with tempfile.TemporaryDirectory(prefix="collbench-save-") as tmp:
        ok &= in_process(sizes, Path(tmp))
    if not args.skip_end_to_end:
        with tempfile.TemporaryDirectory(prefix="collbench-save-") as tmp:
            ok &= end_to_end(sizes, Path(tmp))
    print("targets met" if ok else "a target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
