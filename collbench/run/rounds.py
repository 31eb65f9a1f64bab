"""Rounds: the whole sweep measured several times, each time afresh, in a shuffled order.

Self-launched runs make each round a launch of its own, told its number (``COLLBENCH_ROUND``)
and where the earlier rounds left their data (``COLLBENCH_STATE``); under a user's launcher
the rounds run inside the job on fresh communicators and buffers. Rank 0 shuffles each round's
collectives, backends and sizes from a generator seeded with (seed, round), block by block,
since a block's buffers are allocated once at its largest size. Why: docs/methodology.md,
"Rounds" and "Order". Other processes' CPU during a round: ``collbench.run.cpuload``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from collbench import environment

KIND_LAUNCH, KIND_IN_JOB = "launch", "in-job"
#: Rounds by default: enough for a run-to-run CI, cheap enough for a default sweep.
DEFAULT_ROUNDS = 5
MAX_ROUNDS = 1000


def ab_turn(env=os.environ) -> Optional[int]:
    value = env.get(environment.AB_TURN, "")
    return int(value) if value in ("0", "1") else None


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


@dataclass(frozen=True)
class Schedule:
    total_rounds: int          # rounds in the run
    own_rounds: tuple          # round numbers this process measures, in order
    kind: str                  # launch or in-job
    seed: int
    shuffle: bool
    state: Optional[Path] = None   # self-launched rounds: the folder the parent made
    levels: int = 1                # MPI thread levels measured: a self-launched row's rounds are
                                   # total / levels
    budget_rounds: int = 0         # the rounds a size's budget is shared among (0: total_rounds)

    @property
    def first(self) -> int:
        return self.own_rounds[0]

    @property
    def measures_last_round(self) -> bool:
        """Whether this process measures the run's last round (rounds are numbered from 1 to
        ``total_rounds``)."""
        return self.total_rounds in self.own_rounds

    def budget_share(self) -> float:
        """Each round gets this share of the per-size --max-time: of a row's rounds, which with
        several thread levels self-launched are a launch at each level (``spawn.level_order``)."""
        total = self.budget_rounds or self.total_rounds
        per_row = total // self.levels if self.kind == KIND_LAUNCH else total
        return 1.0 / max(1, per_row)


def schedule_from(rounds: int, seed: Optional[int], shuffle: bool, env=os.environ,
                  levels: int = 1) -> Schedule:
    """The schedule of this process: one round of a self-launched run (from the environment the
    parent set) or every round, in-job. ``seed`` None: the parent's, or one chosen now (rank 0's
    choice is broadcast by the caller)."""
    if env.get(environment.LAUNCHED) and env.get(environment.ROUND) and env.get(environment.STATE):
        total = int(env.get(environment.ROUNDS, rounds))
        budget = env.get(environment.BUDGET_ROUNDS, "")
        return Schedule(total, (int(env[environment.ROUND]),), KIND_LAUNCH,
                        int(env[environment.SEED]), shuffle,
                        Path(env[environment.STATE]), levels,
                        int(budget) if budget.isdigit() else 0)
    return Schedule(rounds, tuple(range(1, rounds + 1)), KIND_IN_JOB,
                    seed if seed is not None else new_seed(), shuffle)


@dataclass(frozen=True)
class Block:
    collective: str
    backend: str
    layout: int            # which of the sweep's layouts (a step of collbench pairs; else 0)
    points: tuple          # indices into the block's size points, in measurement order
    pattern: str = ""      # a v-collective's pattern (--pattern, one of a comma list); else ""
    kind: tuple = ("float32", "sum")   # the (dtype, op) it measures (op "none": no reduction)


def order(blocks: list, seed: int, round_number: int, shuffle: bool) -> list:
    """Measurement order for one round. ``blocks``: (collective, backend, layout, number of
    points, pattern, (dtype, op)) in plan order; the result: Blocks, collectives kept together
    so their tables can print as soon as they are done."""
    if not shuffle:
        return [Block(c, b, layout, tuple(range(k)), p, kind)
                for c, b, layout, k, p, kind in blocks]
    import numpy as np

    rng = np.random.default_rng([seed, round_number])
    collectives = list(dict.fromkeys(blk[0] for blk in blocks))
    out = []
    for ci in rng.permutation(len(collectives)):
        mine = [blk for blk in blocks if blk[0] == collectives[ci]]
        for bi in rng.permutation(len(mine)):
            c, b, layout, k, p, kind = mine[bi]
            out.append(Block(c, b, layout, tuple(int(i) for i in rng.permutation(k)), p, kind))
    return out
