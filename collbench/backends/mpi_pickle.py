"""The ``mpi-pickle`` backend: mpi4py's object API (allreduce, bcast, ...), pickling included.

Arrays travel as Python objects; reductions apply numpy ufuncs to whole arrays, as a user of
the object API would. The object API has no reduce_scatter: it is measured as an alltoall of
the n blocks followed by a local reduction, the pairwise-exchange algorithm.
"""

from __future__ import annotations

import os
from functools import reduce as fold
from typing import Optional

import numpy as np

from collbench.backends import _host
from collbench.backends._mpi import MpiBase
from collbench.backends.base import Backend, Bound, Control
from collbench.collectives.datatypes import OPS


def _calls(comm, rank, n, s, send_len, recv_len, ufunc, root):
    sv = s[:send_len]
    chunks = [sv[j * recv_len:(j + 1) * recv_len] for j in range(n)]   # scatter, reduce_scatter
    block = send_len // n
    blocks = [sv[j * block:(j + 1) * block] for j in range(n)]           # alltoall
    mine = sv if rank == root else None
    to_scatter = chunks if rank == root else None
    return {
        "allreduce": lambda: comm.allreduce(sv, op=ufunc),
        "bcast": lambda: comm.bcast(mine, root=root),
        "reduce": lambda: comm.reduce(sv, op=ufunc, root=root),
        "allgather": lambda: comm.allgather(sv),
        "gather": lambda: comm.gather(sv, root=root),
        "scatter": lambda: comm.scatter(to_scatter, root=root),
        "alltoall": lambda: comm.alltoall(blocks),
        "reduce_scatter": lambda: fold(ufunc, comm.alltoall(chunks)),
        "barrier": lambda: comm.barrier(),
    }


def _as_array(result) -> Optional[np.ndarray]:
    if result is None:
        return None
    if isinstance(result, list):
        return np.concatenate(result) if result else np.empty(0)
    return np.asarray(result)


def _pickle_limit(MPI) -> Optional[int]:
    """Pickled messages need a count that fits a C int unless both mpi4py and the MPI library
    do MPI-4 large counts (mpi4py 4 then sends larger pickles). COLLBENCH_PICKLE_LIMIT overrides
    it, so that the skip path can be tested without gigabytes."""
    override = os.environ.get("COLLBENCH_PICKLE_LIMIT")
    if override:
        return int(override)
    import mpi4py
    large = MPI.Get_version() >= (4, 0) and int(mpi4py.__version__.split(".")[0]) >= 4
    return None if large else 2**31 - 1


class MpiPickleBackend(MpiBase, Backend):
    name = "mpi-pickle"
    extra_copies = 3   # pickled send payload, received payload, unpickled result

    def setup(self, *, control: Control) -> None:
        super().setup(control=control)
        self._limit = _pickle_limit(self.MPI)

    def max_message_bytes(self) -> Optional[int]:
        return self._limit

    def allocate(self, *, send_len, recv_len, dtype, in_place):
        # Results arrive as new objects, so only the send side is allocated.
        return _host.allocate(send_len, 0, dtype, True)

    def bind(self, buffers, *, collective, send_len, recv_len, op, root) -> Bound:
        ufunc = OPS[op].ufunc if op in OPS else np.add
        call = _calls(self.comm, self.rank, self.size, buffers.send, send_len, recv_len, ufunc, root)[collective]
        return Bound(run=call, run_blocking=call, checked=lambda: _as_array(call()))

    def barrier(self) -> None:
        self.comm.barrier()
