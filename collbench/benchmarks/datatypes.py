"""Element types and reduction operators: what a buffer's elements are, how numpy reduces two
arrays with an operator (mpi-pickle's reductions), and MPI's value–index pair types. What each
rank sends for the result check and what it must find: ``collbench.benchmarks.check``.
"""

from __future__ import annotations

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

#: Non-reducing collectives carry data only; they use the ``none`` pattern.
NO_OP = "none"


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
