"""What a rank spends waiting in collbench's own steps, before and after it sleeps there.

Two ranks under the ``mpiexec`` beside this Python: rank 1 arrives ``--late`` seconds after rank
0 at a gather, first MPI's blocking ``comm.gather`` (what ``MpiControl`` called), then
``MpiControl.gather`` (polls, then sleeps). Prints rank 0's CPU seconds over each wait, and what
a control step costs when both ranks arrive together (the mean of 2,000 bcasts each way).

    python benchmarks/waiting_cpu.py [--late 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rank(late: float) -> None:
    from collbench.backends._mpi import MpiControl

    control = MpiControl()
    comm = control.comm
    out = []
    for name, gather in (("blocking comm.gather", comm.gather),
                         ("MpiControl.gather", control.gather)):
        comm.Barrier()
        wall, cpu = time.perf_counter(), _cpu()
        if control.rank == 1:
            time.sleep(late)
        gather(0)
        out.append(f"{name}: rank 0 waited {time.perf_counter() - wall:.2f} s using "
                   f"{_cpu() - cpu:.2f} CPU-s")
    for name, bcast in (("blocking comm.bcast", comm.bcast), ("MpiControl.bcast", control.bcast)):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(2000):
            bcast(1)
        out.append(f"{name}, both ranks there: {(time.perf_counter() - start) / 2000 * 1e6:.1f} "
                   "µs a step")
    if control.rank == 0:
        print("\n".join(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--late", type=float, default=3.0)
    args = parser.parse_args()
    if "PMI_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        _rank(args.late)
        return
    from collbench.launch.self_launch.mpiexec import find_mpiexec

    mpiexec = find_mpiexec()
    if mpiexec is None:
        sys.exit("no mpiexec beside this Python")
    sys.exit(subprocess.run([mpiexec, "-n", "2", sys.executable, __file__,
                             "--late", str(args.late)]).returncode)


if __name__ == "__main__":
    main()
