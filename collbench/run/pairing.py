"""Which pairs of ranks ``collbench pairs`` measures, and which of them at the same time.

Every pair of the chosen ranks is measured once for latency, or once each way for bandwidth,
since a link can be slow one way only. Pairs that share no rank run at once by a tournament's
round-robin ("circle") schedule: 64 ranks take 63 steps instead of 2016. Concurrent pairs load
their hosts, so each row says how many ran with it (``pairs_at_once``); ``--serial`` runs one
pair per step and measures each link alone. docs/point-to-point.md, "Every pair: collbench
pairs".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from collbench.benchmarks.base import Roles

METRICS = {"latency": "pingpong", "bw": "bw"}      # --metric: the benchmark that measures a pair


@dataclass(frozen=True)
class Pairing:
    """``collbench pairs``: what a pair's figure is (``metric``), which pairs (``select``: every
    pair of ranks, those on different hosts, or one rank per host), one pair at a time or not."""

    metric: str = "latency"
    select: str = "all"
    serial: bool = False

    @property
    def benchmark(self) -> str:
        return METRICS[self.metric]

    @property
    def both_ways(self) -> bool:
        """Each pair is measured in both directions (a one-way figure: bandwidth)."""
        from collbench.benchmarks.registry import get_benchmark

        return get_benchmark(self.benchmark).directed

    def problem(self, hosts: list) -> Optional[str]:
        """Why these pairs cannot be chosen among ranks on ``hosts`` (rank r on hosts[r]), or
        None."""
        if self.select != "all" and len(set(hosts)) < 2:
            return (f"--{self.select} needs ranks on two hosts or more; all {len(hosts)} ranks are "
                    f"on {hosts[0] if hosts else 'one host'}")
        return None

    def ranks(self, hosts: list) -> list:
        """The ranks whose pairs are measured: all, or the first rank on each host."""
        if self.select != "per-host":
            return list(range(len(hosts)))
        first: dict = {}
        for rank, host in enumerate(hosts):
            first.setdefault(host, rank)
        return sorted(first.values())

    def steps(self, hosts: list) -> list:
        """The schedule: a list of steps, each a tuple of disjoint (first, second) pairs, the
        first rank starting each exchange (and sending, for bandwidth)."""
        steps = []
        for step in round_robin(self.ranks(hosts)):
            if self.select == "cross-host":
                step = tuple(p for p in step if hosts[p[0]] != hosts[p[1]])
            if step:
                steps.append(step)
        if self.both_ways:
            steps += [tuple((b, a) for a, b in step) for step in steps]
        if self.serial:
            steps = [(pair,) for step in steps for pair in step]
        return steps

    def layouts(self, hosts: list, roles: Roles) -> list:
        """One Roles per step, with ``roles``' window."""
        return [Roles(root=0, pairs=step, window=roles.window) for step in self.steps(hosts)]


def round_robin(ranks: list) -> list:
    """Every pair of ``ranks`` exactly once, in len(ranks) − 1 steps of disjoint pairs (the
    circle method: one rank stays, the others turn one place a step; with an odd count a gap
    takes a turn, and its partner waits that step). Pairs are (lower, higher)."""
    spots = list(ranks) + ([None] if len(ranks) % 2 else [])
    m = len(spots)
    steps = []
    for _ in range(m - 1):
        step = []
        for i in range(m // 2):
            a, b = spots[i], spots[m - 1 - i]
            if a is not None and b is not None:
                step.append((min(a, b), max(a, b)))
        steps.append(tuple(sorted(step)))
        spots = [spots[0], spots[-1]] + spots[1:-1]
    return steps
