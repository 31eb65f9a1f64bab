"""Element types and reduction operators, with the check pattern each operator uses.

Every rank fills its send buffer with small integers ``value(rank, k, n)`` (k = index in the
buffer) and ``reduced(k, n)`` is the closed form of their reduction over n ranks, so an expected
result never needs all ranks' data in one place.

The patterns are exact at any scale and in any reduction order:

* ``sum``: each value is 1, 2 or 3, and only the ranks r ≡ k (mod m) contribute to element k
  (the others send 0), with the stride m chosen from n and the dtype's exact-integer limit so that
  the whole sum, and so every partial sum in any order, stays an exactly representable integer
  (float16: 2048, float32: 2^24, int8: 127). Up to 682 ranks in float16 every rank contributes
  (m = 1).
* ``max``/``min`` pick one element (rank r sends r mod (limit - 4) + k mod 5, so values stay
  exact and distinct), and ``prod`` multiplies 1s and one 2.
* ``land``/``lor`` (integer dtypes): every rank sends 1 (land) or 0 (lor) but where
  k mod (n + 1) = r, so the result is 1 only where k mod (n + 1) = n (land), 0 only there (lor).
  ``band``/``bor`` do the same bit by bit on 6 low bits (int8 holds them): rank r clears (band)
  or sets (bor) bit j of element k where (k + j) mod (n + 1) = r.
* ``maxloc``/``minloc`` reduce value–index pairs (the index is the rank): ranks 2s and 2s + 1
  send the same value, (k + s) mod 5, so from 2 ranks on the extreme is held by two ranks and
  the lowest of them must win.
* ``avg`` (float dtypes): every rank sends the same value, 1, 2 or 4 by element, so the average
  is that value whatever the order of the sum (see ``_avg_op`` for the tolerance a premultiplied
  sum needs).
* ``none`` (what bcast, gather, scatter, allgather and alltoall move): data is only moved, but
  it must still be representable, or the fill would round it (bfloat16 holds the integers up to
  256 only) and a correct result would look wrong. Rank r sends ``1 + (r + (1 + r // s) * k) mod
  s`` with s = limit - 1: at most the limit, different on every rank at every element while
  n <= s, and past that, ranks that agree mod s still differ at most elements (their step in k
  differs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from collbench.errors import UsageError


@dataclass(frozen=True)
class Dtype:
    """An element type. ``numpy``: its numpy type, None where numpy has none (bfloat16: only
    backends whose buffers are torch tensors take it); ``host``: the numpy type its values are
    made in and read back as on the host (exact for the small integers of the check)."""

    name: str
    itemsize: int
    numpy: Optional[np.dtype]
    host: np.dtype

    @property
    def kind(self) -> str:
        """numpy's kind letter: ``f`` (bfloat16 included), ``i``, ``u``, or ``V`` for a pair."""
        return (self.numpy if self.numpy is not None else self.host).kind


def _numpy(name: str) -> Dtype:
    t = np.dtype(name)
    return Dtype(name, t.itemsize, t, t)


DTYPES = {
    "float32": _numpy("float32"),
    "float64": _numpy("float64"),
    "float16": _numpy("float16"),
    "bfloat16": Dtype("bfloat16", 2, None, np.dtype("float32")),
    "int32": _numpy("int32"),
    "int64": _numpy("int64"),
    "int8": _numpy("int8"),
    "uint8": _numpy("uint8"),
}

#: Largest integer a check value may reach: every integer up to it is exactly representable
#: (floats: 2^(mantissa bits + 1)), and none is the sentinel the receive side is overwritten
#: with before a check (NaN, -1, or 255 in uint8: ``collbench.backends.devices.sentinel``).
EXACT_LIMIT = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53,
               "int32": 2 ** 31 - 1, "int64": 2 ** 63 - 1, "int8": 2 ** 7 - 1, "uint8": 2 ** 8 - 2}

#: Non-reducing collectives carry data only; they use the ``none`` pattern.
NO_OP = "none"


@dataclass(frozen=True)
class CheckPattern:
    """What each rank sends for the result check (``value``) and, for an operator, what the
    reduction over n ranks must give (``reduced``). ``tolerance(n)``: how far, relative to the
    expected value, a result may lie from it (None: it must be exact)."""

    name: str
    value: Callable[[np.ndarray, np.ndarray, int], np.ndarray]             # (rank, k, n) -> values
    reduced: Optional[Callable[[np.ndarray, int], np.ndarray]] = None      # (k, n) -> reduction over ranks
    tolerance: Optional[Callable[[int], float]] = None

    def wrong(self, got: np.ndarray, want: np.ndarray, n: int) -> int:
        """How many elements of ``got`` are not ``want`` (both of the buffer's numpy type)."""
        tolerance = self.tolerance(n) if self.tolerance is not None else 0.0
        if not tolerance:
            return int(np.count_nonzero(got != want))
        got, want = got.astype(np.float64), want.astype(np.float64)
        return int(np.count_nonzero(~(np.abs(got - want) <= tolerance * np.abs(want))))  # NaN is wrong


def sum_stride(n: int, limit: int) -> int:
    """The stride m: element k sums the ranks r ≡ k (mod m), each 1..3, so the sum is at most limit."""
    return max(1, -(-n // (limit // 3)))


def _sum_op(limit: int) -> CheckPattern:
    # Element k's value and sum depend on k only through k mod m and k mod 3: both are looked up
    # in a table of one period, lcm(m, 3), so that filling and checking a large buffer cost one
    # remainder and one gather, not a dozen full-length temporaries.
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
        whole, rest = count // 3, count % 3          # contributors i = 0..count-1 add 1 + (i + j) % 3
        table = count + 3 * whole + np.where(rest >= 1, j % 3, 0) + np.where(rest >= 2, (j + 1) % 3, 0)
        return table[np.asarray(k) % length]

    return CheckPattern("sum", value, reduced)


def _extreme_ops(limit: int) -> dict:
    span = limit - 4                              # rank r sends r mod span + k mod 5: at most limit

    def value(r, k, n):
        return r % span + k % 5

    return {"max": CheckPattern("max", value, lambda k, n: min(n, span) - 1 + k % 5),
            "min": CheckPattern("min", value, lambda k, n: k % 5)}


def _marked(k, n: int, who) -> np.ndarray:
    """1 where k mod (n + 1) is ``who`` (a rank, or n, which no rank is), else 0."""
    return (np.asarray(k) % (n + 1) == who).astype(np.int64)


BITS = 6                                          # band/bor use bits 0..5: int8 holds them


def _bits(k, n: int, who) -> np.ndarray:
    """The bits j < BITS where (k + j) mod (n + 1) is ``who``; looked up in a table of one period."""
    j = np.arange(n + 1)[:, None] + np.arange(BITS)
    table = ((j % (n + 1) == who) << np.arange(BITS)).sum(axis=1)
    return table[np.asarray(k) % (n + 1)]


MASK = (1 << BITS) - 1
_LOGICAL = {
    "land": CheckPattern("land", lambda r, k, n: 1 - _marked(k, n, r), lambda k, n: _marked(k, n, n)),
    "lor": CheckPattern("lor", lambda r, k, n: _marked(k, n, r), lambda k, n: 1 - _marked(k, n, n)),
    "band": CheckPattern("band", lambda r, k, n: MASK - _bits(k, n, r), lambda k, n: _bits(k, n, n)),
    "bor": CheckPattern("bor", lambda r, k, n: _bits(k, n, r), lambda k, n: MASK - _bits(k, n, n)),
}


#: The fields of a value–index pair (maxloc, minloc); the index is a C int, as in MPI's pair types.
PAIR_FIELDS = ("value", "index")
#: MPI's predefined pair types (mpi4py's names; MPI_2INT is INT_INT), by the C type of the value
#: (numpy's character code: float, double, int, long, short).
MPI_PAIR_TYPES = {"f": "FLOAT_INT", "d": "DOUBLE_INT", "i": "INT_INT", "l": "LONG_INT", "h": "SHORT_INT"}


def pair_dtype(dtype: Dtype) -> np.dtype:
    """A value–index pair of ``dtype`` laid out as C's struct {value; int index}: aligned, so
    that {double, int} takes 16 bytes, MPI_DOUBLE_INT's extent."""
    value = dtype.numpy if dtype.numpy is not None else np.dtype(np.float16)   # bfloat16's size and alignment
    return np.dtype([(PAIR_FIELDS[0], value), (PAIR_FIELDS[1], np.intc)], align=True)


def mpi_pair_type(numpy_type: np.dtype) -> Optional[str]:
    """The name of MPI's predefined type for buffers of ``numpy_type`` when it is a value–index
    pair (mpi4py cannot infer it from a structured array), else None."""
    if getattr(numpy_type, "names", None) != PAIR_FIELDS:       # a torch dtype has none
        return None
    value = numpy_type.fields[PAIR_FIELDS[0]][0]
    for code, name in MPI_PAIR_TYPES.items():
        if np.dtype(code) == value:
            return name
    return None


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
        extreme = 4 - c if maxloc else (5 - c) % 5         # the s whose value is 4 (0), if a rank has it
        s = np.where(extreme < halves, extreme, halves - 1 if maxloc else 0)
        return pairs((c + s) % 5, 2 * s)                   # the lower rank of the two with that s

    return CheckPattern(name, value, reduced)


def _loc_combine(better: np.ufunc) -> Callable:
    """maxloc (``better``: np.greater) or minloc (np.less) of two pair arrays, element by element:
    the better value, and on a tie the lower index, as MPI_MAXLOC does."""
    value, index = PAIR_FIELDS

    def combine(a, b):
        a, b = np.asarray(a), np.asarray(b)
        take = better(b[value], a[value]) | ((b[value] == a[value]) & (b[index] < a[index]))
        return np.where(take, b, a)

    return combine


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

    return CheckPattern("avg", lambda r, k, n: same(k, n), same, tolerance)


def _moved(limit: int) -> CheckPattern:
    span = limit - 1

    def value(r, k, n):
        return 1 + (r + (1 + r // span) * np.asarray(k, dtype=np.int64)) % span

    return CheckPattern(NO_OP, value)


@dataclass(frozen=True)
class Op:
    """A reduction operator: its check pattern in a dtype (``make``: dtype name -> pattern), how
    numpy reduces two arrays with it keeping their type (``combine``; a ufunc where numpy's keeps
    it; None where no pairwise step computes it), the kinds of dtype it takes (numpy's letters),
    and whether its elements are value–index pairs (``pairs``)."""

    name: str
    make: Callable[[str], CheckPattern]
    combine: Optional[Callable]
    kinds: str = "fiu"
    pairs: bool = False

    def refusal(self, dtype: Dtype) -> Optional[str]:
        """None if it takes ``dtype``, else one line naming the dtypes it takes."""
        if dtype.kind in self.kinds:
            return None
        which = "integer" if self.kinds == "iu" else "float"
        return f"{self.name} takes {which} dtypes only: " + ", ".join(
            name for name, d in DTYPES.items() if d.kind in self.kinds)


def _keeping(ufunc: np.ufunc) -> Callable:
    """``ufunc`` converted back to its operands' type (np.logical_and returns bool)."""
    return lambda a, b: ufunc(a, b).astype(np.result_type(a, b))


OPS = {
    "sum": Op("sum", lambda d: _sum_op(EXACT_LIMIT[d]), np.add),
    "max": Op("max", lambda d: _extreme_ops(EXACT_LIMIT[d])["max"], np.maximum),
    "min": Op("min", lambda d: _extreme_ops(EXACT_LIMIT[d])["min"], np.minimum),
    "prod": Op("prod", lambda d: CheckPattern("prod", lambda r, k, n: np.where(r == k % n, 2, 1),
                                              lambda k, n: np.full_like(k, 2)), np.multiply),
    "land": Op("land", lambda d: _LOGICAL["land"], _keeping(np.logical_and), kinds="iu"),
    "lor": Op("lor", lambda d: _LOGICAL["lor"], _keeping(np.logical_or), kinds="iu"),
    "band": Op("band", lambda d: _LOGICAL["band"], np.bitwise_and, kinds="iu"),
    "bor": Op("bor", lambda d: _LOGICAL["bor"], np.bitwise_or, kinds="iu"),
    "maxloc": Op("maxloc", lambda d: _loc_op("maxloc", d), _loc_combine(np.greater), pairs=True),
    "minloc": Op("minloc", lambda d: _loc_op("minloc", d), _loc_combine(np.less), pairs=True),
    "avg": Op("avg", _avg_op, None, kinds="f"),
}


def pattern(op: str, dtype: str) -> CheckPattern:
    """The check pattern for ``op`` (or ``none``) in ``dtype``: exact in that dtype at any n."""
    if op == NO_OP:
        return _moved(EXACT_LIMIT[dtype])
    return op_of(op).make(dtype)


def element_of(dtype: str, op: str) -> Dtype:
    """What one element of a buffer reduced by ``op`` (or moved: ``none``) is: the dtype, or for
    maxloc and minloc a value–index pair (``pair_dtype``), whose itemsize, padding included,
    makes a row's size: pairs × that."""
    base = dtype_of(dtype)
    if op == NO_OP or not op_of(op).pairs:
        return base
    pair = pair_dtype(base)
    return Dtype(base.name, pair.itemsize, pair if base.numpy is not None else None, pair)


def op_refusal(op: str, dtype: str) -> Optional[str]:
    """None if ``op`` (or ``none``) takes ``dtype``, else why not, in one line."""
    return None if op == NO_OP else op_of(op).refusal(dtype_of(dtype))


def dtype_of(name: str) -> Dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise UsageError(f"unknown dtype {name!r}; choose one of: {', '.join(DTYPES)}") from None


def op_of(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise UsageError(f"unknown op {name!r}; choose one of: {', '.join(OPS)}") from None
