"""The ``mpi-pickle`` backend: mpi4py's object API (allreduce, bcast, ...), pickling included.

Arrays travel as Python objects; reductions apply numpy ufuncs to whole arrays, as a user of
the object API would. The object API has no reduce_scatter: it is measured as an alltoall of
the n blocks followed by a local reduction, the pairwise-exchange algorithm.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from collbench.backends._mpi import MpiBase
from collbench.backends.base import Backend, Bound, Control
from collbench.benchmarks.base import ObjectCall
from collbench.benchmarks.datatypes import OPS


def _as_array(result) -> Optional[np.ndarray]:
    if result is None:
        return None
    if isinstance(result, list):
        return np.concatenate(result) if result else np.empty(0)
    return np.asarray(result)


def _pickle_limit(MPI) -> Optional[int]:
    """Pickled messages need a count that fits a C int unless both mpi4py and the MPI library
    do MPI-4 large counts (mpi4py 4 then sends larger pickles)."""
    import mpi4py
    large = MPI.Get_version() >= (4, 0) and int(mpi4py.__version__.split(".")[0]) >= 4
    return None if large else 2**31 - 1


class MpiPickleBackend(MpiBase, Backend):
    name = "mpi-pickle"
    family = "object"

    def setup(self, *, control: Control) -> None:
        super().setup(control=control)
        self._limit = _pickle_limit(self.MPI)

    def max_message_bytes(self) -> Optional[int]:
        return self._limit

    def allocate(self, *, send_len, recv_len, dtype, in_place):
        # Results arrive as new objects, so only the send side is allocated.
        return self.device.allocate(send_len, 0, dtype, True)

    def bind(self, buffers, *, collective, send_len, recv_len, op, roles) -> Bound:
        ufunc = OPS[op].ufunc if op in OPS else None
        call = collective.object_call(ObjectCall(self.rank, self.size, roles, self.comm, buffers.send[:send_len],
                                                 recv_len, ufunc))
        return Bound(run=call, run_blocking=call, checked=lambda: _as_array(call()))

    def barrier(self) -> None:
        self.comm.barrier()
