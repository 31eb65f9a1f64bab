"""Element types and reduction operators, with the check pattern each operator uses.

Every rank fills its send buffer with small integers ``value(rank, k, n)`` (k = index in the
buffer) chosen so that the reduction is exact in every dtype offered: the largest sum,
n(n+1)/2 + 6n, stays exact in float16 (integers up to 2048) up to about 55 ranks, and the
product is always 2. ``reduced(k, n)`` is the closed form of that reduction over n ranks, so
an expected result never needs all ranks' data in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from collbench.errors import UsageError

DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int32": np.int32,
    "int64": np.int64,
}


@dataclass(frozen=True)
class ReduceOp:
    name: str
    value: Callable[[np.ndarray, np.ndarray, int], np.ndarray]   # (rank, k, n) -> values
    reduced: Callable[[np.ndarray, int], np.ndarray]             # (k, n) -> reduction over ranks
    ufunc: np.ufunc


OPS = {
    "sum": ReduceOp("sum", lambda r, k, n: (r + 1) + k % 7,
                    lambda k, n: n * (n + 1) // 2 + n * (k % 7), np.add),
    "max": ReduceOp("max", lambda r, k, n: r + k % 5, lambda k, n: (n - 1) + k % 5, np.maximum),
    "min": ReduceOp("min", lambda r, k, n: r + k % 5, lambda k, n: k % 5, np.minimum),
    "prod": ReduceOp("prod", lambda r, k, n: np.where(r == k % n, 2, 1),
                     lambda k, n: np.full_like(k, 2), np.multiply),
}

#: Non-reducing collectives carry data only; they use the sum pattern's values.
NO_OP = "none"


def dtype_of(name: str) -> np.dtype:
    try:
        return np.dtype(DTYPES[name])
    except KeyError:
        raise UsageError(f"unknown dtype {name!r}; choose one of: {', '.join(DTYPES)}") from None


def op_of(name: str) -> ReduceOp:
    try:
        return OPS[name]
    except KeyError:
        raise UsageError(f"unknown op {name!r}; choose one of: {', '.join(OPS)}") from None
