"""Fault injection for collbench's own tests, read once per run from the environment.

COLLBENCH_TEST_CORRUPT=R          rank R corrupts three received elements before the check
COLLBENCH_TEST_HANG=R:COLL:BYTES  rank R sleeps forever before timing COLL at BYTES
COLLBENCH_TEST_PAUSE=SECONDS      every rank sleeps this long before each size (a slow sweep)

They exist so that the check, the timeout and the signal paths can be tested for real.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Hooks:
    corrupt_rank: Optional[int] = None
    hang: Optional[tuple] = None
    pause_s: float = 0.0

    def corrupts(self, rank: int) -> bool:
        return self.corrupt_rank == rank

    def hangs(self, rank: int, collective: str, size_bytes: int) -> bool:
        return self.hang == (rank, collective, size_bytes)


def from_env(env=os.environ) -> Hooks:
    corrupt = env.get("COLLBENCH_TEST_CORRUPT")
    hang = env.get("COLLBENCH_TEST_HANG")
    hang_key = None
    if hang:
        rank, coll, size = hang.split(":")
        hang_key = (int(rank), coll, int(size))
    return Hooks(int(corrupt) if corrupt else None, hang_key, float(env.get("COLLBENCH_TEST_PAUSE", "0")))
