"""Element types: what a buffer's elements are (``Dtype``, ``DTYPES``), and the value–index pair
that maxloc and minloc reduce, laid out as C's struct. The reduction operators and the element
each reduces: ``collbench.benchmarks.ops``; what each rank sends for the result check and what it
must find: ``collbench.benchmarks.check``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

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

#: The fields of a value–index pair (maxloc, minloc); the index is a C int, as in MPI's pair types.
PAIR_FIELDS = ("value", "index")


def pair_dtype(dtype: Dtype) -> np.dtype:
    """A value–index pair of ``dtype`` laid out as C's struct {value; int index}: aligned, so
    that {double, int} takes 16 bytes, MPI_DOUBLE_INT's extent."""
    # bfloat16's size and alignment
    value = dtype.numpy if dtype.numpy is not None else np.dtype(np.float16)
    return np.dtype([(PAIR_FIELDS[0], value), (PAIR_FIELDS[1], np.intc)], align=True)


def dtype_of(name: str) -> Dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise UsageError(f"unknown dtype {name!r}; choose one of: {', '.join(DTYPES)}") from None
