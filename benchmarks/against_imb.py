"""collbench beside Intel MPI Benchmarks (IMB-MPI1) at matched MPI thread levels, interleaved.

IMB is not shipped here. Give a source tree of intel/mpi-benchmarks (IMB-MPI1 is built from it
with the mpicc and mpicxx of the MPI that mpi4py uses, with ``-DUSE_MPI_INIT_THREAD`` so that
it takes ``-thread_level``) or a built IMB-MPI1:

    python benchmarks/against_imb.py --imb ~/src/mpi-benchmarks          # about 15 minutes

Each repetition runs, at each level in turn: IMB-MPI1 Allreduce Bcast Alltoall, then collbench
allreduce, bcast and alltoall (latency and throughput timings), then a bare mpi4py loop of
8-byte Allreduce calls (IMB's loop in Python: what mpi4py's call costs apart from collbench).
Sizes follow each tool's meaning: IMB's Alltoall #bytes is what a rank sends to each other rank,
collbench's alltoall size what it sends in all (nccl-tests), so IMB's B is collbench's 2B on 2
ranks. IMB's figure is t_max (the slowest rank's mean time per call); a repetition's IMB run is
taken at its fastest over the repetitions, collbench's at its median.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
COLLECTIVES = (("allreduce", "Allreduce", 1), ("bcast", "Bcast", 1), ("alltoall", "Alltoall", 2))
SIZES = "8-4M"
BARE = """
import sys, time, mpi4py
mpi4py.rc.thread_level = sys.argv[1]
from mpi4py import MPI
import numpy as np
c = MPI.COMM_WORLD; a = np.ones(2, np.float32); b = np.empty_like(a)
for i in range(21000):
    if i == 1000:
        c.Barrier(); t0 = time.perf_counter()
    c.Allreduce(a, b)
t = (time.perf_counter() - t0) / 20000 * 1e6
worst = c.reduce(t, op=MPI.MAX)
if c.Get_rank() == 0: print(worst)
"""


def build(source: Path, folder: Path) -> Path:
    """IMB-MPI1 built from ``source`` (a copy, in ``folder``) with this MPI's compilers."""
    tree = folder / "imb"
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git"))
    cmd = ["make", "IMB-MPI1", f"CC={BIN / 'mpicc'}", f"CXX={BIN / 'mpicxx'}", "CPPFLAGS=-DUSE_MPI_INIT_THREAD"]
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"building IMB-MPI1 failed:\n{proc.stderr[-2000:]}")
    return tree / "IMB-MPI1"


def imb(binary: Path, level: str) -> dict:
    """(collective, collbench size) -> t_max µs, from one IMB-MPI1 run at ``level``."""
    cmd = [str(BIN / "mpiexec"), "-n", "2", str(binary), "Allreduce", "Bcast", "Alltoall", "-npmin", "2",
           "-msglog", "2:22", "-thread_level", level]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True).stdout
    times, current = {}, None
    for line in out.splitlines():
        words = line.split()
        if line.startswith("# Benchmarking"):
            current = next((c for c, name, _ in COLLECTIVES if name == words[-1]), None)
        elif current and len(words) == 5 and words[0].isdigit() and int(words[0]) > 0:
            factor = next(f for c, _, f in COLLECTIVES if c == current)
            times[current, int(words[0]) * factor] = float(words[3])
    return times


def collbench(collective: str, level: str, folder: Path, args) -> dict:
    """(timing, size) -> median µs, from one collbench run at ``level``."""
    path = folder / f"cb-{collective}-{level}.json"
    cmd = [sys.executable, "-m", "collbench", collective, "-n", "2", "--sizes", SIZES, "--thread-level", level,
           "--timing", "latency,throughput", "--rounds", str(args.rounds), "--max-time", str(args.max_time), "-q",
           "--force", "-o", str(path)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    rows = json.loads(path.read_text())["rows"]
    return {(r["timing"], r["size_bytes"]): r["time_us_p50"] for r in rows}


def bare(level: str) -> float:
    out = subprocess.run([str(BIN / "mpiexec"), "-n", "2", sys.executable, "-c", BARE, level], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return float(out.split()[-1])


def report(runs: dict, levels: list) -> None:
    for level in levels:
        print(f"\nthread level {level}: collbench median / IMB fastest (t_max), latency and throughput timings")
        print(f"{'collective':11} {'size':>7} {'IMB µs':>9} {'cb lat µs':>10} {'ratio':>6} {'cb thr µs':>10} {'ratio':>6}"
              f" {'IMB med.':>9} {'lat/med.':>8}")
        big = {"latency": [], "throughput": []}
        even = []        # collbench's median latency against IMB's median run: like against like
        for collective, _, _ in COLLECTIVES:
            sizes = sorted({s for (c, s) in runs["imb", level][0] if c == collective})
            for size in sizes:
                fastest = min(r[collective, size] for r in runs["imb", level] if (collective, size) in r)
                cells = []
                for timing in ("latency", "throughput"):
                    mine = [r[timing, size] for r in runs[collective, level] if (timing, size) in r]
                    if not mine:
                        cells += ["-", "-"]
                        continue
                    median = statistics.median(mine)
                    cells += [f"{median:.2f}", f"{median / fastest:.2f}"]
                    if size >= 65536:
                        big[timing].append(median / fastest)
                middle = statistics.median(r[collective, size] for r in runs["imb", level] if (collective, size) in r)
                mine = [r["latency", size] for r in runs[collective, level] if ("latency", size) in r]
                like = statistics.median(mine) / middle if mine else math.nan
                if size >= 65536 and mine:
                    even.append(like)
                print(f"{collective:11} {size:7d} {fastest:9.2f} {cells[0]:>10} {cells[1]:>6} {cells[2]:>10} "
                      f"{cells[3]:>6} {middle:9.2f} {like:8.2f}")
        for timing, ratios in big.items():
            if ratios:
                print(f"  >= 64 KiB, {timing}: ratio {min(ratios):.2f}-{max(ratios):.2f} (median "
                      f"{statistics.median(ratios):.2f}) over {len(ratios)} rows")
        if even:
            print(f"  >= 64 KiB, latency against IMB's median run: ratio {min(even):.2f}-{max(even):.2f} (median "
                  f"{statistics.median(even):.2f})")
        gaps = runs["bare", level]
        print(f"  8-byte Allreduce: bare mpi4py loop {statistics.median(gaps):.2f} µs a call "
              f"({min(gaps):.2f}-{max(gaps):.2f}); IMB {min(r['allreduce', 8] for r in runs['imb', level]):.2f} µs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--imb", required=True, help="an intel/mpi-benchmarks source tree, or a built IMB-MPI1")
    parser.add_argument("--levels", default="single,multiple")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="collbench's rounds per run")
    parser.add_argument("--max-time", type=float, default=0.5, help="collbench's --max-time")
    parser.add_argument("--save", metavar="FILE", help="write every repetition's figures as JSON")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="collbench-imb-"))
    source = Path(args.imb).expanduser()
    binary = build(source, folder) if source.is_dir() else source
    levels = args.levels.split(",")
    runs: dict = {}
    for rep in range(args.reps):
        for level in levels if rep % 2 == 0 else reversed(levels):
            runs.setdefault(("imb", level), []).append(imb(binary, level))
            for collective, _, _ in COLLECTIVES:
                runs.setdefault((collective, level), []).append(collbench(collective, level, folder, args))
            runs.setdefault(("bare", level), []).append(bare(level))
            print(f"repetition {rep + 1}/{args.reps}, {level}: done", file=sys.stderr, flush=True)
    report(runs, levels)
    if args.save:
        Path(args.save).write_text(json.dumps([[list(k), [{" ".join(map(str, c)): t for c, t in r.items()}
                                                          if isinstance(r, dict) else r for r in v]]
                                               for k, v in runs.items()]))
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
