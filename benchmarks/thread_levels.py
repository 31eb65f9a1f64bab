"""Where the two-level slow states come from: MPI thread level, binding, and load, side by side.

Each job is one self-launched ``collbench all`` at both levels (``--thread-level
single,multiple``: every round a launch at each level, in turns), so that whatever the machine
does meets both levels alike. Jobs: quiet and beside two busy loops, each unbound and bound a
core a rank (``--bind``), and both ranks on one core (``taskset -c 0``). For every row and
level it prints how the round medians spread: the share of rounds more than ``--slow`` times
the row's fastest round (a slow state), the run cv, and the ratio of the levels' medians.

    python benchmarks/thread_levels.py                      # about 15 minutes on 2 cores
    python benchmarks/thread_levels.py --analyse DIR        # the files of an earlier collection

Run it alone on the machine: anything else running is part of what it measures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOBS = ("quiet-none", "quiet-core", "busy-none", "busy-core", "pinned-none")
#: the rows the thread-level issue named as two-level: (collective, sizes)
NAMED = (("allreduce", (128, 65536)), ("reduce", (32768, 262144, 1048576)),
         ("allgather", (32768, 262144, 1048576)), ("reduce_scatter", (32768, 262144, 1048576)))


def collect(folder: Path, args) -> None:
    for job in args.jobs.split(","):
        load, bind = job.split("-")
        path = folder / f"{job}.json"
        if path.exists():
            print(f"{path.name}: kept", flush=True)
            continue
        cmd = [sys.executable, "-m", "collbench", "all", "-n", "2", "--sizes", args.sizes,
               "--rounds",
               str(args.rounds), "--thread-level", "single,multiple", "--bind", bind, "-q", "-o",
               str(path)]
        if load == "pinned":
            cmd = ["taskset", "-c", "0"] + cmd
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(2 if load == "busy" else 0)]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        status = ("ok" if proc.returncode == 0
                  else f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        print(f"{path.name}: {time.monotonic() - start:.0f} s, {status}", flush=True)


def _rows(path: Path) -> dict:
    """(collective, size, level) -> the row's round medians."""
    doc = json.loads(path.read_text())
    return {(r["collective"], r["size_bytes"], r["thread_level"]): [d["time_us_p50"]
                                                                    for d in r["round_details"]]
            for r in doc["rows"] if r.get("thread_level") and r.get("round_details")}


def _slow_share(medians: list, slow: float) -> float:
    fastest = min(medians)
    return sum(m > slow * fastest for m in medians) / len(medians)


def _cv(medians: list) -> float:
    return (statistics.stdev(medians) / statistics.mean(medians)
            if len(medians) > 1 else float("nan"))


def _collected(folder: Path):
    """(job, its rows) for each job whose file is in ``folder``."""
    for job in JOBS:
        path = folder / f"{job}.json"
        if path.exists():
            yield job, _rows(path)


def analyse(folder: Path, slow: float) -> None:
    print(f"rows whose rounds sat in a slow state (a fifth of them or more above {slow:g}x the "
          "row's fastest)")
    print(f"{'job':12} {'level':9} {'rows':>5} {'two-level':>10} {'median cv':>10} "
          f"{'p50 single/multiple':>20}")
    for job, rows in _collected(folder):
        ratios = []
        for (coll, size, level), medians in rows.items():
            other = rows.get((coll, size, "multiple"))
            if level == "single" and other:
                ratios.append(statistics.median(medians) / statistics.median(other))
        for level in ("single", "multiple"):
            mine = [m for (c, s, lv), m in rows.items() if lv == level]
            two = sum(_slow_share(m, slow) >= 0.2 for m in mine)
            cv = statistics.median(_cv(m) for m in mine)
            ratio = (f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                     if ratios else "-")
            print(f"{job:12} {level:9} {len(mine):5d} {two:10d} {cv:10.1%} "
                  f"{ratio if level == 'single' else '':>20}")
    print()
    print("the rows named as two-level: share of rounds in a slow state, single / multiple")
    for job, rows in _collected(folder):
        cells = []
        for coll, sizes in NAMED:
            for size in sizes:
                a, b = rows.get((coll, size, "single")), rows.get((coll, size, "multiple"))
                if a and b:
                    cells.append(f"{coll[:9]} {size // 1024 or size}{'K' if size >= 1024 else 'B'} "
                                 f"{_slow_share(a, slow):.0%}/{_slow_share(b, slow):.0%}")
        print(f"{job}: " + ", ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="128,32K,64K,256K,1M")
    parser.add_argument("--rounds", type=int, default=10, help="rounds at each level")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--slow", type=float, default=1.4,
                        help="a round this many times its row's fastest is slow")
    parser.add_argument("--out", help="folder for the files [default: a new temporary folder]")
    parser.add_argument("--analyse", metavar="DIR",
                        help="only analyse the files collected earlier in DIR")
    args = parser.parse_args()
    if args.analyse:
        analyse(Path(args.analyse), args.slow)
        return 0
    folder = Path(args.out or tempfile.mkdtemp(prefix="collbench-levels-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"files in {folder}", flush=True)
    collect(folder, args)
    analyse(folder, args.slow)
    return 0


if __name__ == "__main__":
    sys.exit(main())
