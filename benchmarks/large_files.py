#!/usr/bin/env python3
"""How much memory and time do the commands that read result files take on large honest files?

    python benchmarks/large_files.py                     # compare and report of 1,000 to 200,000
                                                           rows: about 30 minutes on 2 cores
    python benchmarks/large_files.py --quick             # 1,000 and 10,000 rows
    python benchmarks/large_files.py --rows 20000 --rounds 10 --samples 100 --commands
        compare,export
    python benchmarks/large_files.py --one-field 600   # report of a CSV that is one field of 600 MB

For each row count it writes two runs of one sweep (a baseline and a new run, seeds apart) as a
JSON and a CSV file: ``--rounds`` rounds of ``--samples`` samples per row, every row built as the
runner builds it (``aggregate.round_data``, ``aggregate.build_row``). To keep building large
files quick, a block of 500 rows is measured once and repeated at other sizes, so each row is
a real row and the rows of one file are distinct. Then each command (``compare`` and ``report``
by default; ``export``, ``merge`` on demand) runs on the files in a subprocess of its own, and
the script prints the file's size, its values (what ``loader.MAX_VALUES`` counts), the command's
exit code, wall time, peak resident memory (the kernel's ru_maxrss of that process, from
``os.wait4`` in a small process that starts it) and the first line it wrote on stderr.

Every command runs under a limit of ``--limit`` GiB of address space (default 8), so that one
that would take more ends there rather than on the machine. Exit 0 when every command exits 0,
1 or 2 with at most one line on stderr that is not a warning (no traceback, no kill); 1
otherwise. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from collbench.benchmarks.registry import get_benchmark
from collbench.results.aggregate import build_row, round_data
from collbench.render.exporters import exporter_for
from collbench.results.paths import write_atomic
from collbench.results.loader import MAX_VALUES
from collbench.results.records import RowIdentity, RunResult, with_older

BLOCK = 500


def _identity(size: int) -> RowIdentity:
    coll = get_benchmark("allreduce")
    return RowIdentity(**with_older(dict(
        collective="allreduce", backend="mpi", dtype="float32", op="sum", world_size=2,
        ranks_per_node=2,
        size_bytes=size, per_rank_bytes=size, count=size // 4, timing="latency",
        bus_factor=coll.bus_factor(2))))


def build_run(rows: int, rounds: int, samples: int, seed: int) -> RunResult:
    """A run of ``rows`` allreduce rows of sizes 4, 8, 12, ...: a block of BLOCK rows measured
    (lognormal samples, a launch effect per round), repeated at the following sizes."""
    rng = np.random.default_rng(seed)
    effects = rng.normal(0.0, 0.02, rounds)
    block = []
    for i in range(min(rows, BLOCK)):
        median = 3.0 + 4 * (i + 1) / 2e3
        data = tuple(round_data(r + 1,
                                median * np.exp(effects[r]) * rng.lognormal(0.0, 0.05, samples),
                                [median] * 2, precision_reached=True, check="ok")
                     for r in range(rounds))
        block.append((build_row(_identity(4 * (i + 1)), data), data))
    result = RunResult(metadata={"schema_version": 4, "collbench_version": "bench", "world_size": 2,
                                 "hostnames": ["h"], "run_id": f"large-{seed}",
                                 "settings": {"rounds": rounds, "round_kind": "launch"},
                                 "rounds": [{"round": r + 1, "run_id": f"large-{seed}",
                                             "load": {"busy": False}}
                                            for r in range(rounds)]})
    for i in range(rows):
        row, data = block[i % len(block)]
        size = 4 * (i + 1)
        result.add(dataclasses.replace(row, size_bytes=size, per_rank_bytes=size, count=size // 4),
                   data)
    return result


def values_in(path: Path) -> int:
    data = path.read_bytes()
    marks = (b",", b"\n") if path.suffix == ".csv" else (b",", b"[", b"{")
    return sum(data.count(m) for m in marks)


#: Runs the command in a process of its own and writes its exit code and peak RSS (KiB) to
#: argv[1]. The command is forked from this small process, not from the benchmark's, which holds
#: the runs it built: ru_maxrss counts what a child inherits until it execs.
_TRAMPOLINE = """
import os, resource, subprocess, sys
limit = int(float(sys.argv[2]) * 2 ** 30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
proc = subprocess.Popen(sys.argv[3:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def measure(args: list, cwd: Path, limit_gib: float) -> tuple:
    """(exit code or -signal, wall seconds, peak RSS MiB, stderr) of ``collbench ARGS``."""
    err, result = cwd / "stderr.txt", cwd / "measured.txt"
    started = time.monotonic()
    with err.open("w") as stderr:
        subprocess.run([sys.executable, "-c", _TRAMPOLINE, str(result), str(limit_gib),
                        sys.executable, "-m",
                        "collbench", *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr,
                       check=True)
    wall = time.monotonic() - started
    code, peak_kib = (int(x) for x in result.read_text().split())
    return code, wall, peak_kib / 1024, err.read_text()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000,10000,20000,100000,200000",
                        help="row counts, comma-separated")
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 rows")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=40, help="samples per round and row")
    parser.add_argument("--commands", default="compare,report",
                        help="of compare, report, export, merge")
    parser.add_argument("--formats", default="json,csv")
    parser.add_argument("--limit", type=float, default=8.0, help="address space per command, GiB")
    parser.add_argument("--one-field", type=float, default=0.0, metavar="MB",
                        help="instead: report of a CSV that is one field this large (a hostile "
                             "file)")
    opts = parser.parse_args()
    if opts.one_field:
        return one_field(opts.one_field, opts.limit)
    counts = [1000, 10000] if opts.quick else [int(n) for n in opts.rows.split(",")]
    print(f"collbench {' '.join(sys.argv[1:]) or '(defaults)'}: {opts.rounds} rounds of "
          f"{opts.samples} samples per row; loader.MAX_VALUES = {MAX_VALUES:,}")
    print(f"{'rows':>8} {'format':6} {'command':8} {'file MB':>8} {'values':>12} {'exit':>4} "
          f"{'wall s':>7} {'peak MiB':>9}  stderr")
    healthy = True
    with tempfile.TemporaryDirectory(prefix="collbench-large-") as folder:
        cwd = Path(folder)
        for rows in counts:
            built = time.monotonic()
            runs = [build_run(rows, opts.rounds, opts.samples, seed) for seed in (1, 2)]
            for fmt in opts.formats.split(","):
                paths = [cwd / f"{name}-{rows}.{fmt}" for name in ("base", "new")]
                for path, run in zip(paths, runs):
                    write_atomic(path, exporter_for(path).render(run))
                size_mb = paths[1].stat().st_size / 1e6
                values = values_in(paths[1])
                commands = {"compare": ["compare", *paths, "-f", "json"],
                            "report": ["report", paths[1]],
                            "export": ["export", paths[1], "--to", "bencher", "-o",
                                       cwd / "out.json", "--force"],
                            "merge": ["merge", *paths, "-o", cwd / "merged.json", "--force"]}
                for command in opts.commands.split(","):
                    if command == "merge" and fmt == "csv":
                        continue
                    code, wall, peak, err = measure([str(a) for a in commands[command]], cwd,
                                                    opts.limit)
                    lines = [line for line in err.splitlines() if line.strip()]
                    said = [line for line in lines if not line.startswith("collbench: warning:")]
                    ok = code in (0, 1, 2) and len(said) <= 1 and "Traceback" not in err
                    healthy &= ok
                    first = (said or lines or [""])[0][:110]
                    print(f"{rows:>8,} {fmt:6} {command:8} {size_mb:>8.1f} {values:>12,} {code:>4} "
                          f"{wall:>7.1f} {peak:>9,.0f}  "
                          f"{first}{'' if ok else '   <-- not one line'}", flush=True)
                for path in paths:
                    path.unlink()
            print(f"{'':>8} (built in {time.monotonic() - built:.0f} s)", flush=True)
    return 0 if healthy else 1


def one_field(megabytes: float, limit_gib: float) -> int:
    """report of a file that is one CSV field (no newline) of ``megabytes``: refused in one line,
    and how much memory that took."""
    with tempfile.TemporaryDirectory(prefix="collbench-large-") as folder:
        path = Path(folder) / "one-field.csv"
        with path.open("wb") as out:
            chunk = b"a" * (1 << 20)
            for _ in range(int(megabytes * 1e6) >> 20):
                out.write(chunk)
        code, wall, peak, err = measure(["report", str(path)], Path(folder), limit_gib)
    said = [line for line in err.splitlines() if line.strip()]
    print(f"one field of {path.stat().st_size / 1e6 if path.exists() else megabytes:.0f} MB: exit "
          f"{code}, {wall:.1f} s, peak {peak:,.0f} MiB; {said[:1]}")
    return 0 if code == 2 and len(said) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
