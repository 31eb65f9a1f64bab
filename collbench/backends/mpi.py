"""The ``mpi`` backend: mpi4py's buffer API (Allreduce, Bcast, ...) on numpy arrays, on memory
from ``MPI.Alloc_mem``, or on GPU memory through torch when the MPI library is CUDA-aware
(``--buffers``: the buffer's origin costs as much as the library, OSU's C binary and a numpy
buffer differ by more than their libraries do)."""

from __future__ import annotations

from typing import Optional

from collbench.backends._mpi import MpiBase, cuda_aware, library_version
from collbench.backends.base import Backend, Bound, Control
from collbench.backends.devices import MpiMemoryDevice, TorchDevice
from collbench.benchmarks.base import BufferCall
from collbench.errors import BackendDeclined


class MpiBackend(MpiBase, Backend):
    name = "mpi"
    family = "buffer"
    takes_options = ("buffers",)

    @classmethod
    def environment(cls) -> dict:
        """Whether the MPI library takes GPU memory (``--buffers cuda``), asked of a one-rank job."""
        from collbench.backends._mpi import probe_cuda_aware
        aware = probe_cuda_aware()
        return {"MPI CUDA-aware": {True: "yes (--buffers cuda)", False: "no (--buffers numpy or mpi)"}.get(
            aware, "unknown (the library does not say)")}

    @classmethod
    def options_problem(cls, options) -> Optional[str]:
        if options.buffers != "cuda":
            return None
        from collbench.backends._torch import torch_missing, torch_modules
        missing = torch_missing()
        if missing:
            return f"--buffers cuda allocates GPU memory through torch, and {missing}"
        torch, _ = torch_modules()
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            return f"--buffers cuda needs a CUDA GPU, and torch {torch.__version__} sees none"
        return None

    def setup(self, *, control: Control) -> None:
        super().setup(control=control)
        if self.options.buffers == "mpi":
            self.device = MpiMemoryDevice(self.MPI)
        elif self.options.buffers == "cuda":
            aware = control.bcast(cuda_aware() if control.rank == 0 else None)
            if not aware:
                raise BackendDeclined(f"--buffers cuda: {library_version()} "
                                      f"{'cannot take' if aware is False else 'does not say whether it takes'} "
                                      "GPU memory (MPIX_Query_cuda_support); use a CUDA-aware MPI build")
            from collbench.backends._torch import torch_modules
            from collbench.launch.launcher import detect
            torch, _ = torch_modules()
            index = detect().local_rank % torch.cuda.device_count()
            torch.cuda.set_device(index)
            self.device = TorchDevice(torch, torch.device("cuda", index))
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
            self.device.synchronize()           # GPU memory: the poison is written before MPI reads
            call()
            return self.device.to_host(view)

        return Bound(run=call, run_blocking=call, checked=checked)

    def barrier(self) -> None:
        self.whole.Barrier()
