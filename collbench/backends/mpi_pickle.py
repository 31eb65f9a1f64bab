"""The ``mpi-pickle`` backend: mpi4py's object API (allreduce, bcast, ...), pickling included.

What travels is the payload (``--payload``, ``collbench.benchmarks.payloads``): a numpy array
by default, or the same values as bytes, a list or a dict; reductions apply numpy (a ufunc, or
maxloc's step on value–index pairs) to whole arrays, as a user of the object API would. The
object API has no reduce_scatter: it is measured as an alltoall of the n blocks followed by a
local reduction, the pairwise-exchange algorithm.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from collbench.backends._mpi import MpiBase
from collbench.backends.base import Backend, Bound, Control
from collbench.benchmarks.base import ObjectCall
from collbench.benchmarks.check import sentinel
from collbench.benchmarks.ops import OPS
from collbench.benchmarks.payloads import payload_of


def _as_array(result, payload, dtype, pieces: bool, recv_len: int) -> Optional[np.ndarray]:
    """What arrived, as values for the check: one object, or (``pieces``: gather, allgather,
    alltoall) a list of n objects, one after another; where a rank receives less than the
    busiest (alltoallv, scatterv), the rest up to ``recv_len`` is the sentinel no value equals,
    as a receive buffer's unwritten end would be."""
    if result is None:
        return None
    if pieces:
        parts = [payload.values(r, dtype) for r in result]
        got = np.concatenate(parts) if parts else np.empty(0, dtype)
    else:
        got = payload.values(result, dtype)
    if len(got) < recv_len:
        rest = np.empty(recv_len - len(got), got.dtype)
        # a pair's sentinel is a tuple: one element's fields
        rest[...] = sentinel(got.dtype)
        got = np.concatenate([got, rest])
    return got


def _pickle_limit(MPI) -> Optional[int]:
    """Pickled messages need a count that fits a C int unless both mpi4py and the MPI library
    do MPI-4 large counts (mpi4py 4 then sends larger pickles)."""
    import mpi4py
    large = MPI.Get_version() >= (4, 0) and int(mpi4py.__version__.split(".")[0]) >= 4
    return None if large else 2**31 - 1


class MpiPickleBackend(MpiBase, Backend):
    name = "mpi-pickle"
    family = "object"
    takes_options = ("payload", "api", "placement", "thread_level", "cache")

    def setup(self, *, control: Control) -> None:
        super().setup(control=control)
        self._limit = _pickle_limit(self.MPI)

    def max_message_bytes(self) -> Optional[int]:
        return self._limit

    def allocate(self, *, send_len, recv_len, dtype, in_place):
        # Results arrive as new objects, so only the send side is allocated.
        return self.device.allocate(send_len, 0, dtype, True)

    def memory_scale(self, itemsize: int) -> float:
        return 1.0 + payload_of(self.options.payload).overhead_per_element / itemsize

    def row_axes(self) -> dict:
        return {**super().row_axes(), "payload": self.options.payload}

    def bind(self, buffers, *, collective, send_len, recv_len, op, roles) -> Bound:
        payload = payload_of(self.options.payload)
        values = buffers.send[:send_len]
        dtype = values.dtype
        combine = payload.combiner(OPS[op].combine if op in OPS else None, dtype)
        call = collective.object_call(ObjectCall(
            self.rank, self.size, roles, self.comm, payload.make(values), recv_len, combine,
            piece=lambda obj, start, stop: payload.piece(obj, start, stop, dtype),
            room=payload.room, api=self.options.api, send_len=send_len))

        return Bound(run=call, run_blocking=call,
                     checked=lambda: _as_array(call(), payload, dtype, collective.gathers_objects,
                                               recv_len))

    def barrier(self) -> None:
        self.whole.barrier()
