"""How a v-collective spreads its bytes over the ranks (``--pattern``): a matrix of how many
elements each rank sends each rank, scaled so that a rank sends the sweep's size on average.

* ``uniform``: every rank sends every rank the same (alltoall's traffic);
* ``spread:F``: nccl-tests' distance-weighted blend (``NCCL_TESTS_ALLTOALLV_SPREAD``): rank i
  sends rank j in proportion to (1 - F) / n + F · d / (n (n - 1) / 2), d = (j - i) mod n; every
  rank sends and receives the same total, F = 0 is uniform;
* ``zipf:S[:SEED]``: a mixture-of-experts router: every rank sends its tokens to the ranks in
  proportion to a Zipf law of exponent S over their places in a seeded shuffle (SEED, 0 unless
  given), so that every rank sends the same and the hot ranks receive more.

A pattern is named in rows by its canonical spelling (``zipf:1.2:0``), so that two runs of one
pattern match and two of different seeds do not. Each row of the matrix adds up to exactly the
rank's elements (the largest remainders take the leftover elements), so a row's size is what
every rank sent; its imbalance is the busiest rank's elements over the mean, sent and received.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

UNIFORM = "uniform"
KINDS = ("uniform", "spread:F", "zipf:S[:SEED]")
#: the steepest Zipf exponent taken: beyond it the coldest ranks' shares underflow to nothing
MAX_ZIPF = 16.0


@dataclass(frozen=True)
class Pattern:
    kind: str                   # uniform, spread, zipf
    parameter: float = 0.0      # spread's F, zipf's S
    seed: int = 0               # zipf's shuffle

    @property
    def name(self) -> str:
        if self.kind == "spread":
            return f"spread:{self.parameter:g}"
        if self.kind == "zipf":
            return f"zipf:{self.parameter:g}:{self.seed}"
        return UNIFORM

    def weights(self, n: int) -> list:
        """``weights[i][j]``: rank i's share of its sends that go to rank j (each row adds up to 1)."""
        if self.kind == "spread" and n > 1:
            pairs = n * (n - 1) / 2
            return [[(1 - self.parameter) / n + self.parameter * ((j - i) % n) / pairs for j in range(n)]
                    for i in range(n)]
        if self.kind == "zipf":
            places = list(range(n))
            random.Random(self.seed).shuffle(places)
            law = [1.0 / (places[j] + 1) ** self.parameter for j in range(n)]
            total = sum(law)
            return [[w / total for w in law] for _ in range(n)]
        return [[1.0 / n] * n for _ in range(n)]


def parse(text: str) -> Pattern:
    """The pattern ``text`` names; ValueError with what is wrong and what is taken."""
    spelled = text.strip()
    kind, _, rest = spelled.partition(":")
    kind = kind.strip().lower()
    try:
        if kind == UNIFORM and not rest:
            return Pattern(UNIFORM)
        if kind == "spread":
            share = float(rest)
            if not 0.0 <= share <= 1.0:           # NaN fails both
                raise ValueError
            return Pattern("spread", share)
        if kind == "zipf":
            exponent, _, seed = rest.partition(":")
            s = float(exponent)
            if not 0.0 <= s <= MAX_ZIPF:
                raise ValueError
            number = int(seed) if seed else 0
            if not 0 <= number < 2 ** 31:
                raise ValueError
            return Pattern("zipf", s, number)
    except ValueError:
        pass
    raise ValueError(f"pattern {spelled!r:.60}: give uniform, spread:F (0 <= F <= 1) or zipf:S[:SEED] "
                     f"(0 <= S <= {MAX_ZIPF:g}, SEED a whole number)")


@lru_cache(maxsize=4)
def counts(name: str, n: int, elements: int) -> tuple:
    """``counts[i][j]``: the elements rank i sends rank j, each row adding up to ``elements``.
    n² numbers (about 37 MB at 1,024 ranks), so only the last few sizes' are kept: a block asks
    for its size's several times in a row."""
    matrix = []
    for shares in parse(name).weights(n):
        exact = [elements * share for share in shares]
        row = [math.floor(x) for x in exact]
        left = elements - sum(row)
        for j in sorted(range(n), key=lambda j: row[j] - exact[j])[:left]:
            row[j] += 1
        matrix.append(tuple(row))
    return tuple(matrix)


def sent(matrix: tuple, rank: int) -> tuple:
    return matrix[rank]


def received(matrix: tuple, rank: int) -> tuple:
    return tuple(row[rank] for row in matrix)


def displacements(lengths) -> tuple:
    """Where each piece starts when the pieces lie one after another."""
    out, at = [], 0
    for length in lengths:
        out.append(at)
        at += length
    return tuple(out)


def imbalance(matrix: tuple) -> tuple:
    """(sent, received): the busiest rank's elements over the mean, 1.0 where nothing moves."""
    n = len(matrix)
    sends = [sum(row) for row in matrix]
    receives = [sum(row[j] for row in matrix) for j in range(n)]
    mean = sum(sends) / n if n else 0
    if not mean:
        return 1.0, 1.0
    return max(sends) / mean, max(receives) / mean
