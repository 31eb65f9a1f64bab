"""collbench's pingpong and bw beside OSU's osu_latency and osu_bw, interleaved, on one MPI.

OSU is not shipped here: build osu_latency and osu_bw from the OSU Micro-Benchmarks' mpi/pt2pt
with the mpicc of the MPI that mpi4py uses (the ``mpich`` wheel ships one), e.g.

    mpicc -O2 -o osu_latency osu_latency.c osu_pt2pt.c -I.

then ``python benchmarks/against_osu.py --osu DIR``. Each repetition runs OSU, then collbench,
for the latency at 8 bytes and the bandwidth at 1 MiB (window 64 both), and a bare mpi4py
pingpong loop (OSU's loop in Python), which says what mpi4py's calls cost apart from collbench.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
BARE = """
import time, numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD; r = c.Get_rank(); b = np.zeros(2, np.float32); o = 1 - r
for i in range(11000):
    if i == 1000: t0 = time.perf_counter()
    if r == 0: c.Send(b, o, 1); c.Recv(b, o, 1)
    else: c.Recv(b, o, 1); c.Send(b, o, 1)
if r == 0: print((time.perf_counter() - t0) / 10000 / 2 * 1e6)
"""


def osu(binary: Path, size: int) -> float:
    out = subprocess.run([str(BIN / "mpiexec"), "-n", "2", str(binary)], capture_output=True,
                         text=True, timeout=600, check=True).stdout
    return next(float(line.split()[1]) for line in out.splitlines()
                if line.split()[:1] == [str(size)])


def collbench(command: str, size: str, folder: Path) -> dict:
    out = folder / f"{command}.json"
    subprocess.run([str(BIN / "collbench"), command, "--sizes", size, "-o", str(out), "--force",
                    "-q"],
                   check=True, timeout=600)
    return json.loads(out.read_text())["rows"][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--osu", type=Path, required=True,
                        help="folder with osu_latency and osu_bw")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("rep  osu_latency 8B   pingpong 8B [95% CI]    bare mpi4py   osu_bw 1MiB   bw 1MiB")
        for rep in range(1, args.reps + 1):
            lat = osu(args.osu / "osu_latency", 8)
            pp = collbench("pingpong", "8", folder)
            bare = float(subprocess.run([str(BIN / "mpiexec"), "-n", "2", sys.executable, "-c",
                                         BARE],
                                        capture_output=True, text=True, timeout=600,
                                        check=True).stdout)
            bw = osu(args.osu / "osu_bw", 1 << 20)
            ours = collbench("bw", "1M", folder)
            print(f"{rep:>3}  {lat:>11.2f} µs   {pp['time_us_p50']:>5.2f} µs "
                  f"[{pp['time_us_ci_low']:.2f}–{pp['time_us_ci_high']:.2f}]   {bare:>7.2f} µs   "
                  f"{bw:>7.0f} MB/s  {ours['algbw_gbps'] * 1e3:>6.0f} MB/s",
                  flush=True)


if __name__ == "__main__":
    main()
