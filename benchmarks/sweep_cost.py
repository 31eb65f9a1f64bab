"""Where a sweep's wall time goes: timed calls, fill and check, set-up, launches and the rest.

It runs one collbench command (by default ``collbench all -n 2 --backend gloo,mpi --sizes
1K-64M:x4``, the default five rounds), times it from outside, and reads back from the result
file what each round's record says it spent (``metadata.rounds[].spent_s``, rank 0's clock):

* timed    — ``harness.measure``: the first call, warm-up, the timed iterations, the stop rule;
* check    — writing the check pattern into the send buffers and checking every size's result;
* setup    — fresh communicators between rounds, allocating and releasing buffers, the memory
  guard's questions before large sizes;
* rest     — the rest of each round: output (tables, file rewrites), barriers between blocks;
* launch   — outside the rounds: starting the ranks (imports, MPI and torch initialisation,
  backends' set-up) for each self-launched round, and the launching process's own work.

    python benchmarks/sweep_cost.py                      # about 5 minutes on 2 cores
    python benchmarks/sweep_cost.py --rounds 1
    python benchmarks/sweep_cost.py -- allreduce -n 2 --backend mpi --sizes 1K-64M:x4

Run it alone on the machine: anything else running is part of what it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT = "all -n 2 --backend gloo,mpi --sizes 1K-64M:x4"
PHASES = ("timed", "check", "setup")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None,
                        help="--rounds for the command (default: its own)")
    parser.add_argument("command", nargs="*", help=f"the collbench command (default: {DEFAULT})")
    args = parser.parse_args()
    command = args.command or DEFAULT.split()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep.json"
        cmd = [sys.executable, "-m", "collbench", *command, "-q", "-o", str(out)]
        if args.rounds is not None:
            cmd += ["--rounds", str(args.rounds)]
        print("$ collbench " + " ".join(cmd[3:]), flush=True)
        started = time.monotonic()
        done = subprocess.run(cmd, env={**os.environ, "COLUMNS": "100"}, capture_output=True,
                              text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            print(done.stdout + done.stderr)
            print(f"collbench exited {done.returncode}")
            return 1
        metadata = json.loads(out.read_text())["metadata"]
    rounds = metadata.get("rounds", [])
    print(f"{len(rounds)} rounds, {wall:.1f} s in all (timed from outside)\n")
    header = f"{'round':>5} {'seconds':>8} " + " ".join(f"{p:>7}" for p in (*PHASES, "rest"))
    print(header)
    totals = dict.fromkeys((*PHASES, "rest"), 0.0)
    for record in rounds:
        spent = record.get("spent_s", {})
        parts = {p: float(spent.get(p, 0.0)) for p in PHASES}
        parts["rest"] = float(record["seconds"]) - sum(parts.values())
        for p, v in parts.items():
            totals[p] += v
        print(f"{record['round']:>5} {record['seconds']:>8.1f} "
              + " ".join(f"{parts[p]:>7.1f}" for p in totals))
    in_rounds = sum(float(r["seconds"]) for r in rounds)
    totals["launch"] = wall - in_rounds
    print("\nshare of the wall time:")
    for name, seconds in totals.items():
        print(f"  {name:<7} {seconds:7.1f} s  {seconds / wall:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
