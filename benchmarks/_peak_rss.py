"""Rank side of ``benchmarks/overhead.py``'s memory figure: ``collbench ARGS`` in this process,
then this rank's peak resident set size.

Run as ``mpiexec -n N python _peak_rss.py ARGS``: each process is one collbench rank exactly as
``collbench ARGS -n N`` would start it (the self-launch runs ``mpiexec -n N python -m collbench
ARGS``), so nothing in collbench changes. At exit each rank prints one line to stderr with
VmHWM, the kernel's high-water mark of its resident memory, read from /proc/self/status.
"""

from __future__ import annotations

import atexit
import os
import sys


def _peak_rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def _report() -> None:
    rank = next((os.environ[k] for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK",
                                         "PMIX_RANK") if k in os.environ), "?")
    print(f"peak-rss: rank {rank} vmhwm_kib {_peak_rss_kib()}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    atexit.register(_report)
    from collbench.cli.app import main

    main(sys.argv[1:])
