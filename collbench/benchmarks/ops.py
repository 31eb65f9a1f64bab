"""Reduction operators: how numpy reduces two arrays with each (mpi-pickle's reductions), the
dtypes each takes, and what one element of a buffer it reduces is (``element_of``: the dtype, or
a value–index pair for maxloc and minloc). The element types: ``collbench.benchmarks.dtypes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from collbench.benchmarks.dtypes import DTYPES, PAIR_FIELDS, Dtype, dtype_of, pair_dtype
from collbench.errors import UsageError

#: Non-reducing collectives carry data only; they use the ``none`` pattern.
NO_OP = "none"


def _loc_combine(better: np.ufunc) -> Callable:
    """maxloc (``better``: np.greater) or minloc (np.less) of two pair arrays, element by element:
    the better value, and on a tie the lower index, as MPI_MAXLOC does."""
    value, index = PAIR_FIELDS

    def combine(a, b):
        a, b = np.asarray(a), np.asarray(b)
        take = better(b[value], a[value]) | ((b[value] == a[value]) & (b[index] < a[index]))
        return np.where(take, b, a)

    return combine


@dataclass(frozen=True)
class Op:
    """A reduction operator: how numpy reduces two arrays with it keeping their type
    (``combine``; a ufunc where numpy's keeps it; None where no pairwise step computes it), the
    kinds of dtype it takes (numpy's letters), and whether its elements are value–index pairs
    (``pairs``)."""

    name: str
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
    "sum": Op("sum", np.add),
    "max": Op("max", np.maximum),
    "min": Op("min", np.minimum),
    "prod": Op("prod", np.multiply),
    "land": Op("land", _keeping(np.logical_and), kinds="iu"),
    "lor": Op("lor", _keeping(np.logical_or), kinds="iu"),
    "band": Op("band", np.bitwise_and, kinds="iu"),
    "bor": Op("bor", np.bitwise_or, kinds="iu"),
    "maxloc": Op("maxloc", _loc_combine(np.greater), pairs=True),
    "minloc": Op("minloc", _loc_combine(np.less), pairs=True),
    "avg": Op("avg", None, kinds="f"),
}


def element_of(dtype: str, op: str) -> Dtype:
    """What one element of a buffer reduced by ``op`` (or moved: ``none``) is: the dtype, or for
    maxloc and minloc a value–index pair (``pair_dtype``), whose itemsize, padding included,
    makes a row's size: pairs × that."""
    base = dtype_of(dtype)
    if op == NO_OP or not op_of(op).pairs:
        return base
    pair = pair_dtype(base)
    return Dtype(base.name, pair.itemsize, pair if base.numpy is not None else None, pair)


def kinds_of(coll, kinds: tuple) -> tuple:
    """The (dtype, op) pairs ``coll`` measures of a run's ``kinds`` (every --dtype with every
    --op): each dtype once, with the op ``none``, where it reduces nothing; the first alone where
    it moves no data (a barrier)."""
    if coll.reduces:
        return tuple(kinds)
    return tuple(dict.fromkeys((dtype, NO_OP) for dtype, _ in kinds))[:None if coll.moves_data
                                                                       else 1]


def op_refusal(op: str, dtype: str) -> Optional[str]:
    """None if ``op`` (or ``none``) takes ``dtype``, else why not, in one line."""
    return None if op == NO_OP else op_of(op).refusal(dtype_of(dtype))


def op_of(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise UsageError(f"unknown op {name!r}; choose one of: {', '.join(OPS)}") from None
