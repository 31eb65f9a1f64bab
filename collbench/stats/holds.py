"""Rules that hold a row back from a verdict its change alone would get: a side whose ranks
lacked CPU on a busy machine (``starvation``), and a side whose own slow rounds ran where the
other side's all did (``state_reach``, weighed by ``state_evidence``). Pure functions on one
row's two sides (duck-typed: ``analysis.runs.SideRounds`` carries what they read)."""

from __future__ import annotations

import math

import numpy as np

from collbench.stats.calibration import (MIN_LIKENESS, STARVED_BUSY_SHARE, STARVED_DEFICIT,
                                         STATE_LIKENESS_WEIGHT, STATE_RUN_LIKENESS)


def starvation(sides: tuple) -> tuple:
    """(which side was starved, 0 or 1, and the log slowdown the CPU it lacked can explain) of
    one row's two sides (``SideRounds``); () where neither was. A side starved to a share f of
    the other side's CPU may run 1/f times slower on every rank, and a collective waits for each
    of the ranks on a host: up to f to the power of minus the ranks per host."""
    for i in (0, 1):
        mine, other = sides[i], sides[1 - i]
        if mine.busy_share < STARVED_BUSY_SHARE or not (math.isfinite(mine.cpu_share)
                                                        and math.isfinite(other.cpu_share)):
            continue
        f = min(1.0, mine.cpu_share / other.cpu_share)
        if 1.0 - f > STARVED_DEFICIT:
            return i, -max(mine.ranks_per_host, 1) * math.log(f)
    return ()


def _lbeta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def state_evidence(faster: list, slower: list) -> float:
    """How likely, were nothing changed, the slower side's runs would each lie in a state of the
    machine throughout (``slower``: its rounds per run), given how often the faster side's runs
    were seen there (``faster``: per run, whether each round reached it). Each run's share of
    rounds in the state is drawn from one beta distribution: its mean from every round of the
    faster side, its spread between runs from the faster side's runs, moderated towards
    STATE_RUN_LIKENESS (one run alone cannot tell a state that comes and goes from one that holds
    whole runs). A small value is evidence of a change; a large one leaves the state as an
    explanation."""
    k, n, r = sum(map(sum, faster)), sum(map(len, faster)), len(faster)
    mean = (k + 0.5) / (n + 1.0)
    likeness = STATE_RUN_LIKENESS
    if r >= 2 and n > r:
        shares = [sum(run) / len(run) for run in faster]
        spread = float(np.var(shares, ddof=1))
        per_run = n / r
        found = (spread / (mean * (1.0 - mean)) - 1.0 / per_run) / (1.0 - 1.0 / per_run)
        found = min(max(found, MIN_LIKENESS), 0.99)
        likeness = ((STATE_RUN_LIKENESS * STATE_LIKENESS_WEIGHT + found * (r - 1))
                    / (STATE_LIKENESS_WEIGHT + r - 1))
    total = (1.0 - likeness) / likeness
    a, b = mean * total, (1.0 - mean) * total
    return math.exp(sum(_lbeta(a + m, b) - _lbeta(a, b) for m in slower if m > 0))


def state_reach(sides: tuple, alpha: float) -> tuple:
    """Per direction — (new slower, new faster) — whether a state of the machine can explain
    the change: (the faster side's rounds that ran as slow as the slower side's fastest counted
    round, within the row's interference window; the rounds of its runs looked at), or () where
    none did or where how often they did is itself evidence of a change (``state_evidence`` below
    ``alpha``). Noise only adds time, so the slower side's own time lies at or below its fastest
    round; a state of the machine that held the faster side there in some of its rounds may have
    held the slower side there in all of its own — but not if the faster side's runs visited it
    seldom and the slower side's stayed there throughout."""
    def reached(level: float, slower, faster) -> tuple:
        seen = [[r >= level for r in run] for run in faster.reach_runs if run]
        k = sum(map(sum, seen))
        if not math.isfinite(level) or k == 0:
            return ()
        if state_evidence(seen, [len(run) for run in slower.reach_runs]) < alpha:
            return ()
        # of the rounds looked at: a merged file's runs left out for a noisy period are not
        return k, sum(map(len, seen))
    base, new = sides
    return reached(new.fastest, new, base), reached(base.fastest, base, new)


def explained_by(starved: tuple) -> str:
    """The slowdown a starved side's lacking CPU can explain (``starvation``), as a factor."""
    factor = math.exp(min(starved[1], 700.0))
    return "over 100×" if factor > 100 else f"{factor:.2g}×"
