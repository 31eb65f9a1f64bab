"""Element types and reduction operators, with the check pattern each operator uses.

Every rank fills its send buffer with small integers ``value(rank, k, n)`` (k = index in the
buffer) and ``reduced(k, n)`` is the closed form of their reduction over n ranks, so an expected
result never needs all ranks' data in one place.

The patterns are exact at any scale and in any reduction order:

* ``sum``: each value is 1, 2 or 3, and only the ranks r ≡ k (mod m) contribute to element k
  (the others send 0), with the stride m chosen from n and the dtype's exact-integer limit so that
  the whole sum, and so every partial sum in any order, stays an exactly representable integer
  (float16: 2048, float32: 2^24). Up to 682 ranks in float16 every rank contributes (m = 1).
* ``max``/``min`` pick one element (rank r sends r mod (limit - 4) + k mod 5, so values stay
  exact and distinct), and ``prod`` multiplies 1s and one 2.
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
}

#: Largest integer up to which every integer is exactly representable (floats: 2^(mantissa bits + 1)).
EXACT_LIMIT = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53,
               "int32": 2 ** 31 - 1, "int64": 2 ** 63 - 1}

#: Non-reducing collectives carry data only; they use the ``none`` pattern.
NO_OP = "none"


@dataclass(frozen=True)
class CheckPattern:
    """What each rank sends for the result check (``value``) and, for an operator, what the
    reduction over n ranks must give (``reduced``), with numpy's ufunc for that operator."""

    name: str
    value: Callable[[np.ndarray, np.ndarray, int], np.ndarray]             # (rank, k, n) -> values
    reduced: Optional[Callable[[np.ndarray, int], np.ndarray]] = None      # (k, n) -> reduction over ranks
    ufunc: Optional[np.ufunc] = None


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

    return CheckPattern("sum", value, reduced, np.add)


def _extreme_ops(limit: int) -> dict:
    span = limit - 4                              # rank r sends r mod span + k mod 5: at most limit

    def value(r, k, n):
        return r % span + k % 5

    return {"max": CheckPattern("max", value, lambda k, n: min(n, span) - 1 + k % 5, np.maximum),
            "min": CheckPattern("min", value, lambda k, n: k % 5, np.minimum)}


OPS = {
    "sum": _sum_op(EXACT_LIMIT["float16"]),
    **_extreme_ops(EXACT_LIMIT["float16"]),
    "prod": CheckPattern("prod", lambda r, k, n: np.where(r == k % n, 2, 1),
                     lambda k, n: np.full_like(k, 2), np.multiply),
}

def _moved(limit: int) -> CheckPattern:
    span = limit - 1

    def value(r, k, n):
        return 1 + (r + (1 + r // span) * np.asarray(k, dtype=np.int64)) % span

    return CheckPattern(NO_OP, value)


def pattern(op: str, dtype: str) -> CheckPattern:
    """The check pattern for ``op`` (or ``none``) in ``dtype``: exact in that dtype at any n."""
    limit = EXACT_LIMIT[dtype]
    if op == NO_OP:
        return _moved(limit)
    if op == "sum":
        return _sum_op(limit)
    if op in ("max", "min"):
        return _extreme_ops(limit)[op]
    return op_of(op)


def dtype_of(name: str) -> Dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise UsageError(f"unknown dtype {name!r}; choose one of: {', '.join(DTYPES)}") from None


def op_of(name: str) -> CheckPattern:
    try:
        return OPS[name]
    except KeyError:
        raise UsageError(f"unknown op {name!r}; choose one of: {', '.join(OPS)}") from None
