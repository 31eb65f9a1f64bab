"""What a cache-cold buffer costs (issue 45's target): ``--cache hot,cold`` measures both side by
side in each launch (blocks shuffled within each round), ``--reps`` launches per thread level;
per size, the median over launches of each row's p50, their ratio, and what the cold pool
spanned against the cache.

    python benchmarks/cache_cold.py                              # mpi allreduce 64K-16M, 2 ranks
    python benchmarks/cache_cold.py --levels single --reps 2 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def launch(folder: Path, name: str, args: list) -> dict:
    """(cache, size) -> row, and the file's metadata, of one collbench launch."""
    path = folder / f"{name}.json"
    cmd = [sys.executable, "-m", "collbench", *args, "-q", "--force", "-o", str(path)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    data = json.loads(path.read_text())
    return {(r["cache"], r["size_bytes"]): r for r in data["rows"]}, data["metadata"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collective", default="allreduce")
    parser.add_argument("--backend", default="mpi")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sizes", default="64K-16M")
    parser.add_argument("--levels", default="single,multiple",
                        help="MPI thread levels, one launch set each")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for level in args.levels.split(","):
            common = [args.collective, "-n", str(args.ranks), "--backend", args.backend, "--sizes",
                      args.sizes, "--rounds", str(args.rounds), "--cache", "hot,cold"]
            if args.backend.startswith("mpi"):
                common += ["--thread-level", level]
            runs = [launch(Path(folder), f"{level}-{rep}", common) for rep in range(args.reps)]
            cache = next(iter(runs[0][1]["settings"]["caches"].values()))
            print(f"\n{args.collective} on {args.backend}, {args.ranks} ranks, thread {level}: hot "
                  f"and cold in each launch, median of {args.reps} launches; the cache: "
                  f"{cache['bytes'] >> 20} MiB ({cache['from']})")
            print(f"{'size':>9} {'hot µs':>9} {'cold µs':>9} {'cold/hot':>9} {'launches':>16} "
                  f"{'span':>6}")
            for key in sorted(k for k in runs[0][0] if k[0] == "hot"):
                size = key[1]
                hot = [rows[("hot", size)]["time_us_p50"] for rows, _ in runs]
                cold = [rows[("cold", size)]["time_us_p50"] for rows, _ in runs]
                each = ",".join(f"{c / h:.2f}" for h, c in zip(hot, cold))
                span = runs[0][0][("cold", size)]["cache_span"]
                print(f"{size:9d} {statistics.median(hot):9.2f} {statistics.median(cold):9.2f} "
                      f"{statistics.median(cold) / statistics.median(hot):9.2f} {each:>16} "
                      f"{span:5.2f}x")
            if level and not args.backend.startswith("mpi"):
                break


if __name__ == "__main__":
    main()
