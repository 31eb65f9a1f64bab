"""What mpi4py's pickle API sends (``--payload``): the same data as different Python objects.

The lowercase calls pickle whatever they are given, and the object decides the cost. Each
payload (array, bytes, list, dict) carries the send buffer's check values and is sized by the
data's bytes, as for the buffer API, so the larger pickles of lists and dicts are what is
measured. A payload says how to make its object, take a piece of it, read it back for the
check and reduce two of them (through numpy). docs/usage.md, "Buffers and payloads";
docs/methodology.md, "Backends".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

NAMES = ("array", "bytes", "list", "dict")


@dataclass(frozen=True)
class Payload:
    """One kind of object: ``make`` (values -> object), ``piece`` (object, start, stop, numpy
    dtype -> the object of elements start to stop), ``values`` (object, numpy dtype -> array)."""

    name: str
    make: Callable[[np.ndarray], Any]
    piece: Callable[[Any, int, int, np.dtype], Any]
    values: Callable[[Any, np.dtype], np.ndarray]
    #: bytes a message of this kind holds per element beyond the element itself, in memory (the
    #: objects a list or dict is made of); the memory guard counts them
    overhead_per_element: int = 0

    def combiner(self, ufunc: Optional[Callable], dtype: np.dtype) -> Optional[Callable]:
        """The reduction of two objects of this kind by ``ufunc`` (numpy's, on arrays), or None."""
        if ufunc is None:
            return None
        if self.name == "array":
            return ufunc
        make, values = self.make, self.values

        def combine(a, b, *_):
            return make(np.asarray(ufunc(values(a, dtype), values(b, dtype))).astype(dtype,
                                                                                     copy=False))

        return combine

    def room(self, obj) -> int:
        """The bytes a receive buffer needs for the pickle of ``obj`` (mpi4py's irecv takes 32 KiB
        without one)."""
        if self.name == "array":
            return obj.nbytes + (1 << 12)
        import pickle
        return len(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)) + (1 << 12)


def _dict_piece(obj: dict, start: int, stop: int, dtype) -> dict:
    keys = list(obj)[start:stop]
    return {k: obj[k] for k in keys}


def _list_values(obj, dtype) -> np.ndarray:
    return np.array(obj, dtype=dtype) if len(obj) else np.empty(0, dtype)


PAYLOADS = {
    "array": Payload("array", lambda v: v, lambda o, a, b, dt: o[a:b], lambda o, dt: np.asarray(o)),
    "bytes": Payload("bytes", lambda v: v.tobytes(), lambda o, a, b,
                     dt: o[a * dt.itemsize:b * dt.itemsize],
                     lambda o, dt: np.frombuffer(o, dtype=dt)),
    "list": Payload("list", lambda v: v.tolist(), lambda o, a, b, dt: o[a:b], _list_values,
                    overhead_per_element=32),
    "dict": Payload("dict", lambda v: dict(enumerate(v.tolist())), _dict_piece,
                    lambda o, dt: _list_values(list(o.values()), dt), overhead_per_element=120),
}


def payload_of(name: str) -> Payload:
    return PAYLOADS[name]
