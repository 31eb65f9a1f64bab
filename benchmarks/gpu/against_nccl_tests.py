"""collbench's graph timing beside nccl-tests' -G, per collective and size, on one GPU machine.

    python benchmarks/gpu/against_nccl_tests.py timings.json nccl-tests-G.txt [more nccl-tests
    output ...]

``timings.json``: a collbench result with ``--timing graph`` rows (and others); the text files:
what nccl-tests' ``*_perf -b 1K -e 1G -f 4 -g 1 -G 20`` printed. Prints, per collective measured
out of place by both (allgather, reduce_scatter, alltoall, gather, scatter: torch's all_reduce,
broadcast and reduce work in place, and at one rank do nothing), collbench's graph median over
nccl-tests' out-of-place time, against the targets of issue 32: within 1.3× at 1 MiB and below,
1.05× at 64 MiB and above. Exit 1 when a ratio misses its target.
"""

from __future__ import annotations

import json
import re
import sys

NAMES = {"all_gather_perf": "allgather", "reduce_scatter_perf": "reduce_scatter",
         "alltoall_perf": "alltoall",
         "gather_perf": "gather", "scatter_perf": "scatter"}
SMALL, LARGE = (1 << 20, 1.3), (64 << 20, 1.05)


def nccl_tests(paths: list) -> dict:
    """(collective, size) -> nccl-tests' out-of-place time in µs (the lowest where printed
    twice)."""
    out: dict = {}
    collective = None
    for path in paths:
        for line in open(path, encoding="utf-8", errors="replace"):
            started = re.search(r"Collective test starting: (\w+)", line)
            if started:
                collective = NAMES.get(started.group(1))
                continue
            fields = line.split()
            if collective and len(fields) > 6 and fields[0].isdigit():
                size, time_us = int(fields[0]), float(fields[5])
                key = (collective, size)
                out[key] = min(time_us, out.get(key, time_us))
    return out


def main(argv: list) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    rows = json.load(open(argv[0]))["rows"]
    theirs = nccl_tests(argv[1:])
    missed = 0
    print(f"{'collective':<15} {'size':>11} {'graph µs':>10} {'nccl-tests -G µs':>17} "
          f"{'ratio':>6}  target")
    for r in rows:
        key = (r["collective"], r["size_bytes"])
        if r["timing"] != "graph" or key not in theirs:
            continue
        ratio = r["time_us_p50"] / theirs[key]
        target = SMALL[1] if key[1] <= SMALL[0] else LARGE[1] if key[1] >= LARGE[0] else None
        ok = target is None or ratio <= target
        missed += not ok
        print(f"{key[0]:<15} {key[1]:>11} {r['time_us_p50']:>10.2f} {theirs[key]:>17.2f} "
              f"{ratio:>6.2f}  "
              + ("-" if target is None else f"≤{target} {'ok' if ok else 'MISSED'}"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
