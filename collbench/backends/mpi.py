"""The ``mpi`` backend: mpi4py's buffer API (Allreduce, Bcast, ...) on numpy arrays."""

from __future__ import annotations

from collbench.backends._mpi import MpiBase
from collbench.backends.base import Backend, Bound, Control
from collbench.benchmarks.base import BufferCall


class MpiBackend(MpiBase, Backend):
    name = "mpi"
    family = "buffer"

    def setup(self, *, control: Control) -> None:
        super().setup(control=control)
        self._ops = {"sum": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN,
                     "prod": self.MPI.PROD, "none": self.MPI.SUM}

    def bind(self, buffers, *, collective, send_len, recv_len, op, roles) -> Bound:
        call = collective.buffer_call(BufferCall(self.rank, self.size, roles, self.comm, buffers.send[:send_len],
                                                 buffers.recv[:recv_len], self._ops[op]))
        view = buffers.recv[:recv_len]
        keeps = buffers.in_place and self.rank == roles.root    # the bcast root's buffer is its source

        def checked():
            if not keeps:
                self.device.poison(view)
            call()
            return self.device.to_host(view)

        return Bound(run=call, run_blocking=call, checked=checked)

    def barrier(self) -> None:
        self.comm.Barrier()
