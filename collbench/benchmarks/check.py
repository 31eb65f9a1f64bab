"""The result check, in one place: what each rank writes into its send buffer, what it must find
in its receive buffer after a call, the sentinel the receive side holds before the call, and
how the two are compared, worked where the buffers live.

The values are small integers whose reduction has a closed form, so an expected result never
needs every rank's data in one place and every reduction is exact at any scale and in any
order; a benchmark only says where each value ends up (``Benchmark.received``), and only the
count of wrong elements comes back to the host. The patterns and how they are checked:
docs/methodology.md, "Buffers", "The check's patterns, op by op" and "Check".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Optional

import numpy as np

from collbench.benchmarks.dtypes import PAIR_FIELDS, Dtype, dtype_of, pair_dtype
from collbench.benchmarks.ops import NO_OP, op_of

#: Largest integer a check value may reach: every integer up to it is exactly representable
#: (floats: 2^(mantissa bits + 1)), and none is the sentinel the receive side is overwritten
#: with before a check (NaN, -1, or 255 in uint8: ``sentinel``).
EXACT_LIMIT = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53,
               "int32": 2 ** 31 - 1, "int64": 2 ** 63 - 1, "int8": 2 ** 7 - 1, "uint8": 2 ** 8 - 2}
#: The longest period the moved data's pattern takes (the largest prime below 2^16): one table
#: of it is at most 512 KiB in any dtype.
MOVED_PERIOD = 65521
#: Elements compared (or written) in one step: the step's temporaries are a mask of this many
#: bytes, and for a tolerance three float64 arrays of TOLERANCE_CHUNK elements.
CHUNK = 1 << 22
TOLERANCE_CHUNK = 1 << 20
#: What a check may hold on the buffers' device beyond the buffers: a step's temporaries and
#: the tables (a few periods of at most MOVED_PERIOD elements); the memory guard counts it.
WORK_BYTES = CHUNK + 3 * 8 * TOLERANCE_CHUNK + 8 * (1 << 20)
#: A table shorter than this is repeated to at least this length (a whole number of periods is
#: a period too): comparing rows of 3 elements at a time costs several times rows of thousands.
SHORTEST_TABLE = 4096
#: ``Part.source`` of a part that holds the reduction over every rank.
REDUCED = -1


def sentinel(dtype):
    """What a receive side is overwritten with before a check: NaN, or -1 for integers (255 in
    uint8: -1 wrapped, as torch's ``fill_(-1)`` writes it); a pair, each field's. No pattern
    value is it (``EXACT_LIMIT``)."""
    dtype = np.dtype(dtype)
    if dtype.names:
        return tuple(sentinel(dtype.fields[name][0]) for name in dtype.names)
    if np.issubdtype(dtype, np.floating):
        return np.nan
    return np.iinfo(dtype).max if np.issubdtype(dtype, np.unsignedinteger) else -1


@dataclass(frozen=True)
class Part:
    """A run of ``length`` elements of a receive buffer from index ``start``: what ``source``
    sent from its index ``offset`` on (a rank), or the reduction over every rank from index
    ``offset`` on (``REDUCED``)."""

    start: int
    length: int
    source: int
    offset: int = 0


def _unequal(got, want, tolerance: float, widen: Callable):
    """Where ``got`` is not ``want`` (a mask): exact, or beyond ``tolerance`` relative to the
    expected value; NaN is never equal. The one comparison rule of the check."""
    if not tolerance:
        return got != want
    got, want = widen(got), widen(want)
    return ~(abs(got - want) <= tolerance * abs(want))


@dataclass(frozen=True)
class CheckPattern:
    """What each rank sends for the result check (``value``) and, for an operator, what the
    reduction over n ranks must give (``reduced``). ``tolerance(n)``: how far, relative to the
    expected value, a result may lie from it (None: it must be exact). ``period(n)``: both repeat
    every that many elements. ``shift(r, n)``: (r0, phase) with value(r, k) = value(r0, k + phase)
    for every k, so that ranks with one r0 share a table."""

    name: str
    value: Callable[[np.ndarray, np.ndarray, int], np.ndarray]             # (rank, k, n) -> values
    period: Callable[[int], int]
    # (k, n) -> reduction over ranks
    reduced: Optional[Callable[[np.ndarray, int], np.ndarray]] = None
    tolerance: Optional[Callable[[int], float]] = None
    shift: Callable[[int, int], tuple] = lambda r, n: (r, 0)

    def tolerance_at(self, n: int) -> float:
        return self.tolerance(n) if self.tolerance is not None else 0.0

    def wrong(self, got: np.ndarray, want: np.ndarray, n: int) -> int:
        """How many elements of ``got`` are not ``want`` (host arrays of the buffer's type)."""
        return int(np.count_nonzero(_unequal(got, want, self.tolerance_at(n), _widen_numpy)))


def _widen_numpy(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


def sum_stride(n: int, limit: int) -> int:
    """The stride m: element k sums the ranks r ≡ k (mod m), each 1..3, so the sum is at most
    limit."""
    return max(1, -(-n // (limit // 3)))


def _sum_op(limit: int) -> CheckPattern:
    # Element k's value and sum depend on k only through k mod m and k mod 3: one period,
    # lcm(m, 3), is a table looked up by the remainder.
    def period(n: int) -> tuple[int, int]:
        m = sum_stride(n, limit)
        return m, m * 3 // math.gcd(m, 3)

    def value(rank, k, n):
        m, length = period(n)
        j = np.arange(length)
        table = np.where(rank % m == j % m, 1 + (rank // m + j) % 3, 0)
        return table[np.asarray(k) % length]

    def reduced(k, n):
        m, length = period(n)
        j = np.arange(length)
        c = j % m                                    # the first contributing rank
        count = np.where(c < n, (n - 1 - c) // m + 1, 0)
        # contributors i = 0..count-1 add 1 + (i + j) % 3
        whole, rest = count // 3, count % 3
        table = (count + 3 * whole + np.where(rest >= 1, j % 3, 0)
                 + np.where(rest >= 2, (j + 1) % 3, 0))
        return table[np.asarray(k) % length]

    return CheckPattern("sum", value, lambda n: period(n)[1], reduced)


def _extreme_ops(limit: int) -> dict:
    span = limit - 4                              # rank r sends r mod span + k mod 5: at most limit

    def value(r, k, n):
        return r % span + np.asarray(k) % 5

    def five(n):
        return 5

    return {"max": CheckPattern("max", value, five, lambda k,
                                n: min(n, span) - 1 + np.asarray(k) % 5),
            "min": CheckPattern("min", value, five, lambda k, n: np.asarray(k) % 5)}


def _marked(k, n: int, who) -> np.ndarray:
    """1 where k mod (n + 1) is ``who`` (a rank, or n, which no rank is), else 0."""
    return (np.asarray(k) % (n + 1) == who).astype(np.int64)


BITS = 6                                          # band/bor use bits 0..5: int8 holds them


def _bits(k, n: int, who) -> np.ndarray:
    """The bits j < BITS where (k + j) mod (n + 1) is ``who``; looked up in a table of one
    period."""
    j = np.arange(n + 1)[:, None] + np.arange(BITS)
    table = ((j % (n + 1) == who) << np.arange(BITS)).sum(axis=1)
    return table[np.asarray(k) % (n + 1)]


MASK = (1 << BITS) - 1


def _ranks_and_one(n: int) -> int:
    return n + 1


_LOGICAL = {
    "land": CheckPattern("land", lambda r, k, n: 1 - _marked(k, n, r), _ranks_and_one, lambda k,
                         n: _marked(k, n, n)),
    "lor": CheckPattern("lor", lambda r, k, n: _marked(k, n, r), _ranks_and_one, lambda k,
                        n: 1 - _marked(k, n, n)),
    "band": CheckPattern("band", lambda r, k, n: MASK - _bits(k, n, r), _ranks_and_one, lambda k,
                         n: _bits(k, n, n)),
    "bor": CheckPattern("bor", lambda r, k, n: _bits(k, n, r), _ranks_and_one, lambda k,
                        n: MASK - _bits(k, n, n)),
}


def _prod() -> CheckPattern:
    return CheckPattern("prod", lambda r, k, n: np.where(r == np.asarray(k) % n, 2, 1), lambda n: n,
                        lambda k, n: np.full_like(np.asarray(k), 2))


def _loc_op(name: str, dtype: str) -> CheckPattern:
    pair = pair_dtype(dtype_of(dtype))
    maxloc = name == "maxloc"

    def pairs(values, index) -> np.ndarray:
        out = np.empty(np.shape(values), pair)
        out[PAIR_FIELDS[0]], out[PAIR_FIELDS[1]] = values, index
        return out

    def value(r, k, n):
        return pairs((np.asarray(k) + r // 2) % 5, r)

    def reduced(k, n):
        c, halves = np.asarray(k) % 5, (n + 1) // 2       # s = r // 2 runs over 0..halves-1
        # the s whose value is 4 (0), if a rank has it
        extreme = 4 - c if maxloc else (5 - c) % 5
        s = np.where(extreme < halves, extreme, halves - 1 if maxloc else 0)
        return pairs((c + s) % 5, 2 * s)                   # the lower rank of the two with that s

    return CheckPattern(name, value, lambda n: 5, reduced)


def _avg_op(dtype: str) -> CheckPattern:
    # Every rank sends the same power of two, so the average is exactly that value if the
    # library sums then divides (gloo: every partial sum is a count times the value, exact up to
    # the limit). NCCL averages floats as a premultiplied sum (each value times fl(1/n), then
    # summed), and fl(1/n) is exact only for n a power of two: one rounding in the product and
    # n - 1 in the additions give at most (n + 1) u relative error (u = 1 / limit, the unit
    # roundoff), and (n + 2) u leaves a margin. Values 1, 2 and 4 differ by a factor of 2, so
    # the check still catches a misplaced element while that is below 1/2 (bfloat16: n < 126,
    # float16: n < 1022), and a sum returned for the average at any n.
    limit = EXACT_LIMIT[dtype]

    def tolerance(n: int) -> float:
        return 0.0 if n & (n - 1) == 0 and n <= limit else (n + 2) / limit

    def same(k, n):
        return 2 ** (np.asarray(k) % 3)

    return CheckPattern("avg", lambda r, k, n: same(k, n), lambda n: 3, same, tolerance)


@lru_cache(maxsize=None)
def largest_prime(at_most: int) -> int:
    """The largest prime no larger than ``at_most`` (at least 2)."""
    for candidate in range(at_most, 1, -1):
        if all(candidate % d for d in range(2, math.isqrt(candidate) + 1)):
            return candidate
    return 2


def _moved(limit: int) -> CheckPattern:
    s = largest_prime(min(limit - 1, MOVED_PERIOD))

    def step(r):
        return 1 + (np.asarray(r) // s) % (s - 1)

    def value(r, k, n):
        return 1 + (np.asarray(r) % s + step(r) * np.asarray(k, dtype=np.int64)) % s

    def shift(r: int, n: int) -> tuple:
        # value(r, k) = value((c - 1) s, k + r c⁻¹): one table per step
        c = int(step(r))
        return (c - 1) * s, (r % s) * pow(c, -1, s) % s

    return CheckPattern(NO_OP, value, lambda n: s, shift=shift)


def pattern(op: str, dtype: str) -> CheckPattern:
    """The check pattern for ``op`` (or ``none``) in ``dtype``: exact in that dtype at any n."""
    limit = EXACT_LIMIT[dtype_of(dtype).name]
    if op == NO_OP:
        return _moved(limit)
    name = op_of(op).name
    if name in ("max", "min"):
        return _extreme_ops(limit)[name]
    made = {"sum": lambda: _sum_op(limit), "prod": _prod, "maxloc": lambda: _loc_op(name, dtype),
            "minloc": lambda: _loc_op(name, dtype), "avg": lambda: _avg_op(dtype)}
    return _LOGICAL[name] if name in _LOGICAL else made[name]()


def expected(check: CheckPattern, n: int, parts, recv_len: int,
             host: np.dtype) -> Optional[np.ndarray]:
    """The whole receive buffer as it must be, on the host (None where nothing arrives): for
    tests and small buffers; the check itself never builds it (``Tables.count_wrong``)."""
    if not parts:
        return None
    out = np.zeros(recv_len, host)
    for p in parts:
        k = np.arange(p.offset, p.offset + p.length)
        values = check.reduced(k, n) if p.source == REDUCED else check.value(p.source, k, n)
        out[p.start:p.start + p.length] = np.asarray(values).astype(host)
    return out


def _pieces(length: int, period: int, phase: int, chunk: int):
    """How ``length`` elements that repeat a table of ``period`` from ``phase`` are worked:
    (start, stop, rows, table start, table stop): rows None for a run compared with the table's
    slice, else that many whole periods compared with the whole table, at most ``chunk``
    elements at a time."""
    head = min(length, period - phase)
    if head:
        yield 0, head, None, phase, phase + head
    rows_per_step = max(1, chunk // period)
    start, whole = head, (length - head) // period
    while whole:
        rows = min(whole, rows_per_step)
        yield start, start + rows * period, rows, 0, period
        start, whole = start + rows * period, whole - rows
    if start < length:
        yield start, length, None, 0, length - start


@dataclass
class Tables:
    """One period of each pattern a block's check needs, on ``device`` (the buffers' device,
    ``collbench.backends.devices``), made once per block and shared by its sizes: the fill of
    the send buffer and the comparison of every size's receive buffer repeat them there."""

    check: CheckPattern
    n: int
    element: Dtype
    device: Any
    _made: dict = field(default_factory=dict)

    def _table(self, source: int) -> tuple:
        """(table on the device, phase of index 0) of ``source``'s values (REDUCED: the
        reduction's)."""
        base, phase = (REDUCED, 0) if source == REDUCED else self.check.shift(source, self.n)
        if base not in self._made:
            period = self.check.period(self.n)
            k = np.arange(period * -(-SHORTEST_TABLE // period))
            values = (self.check.reduced(k, self.n)
                      if base == REDUCED else self.check.value(base, k, self.n))
            self._made[base] = self.device.table(np.asarray(values).astype(self.element.host),
                                                 self.element)
        return self._made[base], phase

    def fill(self, view, rank: int) -> None:
        """Write ``rank``'s values into ``view`` (a send buffer, or its first elements)."""
        table, phase = self._table(rank)
        period = len(table)
        view = self.device.operand(view)
        for start, stop, rows, t0, t1 in _pieces(len(view), period, phase % period, CHUNK):
            if rows is None:
                view[start:stop] = table[t0:t1]
            else:
                view[start:stop].reshape(rows, period)[...] = table

    def count_wrong(self, got, parts, recv_len: int) -> int:
        """How many elements of ``got`` (what arrived: a receive buffer on the device, or the
        pickle API's objects as values on the host) differ from ``parts``; all of them when its
        length is not ``recv_len``. Nothing arrives: 0."""
        if got is None or not parts:
            return 0
        got = self.device.operand(got.reshape(-1))
        if len(got) != recv_len:
            return recv_len
        tolerance = self.check.tolerance_at(self.n)
        chunk = TOLERANCE_CHUNK if tolerance else CHUNK
        device = self.device
        wrong = 0
        for part in parts:
            table, phase = self._table(part.source)
            period = len(table)
            view = got[part.start:part.start + part.length]
            for start, stop, rows, t0, t1 in _pieces(part.length, period,
                                                     (phase + part.offset) % period, chunk):
                piece = view[start:stop] if rows is None else view[start:stop].reshape(rows, period)
                wrong = wrong + device.count(_unequal(piece, table[t0:t1], tolerance, device.widen))
        return int(wrong)                # the one value that leaves the device
