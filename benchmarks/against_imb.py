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
taken at its fastest over the repetitions, collbench's at its median. collbench's buffers are on
small pages (``--pages small``, its default), as IMB's ``malloc`` gets them where the kernel's
transparent huge pages are ``madvise``: before the pages were chosen, numpy gave the 4 MiB
buffers of this sweep huge pages, and bcast from 512 KiB read 0.59-0.85 of IMB at multiple.

A row whose launches fall into modes far apart (bcast of 512 KiB-2 MiB at single: one tool's
launches 55-554 µs, the other's 128-659 µs) has no ratio to speak of: which modes each tool's few
launches drew decides it. Such rows (a tool's launches spreading over MANY_MODED× or more) are
judged as distributions instead: the two tools' launches, each a sample, are not told apart by
an exact rank-sum test (p ≥ 0.05), and their ranges overlap. ``--analyse FILE`` reads a
``--save``d campaign again.

    python benchmarks/against_imb.py --analyse campaign.json
"""

from __future__ import annotations

import argparse
import itertools
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
    cmd = ["make", "IMB-MPI1", f"CC={BIN / 'mpicc'}", f"CXX={BIN / 'mpicxx'}",
           "CPPFLAGS=-DUSE_MPI_INIT_THREAD"]
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"building IMB-MPI1 failed:\n{proc.stderr[-2000:]}")
    return tree / "IMB-MPI1"


def imb(binary: Path, level: str) -> dict:
    """(collective, collbench size) -> t_max µs, from one IMB-MPI1 run at ``level``."""
    cmd = [str(BIN / "mpiexec"), "-n", "2", str(binary), "Allreduce", "Bcast", "Alltoall", "-npmin",
           "2",
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
    """(timing, size) -> median µs, and ("<timing>-mean", size) -> mean µs, from one collbench
    run at ``level``."""
    path = folder / f"cb-{collective}-{level}.json"
    cmd = [sys.executable, "-m", "collbench", collective, "-n", "2", "--sizes", SIZES,
           "--thread-level", level,
           "--timing", "latency,throughput", "--rounds", str(args.rounds), "--max-time",
           str(args.max_time), "-q",
           "--force", "-o", str(path)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    rows = json.loads(path.read_text())["rows"]
    times = {(r["timing"], r["size_bytes"]): r["time_us_p50"] for r in rows}
    times.update({(f"{r['timing']}-mean", r["size_bytes"]): r["time_us_mean"] for r in rows})
    return times


def bare(level: str) -> float:
    out = subprocess.run([str(BIN / "mpiexec"), "-n", "2", sys.executable, "-c", BARE, level],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    return float(out.split()[-1])


def report(runs: dict, levels: list) -> None:
    for level in levels:
        print(f"\nthread level {level}: collbench median / IMB fastest (t_max), latency and "
              "throughput timings")
        print(f"{'collective':11} {'size':>7} {'IMB µs':>9} {'cb lat µs':>10} {'ratio':>6} "
              f"{'cb thr µs':>10} {'ratio':>6} {'IMB med.':>9} {'lat/med.':>8}")
        big = {"latency": [], "throughput": []}
        even = []        # collbench's median latency against IMB's median run: like against like
        for collective, _, _ in COLLECTIVES:
            sizes = sorted({s for (c, s) in runs["imb", level][0] if c == collective})
            for size in sizes:
                fastest = min(r[collective, size] for r in runs["imb", level]
                              if (collective, size) in r)
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
                middle = statistics.median(r[collective, size] for r in runs["imb", level]
                                           if (collective, size) in r)
                mine = [r["latency", size] for r in runs[collective, level]
                        if ("latency", size) in r]
                like = statistics.median(mine) / middle if mine else math.nan
                if size >= 65536 and mine:
                    even.append(like)
                print(f"{collective:11} {size:7d} {fastest:9.2f} {cells[0]:>10} {cells[1]:>6} "
                      f"{cells[2]:>10} {cells[3]:>6} {middle:9.2f} {like:8.2f}")
        for timing, ratios in big.items():
            if ratios:
                print(f"  >= 64 KiB, {timing}: ratio {min(ratios):.2f}-{max(ratios):.2f} (median "
                      f"{statistics.median(ratios):.2f}) over {len(ratios)} rows")
        if even:
            print("  >= 64 KiB, latency against IMB's median run: ratio "
                  f"{min(even):.2f}-{max(even):.2f} (median {statistics.median(even):.2f})")
        gaps = runs["bare", level]
        print(f"  8-byte Allreduce: bare mpi4py loop {statistics.median(gaps):.2f} µs a call "
              f"({min(gaps):.2f}-{max(gaps):.2f}); IMB "
              f"{min(r['allreduce', 8] for r in runs['imb', level]):.2f} µs")


#: A row whose launches, in either tool, spread this far (slowest over fastest) is many-moded.
MANY_MODED = 2.0


def rank_sum_p(a: list, b: list) -> float:
    """Exact two-sided p of the rank-sum (Mann-Whitney) statistic: how often a split of the
    pooled values into groups of len(a) and len(b) lies as far from the middle as this one."""
    pooled = sorted(a + b)
    rank = {v: statistics.mean(i + 1 for i, w in enumerate(pooled) if w == v) for v in pooled}
    ranks = [rank[v] for v in pooled]
    observed = sum(rank[v] for v in a)
    middle = len(a) * (len(pooled) + 1) / 2
    splits = list(itertools.combinations(range(len(pooled)), len(a)))
    far = sum(abs(sum(ranks[i] for i in split) - middle) >= abs(observed - middle) - 1e-9
              for split in splits)
    return far / len(splits)


def distributions(runs: dict, levels: list) -> None:
    """Rows of 64 KiB and more whose launches are many-moded, judged as two samples of launches."""
    for level in levels:
        agree = total = 0
        print(f"\nthread level {level}: many-moded rows (a tool's launches spread {MANY_MODED:g}x "
              "or more), latency timing, launches as samples")
        for collective, _, _ in COLLECTIVES:
            sizes = sorted({s for (c, s) in runs["imb", level][0]
                            if c == collective and s >= 65536})
            for size in sizes:
                theirs = [r[collective, size] for r in runs["imb", level]
                          if (collective, size) in r]
                mine = [r["latency", size] for r in runs[collective, level]
                        if ("latency", size) in r]
                if not theirs or not mine or max(max(theirs) / min(theirs),
                                                 max(mine) / min(mine)) < MANY_MODED:
                    continue
                p = rank_sum_p(mine, theirs)
                overlap = min(mine) <= max(theirs) and min(theirs) <= max(mine)
                total += 1
                agree += p >= 0.05 and overlap
                print(f"  {collective:9} {size:8d}  IMB {min(theirs):7.1f}-{max(theirs):7.1f} µs   "
                      f"collbench {min(mine):7.1f}-{max(mine):7.1f} µs   rank-sum p {p:.2f}   "
                      f"{'one distribution' if p >= 0.05 and overlap else 'told apart'}")
        print(f"  {agree} of {total} many-moded rows: the two tools' launches are not told apart")
        steady, near = [], 0
        cost = call_cost(runs, level)
        for collective, _, _ in COLLECTIVES:
            for size in sorted({s for (c, s) in runs["imb", level][0]
                                if c == collective and s >= 65536}):
                theirs = [r[collective, size] for r in runs["imb", level]
                          if (collective, size) in r]
                mine = [r["latency", size] for r in runs[collective, level]
                        if ("latency", size) in r]
                if theirs and mine and max(max(theirs) / min(theirs),
                                           max(mine) / min(mine)) < MANY_MODED:
                    ratio = statistics.median(mine) / min(theirs)
                    steady.append(ratio)
                    near += ratio > 1.1 and statistics.median(mine) - 1.1 * min(theirs) <= cost
        if steady:
            within = sum(0.9 <= r <= 1.1 for r in steady)
            print(f"  the other {len(steady)} rows (steady launches in both): collbench's median / "
                  f"IMB's fastest {min(steady):.2f}-{max(steady):.2f} (median "
                  f"{statistics.median(steady):.2f}); within 0.9-1.1: {within}; {near} more above "
                  f"1.1 by no more than mpi4py's call cost ({cost:.2f} µs: the bare loop's 8-byte "
                  "call less IMB's)")


def call_cost(runs: dict, level: str) -> float:
    """What a call through mpi4py costs beyond IMB's C call at ``level``: the bare loop's 8-byte
    Allreduce less IMB's, medians over the repetitions (0 where either is missing)."""
    theirs = [r["allreduce", 8] for r in runs["imb", level] if ("allreduce", 8) in r]
    gaps = runs.get(("bare", level), [])
    return max(statistics.median(gaps) - statistics.median(theirs), 0.0) if theirs and gaps else 0.0


def like_for_like(runs: dict, levels: list) -> None:
    """IMB's figure is a mean: each call timed alone, a barrier between calls, the sum over the
    calls divided by their number, the slowest rank's taken (t_max). collbench's latency timing
    times calls the same way; its mean over the iterations, not its median, is the like figure.
    Launch against launch: the median over launches of each tool, and their fastest."""
    for level in levels:
        rows = []
        for collective, _, _ in COLLECTIVES:
            for size in sorted({s for (c, s) in runs["imb", level][0]
                                if c == collective and s >= 65536}):
                theirs = [r[collective, size] for r in runs["imb", level]
                          if (collective, size) in r]
                mine = [r["latency-mean", size] for r in runs[collective, level]
                        if ("latency-mean", size) in r]
                if theirs and mine:
                    rows.append((collective, size,
                                 statistics.median(mine) / statistics.median(theirs),
                                 min(mine) / min(theirs)))
        if not rows:
            print(f"\nthread level {level}: no collbench means in this campaign (saved before they "
                  "were)")
            continue
        print(f"\nthread level {level}: like for like, collbench's mean latency / IMB's t_max (>= "
              "64 KiB)")
        print(f"  {'collective':9} {'size':>8} {'median/median':>13} {'fastest/fastest':>15}")
        for collective, size, middle, fastest in rows:
            print(f"  {collective:9} {size:8d} {middle:13.2f} {fastest:15.2f}")
        for label, i in (("median launch / median launch", 2),
                         ("fastest launch / fastest launch", 3)):
            ratios = [row[i] for row in rows]
            print(f"  {label}: {min(ratios):.2f}-{max(ratios):.2f} (median "
                  f"{statistics.median(ratios):.2f}); within 0.9-1.1: "
                  f"{sum(0.9 <= r <= 1.1 for r in ratios)} of {len(ratios)}")


def _load(path: Path) -> dict:
    """A --save'd campaign, as main() holds it."""
    runs = {}
    for key, values in json.loads(path.read_text()):
        runs[tuple(key)] = [{(lambda a, b: (a, int(b)))(*k.split(" ")): t for k, t in v.items()}
                            if isinstance(v, dict) else v for v in values]
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--imb", help="an intel/mpi-benchmarks source tree, or a built IMB-MPI1")
    parser.add_argument("--analyse", metavar="FILE",
                        help="only analyse a campaign written earlier with --save")
    parser.add_argument("--levels", default="single,multiple")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="collbench's rounds per run")
    parser.add_argument("--max-time", type=float, default=0.5, help="collbench's --max-time")
    parser.add_argument("--save", metavar="FILE", help="write every repetition's figures as JSON")
    args = parser.parse_args()
    if args.analyse:
        runs = _load(Path(args.analyse))
        levels = [k[1] for k in runs if k[0] == "imb"]
        report(runs, levels)
        distributions(runs, levels)
        like_for_like(runs, levels)
        return 0
    if not args.imb:
        parser.error("--imb is required unless --analyse")
    folder = Path(tempfile.mkdtemp(prefix="collbench-imb-"))
    source = Path(args.imb).expanduser()
    binary = build(source, folder) if source.is_dir() else source
    levels = args.levels.split(",")
    runs: dict = {}
    for rep in range(args.reps):
        for level in levels if rep % 2 == 0 else reversed(levels):
            runs.setdefault(("imb", level), []).append(imb(binary, level))
            for collective, _, _ in COLLECTIVES:
                runs.setdefault((collective, level), []).append(
                    collbench(collective, level, folder, args))
            runs.setdefault(("bare", level), []).append(bare(level))
            print(f"repetition {rep + 1}/{args.reps}, {level}: done", file=sys.stderr, flush=True)
    report(runs, levels)
    distributions(runs, levels)
    like_for_like(runs, levels)
    if args.save:
        Path(args.save).write_text(json.dumps([[list(k),
                                                [{" ".join(map(str, c)): t for c, t in r.items()}
                                                          if isinstance(r, dict) else r for r in v]]
                                               for k, v in runs.items()]))
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
