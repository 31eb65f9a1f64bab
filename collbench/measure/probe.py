"""Opt-in start-up probe, for ``benchmarks/overhead.py``.

With ``COLLBENCH_STARTUP_PROBE=1`` in the environment, each rank prints one line to stderr,
once, with the wall-clock time (``time.time()``) at which its first timed iteration starts;
the benchmark subtracts the moment it launched ``collbench`` to get the start-up time of a
real self-launched run. The variable is read once, at import; unset, the probe costs one
boolean test per size and nothing per iteration.
"""

from __future__ import annotations

import os
import sys
import time

_armed = os.environ.get("COLLBENCH_STARTUP_PROBE") == "1"


def first_timed_iteration(rank: int) -> None:
    global _armed
    if _armed:
        _armed = False
        print(f"collbench-probe: rank {rank} first timed iteration at {time.time():.6f}",
              file=sys.stderr, flush=True)
