"""How a v-collective spreads its bytes over the ranks (``--pattern``).

A pattern is a matrix of how many elements each rank sends each rank, scaled so that the
average rank sends the sweep's size: ``uniform``, ``spread:F`` (nccl-tests' distance-weighted
blend), ``zipf:S[:SEED]`` (a mixture-of-experts router's hot ranks) or ``matrix:FILE`` (a
traffic matrix of one's own, named by its content's digest). Rows name a pattern by its
canonical spelling, so that runs of one pattern match and runs of different seeds do not. The
definitions, the matrix file's format, the rounding to whole elements and the imbalance a row
records: docs/methodology.md, "Patterns (v-collectives)".
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

UNIFORM = "uniform"
KINDS = ("uniform", "spread:F", "zipf:S[:SEED]", "matrix:FILE")
#: the steepest Zipf exponent taken: beyond it the coldest ranks' shares underflow to nothing
MAX_ZIPF = 16.0
#: the most ranks a matrix file may describe (n² numbers: a million at this size), and the most
#: bytes read of one: memory stays bounded whatever the file is
MAX_MATRIX_RANKS = 1024
MAX_MATRIX_BYTES = 64 << 20
#: the most patterns one run measures side by side (``--pattern a,b,…``): each is a block of
#: every v-collective's sizes
MAX_PATTERNS = 16
#: the matrices read in this process, by their digest: a row's pattern names one; and the file
#: each was read from, for what is said about it
_MATRICES: dict = {}
_SOURCES: dict = {}


@dataclass(frozen=True)
class Pattern:
    kind: str                   # uniform, spread, zipf, matrix
    parameter: float = 0.0      # spread's F, zipf's S
    seed: int = 0               # zipf's shuffle
    digest: str = ""            # matrix: its content's (``_MATRICES``)

    @property
    def name(self) -> str:
        if self.kind == "spread":
            return f"spread:{self.parameter:g}"
        if self.kind == "zipf":
            return f"zipf:{self.parameter:g}:{self.seed}"
        if self.kind == "matrix":
            return f"matrix:{self.digest}"
        return UNIFORM

    def problem(self, n: int) -> str:
        """Why this pattern cannot spread a world (or group) of n ranks ("" when it can)."""
        if self.kind == "matrix" and len(_MATRICES[self.digest]) != n:
            size = len(_MATRICES[self.digest])
            return (f"--pattern matrix:{_SOURCES.get(self.digest, self.digest):.80} is a {size} x "
                    f"{size} matrix: it spreads {size} ranks, not {n}")
        return ""

    def weights(self, n: int) -> list:
        """``weights[i][j]``: rank i's share of its sends that go to rank j (each row adds up
        to 1)."""
        if self.kind == "spread" and n > 1:
            pairs = n * (n - 1) / 2
            return [[(1 - self.parameter) / n + self.parameter * ((j - i) % n) / pairs
                     for j in range(n)]
                    for i in range(n)]
        if self.kind == "zipf":
            places = list(range(n))
            random.Random(self.seed).shuffle(places)
            law = [1.0 / (places[j] + 1) ** self.parameter for j in range(n)]
            total = sum(law)
            return [[w / total for w in law] for _ in range(n)]
        # the average rank's row adds up to 1, each row in its own proportion
        if self.kind == "matrix":
            rows = _MATRICES[self.digest]
            grand = sum(map(sum, rows))
            return [[w * len(rows) / grand for w in row] for row in rows]
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
        if kind == "matrix" and rest:
            return Pattern("matrix", digest=rest if rest in _MATRICES else read_matrix(rest))
    except ValueError:
        pass
    raise ValueError(f"pattern {spelled!r:.60}: give uniform, spread:F (0 <= F <= 1), "
                     f"zipf:S[:SEED] (0 <= S <= {MAX_ZIPF:g}, SEED a whole number) or matrix:FILE")


def read_matrix(path: str) -> str:
    """Read the traffic matrix in the file ``path`` and keep it (``_MATRICES``); returns its
    digest. UsageError, in one line, where the file cannot be read or is not a square matrix of
    non-negative numbers, not all 0."""
    import hashlib
    import os
    import stat

    from collbench.errors import UsageError

    where = f"--pattern matrix:{path:.80}"
    try:
        # not blocking: a FIFO with no writer would hold the open forever
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise UsageError(f"{where}: not a regular file")
            data = handle.read(MAX_MATRIX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_MATRIX_BYTES:
        raise UsageError(f"{where}: over {MAX_MATRIX_BYTES >> 20} MiB, more than a matrix of "
                         f"{MAX_MATRIX_RANKS} ranks needs")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not text of numbers (ASCII)") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        cells = line.split("#", 1)[0].replace(",", " ").split()
        if not cells:
            continue
        if len(cells) > MAX_MATRIX_RANKS or len(rows) >= MAX_MATRIX_RANKS:
            raise UsageError(f"{where}: more than {MAX_MATRIX_RANKS} ranks")
        try:
            row = [float(cell) for cell in cells if _plain_number(cell)]
        except ValueError:
            row = []
        if len(row) != len(cells):
            raise UsageError(f"{where}: line {number} holds something other than plain numbers")
        if not all(math.isfinite(x) and x >= 0 for x in row):
            raise UsageError(f"{where}: line {number}: every entry must be a finite number, 0 or "
                             "more")
        rows.append(tuple(row))
    if not rows:
        raise UsageError(f"{where}: no numbers in it")
    if not sum(map(sum, rows)) > 0:
        raise UsageError(f"{where}: every entry is 0: nothing would move")
    if any(len(row) != len(rows) for row in rows):
        raise UsageError(f"{where}: {len(rows)} rows of "
                         f"{'/'.join(sorted({str(len(r)) for r in rows}))} entries: a traffic "
                         "matrix is n rows of n")
    digest = hashlib.sha256(repr(rows).encode()).hexdigest()[:12]
    _MATRICES[digest] = tuple(rows)
    _SOURCES.setdefault(digest, path)
    return digest


#: the most ranks whose matrix a result file keeps (n² numbers in its metadata), so that
#: ``report --per-rank`` can say each rank's bytes without the matrix file
MAX_KEPT_RANKS = 128


def kept(name: str) -> dict:
    """What a result file keeps of the pattern ``name``: {digest: rows} for a matrix of at most
    ``MAX_KEPT_RANKS`` ranks read in this process, else {}."""
    kind, _, digest = name.partition(":")
    rows = _MATRICES.get(digest) if kind == "matrix" else None
    return ({digest: [list(row) for row in rows]}
            if rows is not None and len(rows) <= MAX_KEPT_RANKS else {})


def take_back(matrices) -> None:
    """Know the matrices a result file kept (``kept``) again, each only where its rows are a
    square of finite non-negative numbers whose digest is its name: a file is not trusted."""
    import hashlib

    if not isinstance(matrices, dict):
        return
    for digest, rows in list(matrices.items())[:16]:
        if digest in _MATRICES or not isinstance(rows, list) or not 0 < len(rows) <= MAX_KEPT_RANKS:
            continue
        try:
            if not all(isinstance(row, list) and len(row) == len(rows) and all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                    and x >= 0 for x in row) for row in rows):
                continue
            # named as read_matrix names it
            matrix = [tuple(float(x) for x in row) for row in rows]
        except OverflowError:             # a whole number past what a float holds
            continue
        if (sum(map(sum, matrix)) > 0
                and hashlib.sha256(repr(matrix).encode()).hexdigest()[:12] == digest):
            _MATRICES[digest] = tuple(matrix)


def known(name: str) -> bool:
    """Whether this process can spread bytes by the pattern ``name`` (a matrix must have been
    read here, or taken back from a file)."""
    kind, _, rest = name.partition(":")
    if kind == "matrix":                  # by its digest alone: never a file of that name
        return rest in _MATRICES
    try:
        parse(name)
    except ValueError:
        return False
    return True


def shares(name: str, n: int) -> list:
    """``shares[i][j]``: the share of all the bytes that rank i sends rank j (they add up to 1)."""
    return [[w / n for w in row] for row in parse(name).weights(n)]


def _plain_number(cell: str) -> bool:
    """Digits with at most a point and an exponent: no signs of other scripts, no nan or inf
    words."""
    body = cell.lower()
    return bool(body) and all(c in "0123456789.e+-" for c in body)


def problem(name: str, n: int) -> str:
    """Why the pattern ``name`` (a canonical one) cannot spread n ranks ("" when it can)."""
    return parse(name).problem(n)


def _whole(exact: list, total: int) -> list:
    """Whole numbers adding up to ``total``, each ``exact`` rounded down and the largest
    remainders taking the rest."""
    out = [math.floor(x) for x in exact]
    for j in sorted(range(len(exact)), key=lambda j: out[j] - exact[j])[:total - sum(out)]:
        out[j] += 1
    return out


@lru_cache(maxsize=4)
def counts(name: str, n: int, elements: int) -> tuple:
    """``counts[i][j]``: the elements rank i sends rank j. Each row adds up to ``elements``
    (uniform, spread, zipf), or for a matrix to the row's share of ``n × elements``: the average
    rank sends ``elements``. n² numbers (about 37 MB at 1,024 ranks), so only the last few
    sizes' are kept: a block asks for its size's several times in a row."""
    weights = parse(name).weights(n)
    totals = _whole([elements * sum(shares) for shares in weights], elements * n)
    return tuple(tuple(_whole([total * share / sum(shares) for share in shares], total)
                       if total else [0] * n)
                 for shares, total in zip(weights, totals))


@lru_cache(maxsize=4)
def pieces(name: str, n: int, elements: int) -> tuple:
    """For the v-collectives of one piece per rank (allgatherv, gatherv, scatterv): rank j's
    piece, in proportion to what the pattern has rank j receive (its column), adding up to
    ``elements``: uniform and spread give equal pieces, zipf and a matrix the hot ranks larger."""
    weights = parse(name).weights(n)
    shares = [sum(row[j] for row in weights) for j in range(n)]
    total = sum(shares)
    exact = [elements * share / total for share in shares]
    out = [math.floor(x) for x in exact]
    for j in sorted(range(n), key=lambda j: out[j] - exact[j])[:elements - sum(out)]:
        out[j] += 1
    return tuple(out)


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
