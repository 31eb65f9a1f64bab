"""What the v-form costs, and what a hot rank costs (issue 45's targets).

1. ``alltoallv --pattern spread:0`` moves exactly alltoall's bytes through Alltoallv (MPI) or
   all_to_all_single with split sizes (gloo): launches of the two alternate, ``--reps`` of each,
   and the ratio of their medians per size says what the v-form costs.
2. ``zipf:S`` against ``uniform`` at 4 ranks, both in each launch (``--pattern uniform,zipf:S``):
   the busiest receiver's share beside the time, per size, and the ratio of times over it.

    python benchmarks/alltoallv_cost.py                       # about 5 minutes on 2 cores
    python benchmarks/alltoallv_cost.py --backends mpi --ranks 2 --reps 2
    python benchmarks/alltoallv_cost.py --hot-only --reps 3 --sizes 1K-4M:x4
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run(folder: Path, name: str, args: list) -> dict:
    """(size, backend) -> row of one collbench launch."""
    path = folder / f"{name}.json"
    cmd = [sys.executable, "-m", "collbench", *args, "-q", "--force", "-o", str(path)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    return {(r["size_bytes"], r["backend"]): r for r in json.loads(path.read_text())["rows"]}


def _level(args) -> list:
    """--thread-level, where an MPI backend is measured (gloo alone has none)."""
    return ["--thread-level", args.level] if "mpi" in args.backends else []


def v_form(folder: Path, args) -> None:
    for n in args.ranks:
        common = ["-n", str(n), "--backend", args.backends, "--sizes", args.sizes, "--rounds",
                  str(args.rounds), *_level(args)]
        plain, v = [], []
        for rep in range(args.reps):
            plain.append(run(folder, f"a2a-{n}-{rep}", ["alltoall", *common]))
            v.append(run(folder, f"a2av-{n}-{rep}",
                         ["alltoallv", "--pattern", "spread:0", *common]))
        print(f"\n{n} ranks, thread {args.level}: alltoallv spread:0 / alltoall, median of "
              f"{args.reps} launches each")
        print(f"{'size':>9} {'backend':8} {'alltoall µs':>12} {'alltoallv µs':>13} {'ratio':>6}")
        ratios = []
        for key in sorted(plain[0]):
            a = statistics.median(r[key]["time_us_p50"] for r in plain if key in r)
            b = statistics.median(r[key]["time_us_p50"] for r in v if key in r)
            ratios.append(b / a)
            print(f"{key[0]:9d} {key[1]:8} {a:12.2f} {b:13.2f} {b / a:6.2f}")
        print(f"  ratio {min(ratios):.2f}-{max(ratios):.2f} (median "
              f"{statistics.median(ratios):.2f}); within 0.95-1.10: "
              f"{sum(0.95 <= r <= 1.10 for r in ratios)} of {len(ratios)}")


def hot_ranks(folder: Path, args) -> None:
    """Both patterns in one launch (--pattern uniform,zipf:S: blocks shuffled within each round),
    ``--reps`` launches; the median over launches of each row's p50."""
    common = ["-n", "4", "--backend", args.backends, "--sizes", args.sizes, "--rounds",
              str(args.rounds), *_level(args)]
    launches = [run_all(folder, f"hot-{rep}",
                        ["alltoallv", "--pattern", f"uniform,{args.zipf}", *common])
                for rep in range(args.reps)]
    hot = next(p for p in launches[0] if p != "uniform")
    print(f"\n4 ranks, thread {args.level}: alltoallv {hot} against uniform, in one launch each, "
          f"median of {args.reps} launches")
    print(f"{'size':>9} {'backend':8} {'busiest':>8} {'uniform µs':>11} {'zipf µs':>9} "
          f"{'ratio':>6} {'/busiest':>9}")
    for key in sorted(launches[0]["uniform"]):
        even = statistics.median(launch["uniform"][key]["time_us_p50"] for launch in launches)
        skew = statistics.median(launch[hot][key]["time_us_p50"] for launch in launches)
        busiest = launches[0][hot][key]["imbalance_received"]
        print(f"{key[0]:9d} {key[1]:8} {busiest:7.2f}x {even:11.2f} {skew:9.2f} {skew / even:6.2f} "
              f"{skew / even / busiest:9.2f}")


def run_all(folder: Path, name: str, args: list) -> dict:
    """pattern -> (size, backend) -> row of one collbench launch."""
    path = folder / f"{name}.json"
    cmd = [sys.executable, "-m", "collbench", *args, "-q", "--force", "-o", str(path)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    out: dict = {}
    for r in json.loads(path.read_text())["rows"]:
        out.setdefault(r["pattern"], {})[r["size_bytes"], r["backend"]] = r
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="mpi,gloo")
    parser.add_argument("--ranks", type=lambda text: [int(n) for n in text.split(",")],
                        default=[2, 4])
    parser.add_argument("--sizes", default="1K-4M:x4")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--level", default="multiple",
                        help="MPI thread level: multiple, so that 4 ranks on 2 cores yield while "
                             "they wait")
    parser.add_argument("--zipf", default="zipf:1.2",
                        help="the hot pattern of part 2; none skips part 2")
    parser.add_argument("--hot-only", action="store_true", help="part 2 alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if not args.hot_only:
            v_form(Path(folder), args)
        if args.zipf != "none":
            hot_ranks(Path(folder), args)


if __name__ == "__main__":
    main()
