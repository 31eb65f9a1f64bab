#!/usr/bin/env python3
"""What does each collective really hold? Peak memory per rank against its buffers, for the
memory guard's figures (each collective module's ``memory_factors`` and
``collbench.measure.memory.WORK_BYTES``).

    python benchmarks/memory_factors.py                  # every case: 20-40 minutes on 2 cores
    python benchmarks/memory_factors.py --quick          # 2 ranks, 64M and 256M only
    python benchmarks/memory_factors.py --only gloo --collectives allreduce,reduce
    python benchmarks/memory_factors.py --from-log out.txt  # the summary again, from a saved output

For each backend (mpi, mpi-pickle, gloo), collective, rank count and size, ``collbench COLL
--sizes S`` runs under ``mpiexec`` (``_peak_rss.py``: each rank reports its VmHWM, the kernel's
high-water mark of its resident memory, at exit). A 1K allreduce of the same backend and rank
count gives each rank's base: interpreter, numpy, MPI, torch and communicators. The guard
estimates what a rank takes beyond its base as

    min(WORK_BYTES, WORK_PER_BYTE * nominal) + factor * nominal

where nominal is the send + receive bytes the collective's lengths say (whether or not the
backend allocates both) and the first term the fill and check temporaries, which stop growing
at a few chunks. The summary gives, per (backend, collective), the smallest factor that covers every
peak measured, for the root (rank 0) and the other ranks, and the smallest ratio of the
product's current estimate to a measured peak (1 or more: every peak covered).

Every run happens inside a memory cgroup of its own (limit ``--limit``, default 10G) under this
process's, so a case that needs more than expected is killed there, not on the whole machine;
without a writable cgroup the script refuses to run unless ``--no-cgroup`` is given. Exit 0.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from collbench.benchmarks.registry import ORDER, get_benchmark
from collbench.launch.self_launch.mpiexec import find_mpiexec, mpiexec_command
from collbench.measure import memory
from collbench.measure.sizes import parse_bytes

HERE = Path(__file__).resolve().parent
COLLECTIVES = tuple(name for name in ORDER if get_benchmark(name).moves_data)
LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
               "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "COLLBENCH_LAUNCHED",
               "TORCHELASTIC_RUN_ID")
# (backend, ranks) -> sizes; 1G only where 2 ranks stay well under the cgroup's limit
CASES = {("mpi", 2): ("64M", "256M", "1G"), ("gloo", 2): ("64M", "256M", "1G"),
         ("mpi-pickle", 2): ("64M", "256M", "512M"), ("mpi", 4): ("64M", "256M"),
         ("gloo", 4): ("64M", "256M"),
         ("mpi-pickle", 4): ("64M", "256M")}
QUICK = {k: tuple(s for s in v if s != "1G") for k, v in CASES.items() if k[1] == 2}


class Cgroup:
    """A memory cgroup under this process's own, removed on exit (v1 or v2)."""

    def __init__(self, limit: int) -> None:
        found = memory.memory_cgroup()
        if found is None:
            raise OSError("no memory cgroup found for this process")
        self.version, parent = found
        self.path = Path(parent) / f"collbench-factors-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        (self.path / ("memory.limit_in_bytes"
                      if self.version == 1 else "memory.max")).write_text(str(limit))

    def enter(self) -> None:
        """preexec_fn: move the child into the cgroup before it runs anything."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in (self.path / name).read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}


def peaks(mpiexec: str, n: int, args: list, workdir: str, cgroup) -> tuple:
    """(peak RSS per rank in bytes or None when killed, stderr, seconds)."""
    env = clean_env()
    cmd = mpiexec_command(mpiexec, n, [sys.executable, str(HERE / "_peak_rss.py"), *args], env)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900,
                          preexec_fn=cgroup.enter if cgroup else None)
    wall = time.perf_counter() - t0
    found = dict(re.findall(r"peak-rss: rank (\S+) vmhwm_kib (\d+)", proc.stderr))
    if proc.returncode != 0 or len(found) != n:
        return None, proc.stderr, wall
    return [int(found[str(r)]) * 1024 for r in range(n)], proc.stderr, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 ranks, 64M and 256M only")
    parser.add_argument("--only", default="", help="comma list of backends")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--limit", default="10G",
                        help="memory limit of the cgroup each run happens in")
    parser.add_argument("--no-cgroup", action="store_true",
                        help="run without a cgroup (at your own risk)")
    parser.add_argument("--from-log", metavar="FILE",
                        help="print the summary of a saved output; run nothing")
    opts = parser.parse_args()
    if opts.from_log:
        summary(from_log(opts.from_log))
        return 0
    cases = QUICK if opts.quick else CASES
    if opts.only:
        cases = {k: v for k, v in cases.items() if k[0] in opts.only.split(",")}
    collectives = opts.collectives.split(",")
    cgroup = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # run the clean-up below
    if not opts.no_cgroup:
        try:
            cgroup = Cgroup(parse_bytes(opts.limit))
        except OSError as exc:
            raise SystemExit(f"cannot make a memory cgroup ({exc}); --no-cgroup runs without one")
    mpiexec = find_mpiexec()
    common = ["--iters", "3", "--warmup", "1", "--rounds", "1", "--no-save", "-q"]
    rows = []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for (backend, n), sizes in cases.items():
                base, err, _ = peaks(mpiexec, n,
                                     ["allreduce", "--backend", backend, "--sizes", "1K", *common],
                                     workdir, cgroup)
                if base is None:
                    raise SystemExit(f"base run of {backend} on {n} ranks failed:\n{err[-2000:]}")
                print(f"{backend}, {n} ranks: base " + ", ".join(f"{b / 2**20:.0f}" for b in base)
                      + " MiB", flush=True)
                for name in collectives:
                    coll = get_benchmark(name)
                    for size in sizes:
                        before = cgroup.oom_kills() if cgroup else 0
                        got, err, wall = peaks(mpiexec, n,
                                               [name, "--backend", backend, "--sizes", size,
                                                *common],
                                               workdir, cgroup)
                        send, recv = coll.lengths(parse_bytes(size) // 4 // n * n, n)
                        nominal = (send + recv) * 4
                        if got is None:
                            killed = cgroup is not None and cgroup.oom_kills() > before
                            print(f"  {name:<14} {size:>5}: "
                                  + ("killed by the cgroup's OOM killer" if killed
                                  else "failed (or skipped by the guard): "
                                     + err.strip().splitlines()[-1][:300]),
                                  flush=True)
                            continue
                        rows.append((backend, n, name, nominal, got, base))
                        print(f"  {name:<14} {size:>5}: peak "
                              + ", ".join(f"{p / 2**20:.0f}" for p in got)
                              + f" MiB; nominal send+recv {nominal / 2**20:.0f} MiB ({wall:.0f} s)",
                              flush=True)
    finally:
        if cgroup:
            cgroup.remove()
    summary(rows)
    return 0


FAMILY = {"mpi": "buffer", "mpi-pickle": "object", "gloo": "tensor"}


def covering(rows: list, backend: str, name: str, roots: bool) -> float:
    """The smallest factor that covers every peak of the root (rank 0), or of the other ranks."""
    got = [(peak - base[rank] - min(memory.WORK_BYTES, memory.WORK_PER_BYTE * nominal)) / nominal
           for b, _, c, nominal, peaks_, base in rows if (b, c) == (backend, name)
           for rank, peak in enumerate(peaks_) if (rank == 0) == roots]
    return max(got) if got else float("nan")


def summary(rows: list) -> None:
    backends = [b for b in FAMILY if any(r[0] == b for r in rows)]
    print("\nfactor covering every peak (root / others), with the work "
          f"min({memory.WORK_BYTES / 2**20:.0f} MiB, {memory.WORK_PER_BYTE} x nominal):")
    print("| collective | " + " | ".join(backends) + " |")
    print("|---|" + "---|" * len(backends))
    for name in (c for c in COLLECTIVES if any(r[2] == c for r in rows)):
        cells = [f"{covering(rows, b, name, True):.2f} / {covering(rows, b, name, False):.2f}"
                 for b in backends]
        print(f"| {name} | " + " | ".join(cells) + " |")
    worst = None
    for backend, n, name, nominal, got, base in rows:
        rooted = get_benchmark(name).rooted
        for rank, peak in enumerate(got):
            need = base[rank] + memory.rank_need(name, FAMILY[backend], nominal,
                                                 rooted and rank == 0)
            if worst is None or need / peak < worst[0]:
                worst = (need / peak, backend, n, name, nominal, rank)
    if worst:
        print("\nproduct estimate (base + memory.rank_need) / peak, smallest over "
              f"{sum(len(r[4]) for r in rows)} rank peaks: {worst[0]:.2f} ({worst[1]}, {worst[2]} "
              f"ranks, {worst[3]}, nominal {worst[4] / 2**20:.0f} MiB, rank {worst[5]})")


def from_log(path: str) -> list:
    """The rows of a saved output of this script."""
    rows, base = [], None
    for line in Path(path).read_text().splitlines():
        head = re.match(r"(\S+), (\d+) ranks: base ([\d, ]+) MiB", line)
        if head:
            backend, n, base = (head.group(1), int(head.group(2)),
                                [int(x) * 2**20 for x in head.group(3).split(",")])
            continue
        case = re.match(r"\s+(\w+)\s+\S+: peak ([\d, ]+) MiB; nominal send\+recv (\d+) MiB", line)
        if case:
            rows.append((backend, n, case.group(1), int(case.group(3)) * 2**20,
                         [int(x) * 2**20 for x in case.group(2).split(",")], base))
    return rows

if __name__ == "__main__":
    sys.exit(main())
