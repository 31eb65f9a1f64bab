"""The ``mpi`` backend: mpi4py's buffer API (Allreduce, Bcast, ...) on numpy arrays."""

from __future__ import annotations

from functools import partial

from collbench.backends import _host
from collbench.backends._mpi import MpiBase
from collbench.backends.base import Backend, Bound, Control


def _calls(comm, s, r, send_len, recv_len, op, root):
    """Each collective's call, bound to its slices; one entry per collective."""
    sv, rv = s[:send_len], r[:recv_len]
    return {
        "allreduce": lambda: partial(comm.Allreduce, sv, rv, op),
        "bcast": lambda: partial(comm.Bcast, sv, root),
        "reduce": lambda: partial(comm.Reduce, sv, rv, op, root),
        "allgather": lambda: partial(comm.Allgather, sv, rv),
        "gather": lambda: partial(comm.Gather, sv, rv, root),
        "scatter": lambda: partial(comm.Scatter, sv, rv, root),
        "alltoall": lambda: partial(comm.Alltoall, sv, rv),
        "reduce_scatter": lambda: partial(comm.Reduce_scatter_block, sv, rv, op),
        "barrier": lambda: comm.Barrier,
    }


class MpiBackend(MpiBase, Backend):
    name = "mpi"

    def setup(self, *, control: Control) -> None:
        super().setup(control=control)
        self._ops = {"sum": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN,
                     "prod": self.MPI.PROD, "none": self.MPI.SUM}

    def allocate(self, *, send_len, recv_len, dtype, in_place):
        return _host.allocate(send_len, recv_len, dtype, in_place)

    def bind(self, buffers, *, collective, send_len, recv_len, op, root) -> Bound:
        call = _calls(self.comm, buffers.send, buffers.recv, send_len, recv_len, self._ops[op], root)[collective]()
        keeps = buffers.in_place and self.rank == root
        return _host.bound_in_place(call, buffers, recv_len, keeps_data=keeps)

    def barrier(self) -> None:
        self.comm.Barrier()
