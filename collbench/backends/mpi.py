"""The ``mpi`` backend: mpi4py's buffer API (Allreduce, Bcast, ...) on numpy arrays, on memory
from ``MPI.Alloc_mem``, or on GPU memory through torch when the MPI library is CUDA-aware
(``--buffers``: the buffer's origin costs as much as the library, OSU's C binary and a numpy
buffer differ by more than their libraries do)."""

from __future__ import annotations

from typing import Optional

from collbench.backends._mpi import MPI_OPS, MpiBase, cuda_aware, library_version, mpi_pair_type
from collbench.backends.base import Backend, Bound, Control
from collbench.backends.devices import MpiMemoryDevice, TorchDevice
from collbench.benchmarks.base import COLLECTIVE, IN_PLACE, BufferCall
from collbench.benchmarks.dtypes import DTYPES, pair_dtype
from collbench.benchmarks.ops import element_of
from collbench.errors import BackendDeclined


def _pairs(collective, dtype, op: str):
    """The numpy type of ``collective``'s elements when they are value-index pairs (maxloc,
    minloc), else None."""
    element = element_of(dtype.name, op).numpy if collective.reduces else None
    return element if element is not None and element.names else None


def _wait(request) -> None:
    request.Wait()


class MpiBackend(MpiBase, Backend):
    name = "mpi"
    family = "buffer"
    takes_options = ("buffers", "api", "placement", "thread_level", "cache", "coalesce")

    @classmethod
    def environment(cls) -> dict:
        """Whether the MPI library takes GPU memory (``--buffers cuda``), asked of a one-rank
        job."""
        from collbench.backends._mpi import probe_cuda_aware
        aware = probe_cuda_aware()
        return {"MPI CUDA-aware": {True: "yes (--buffers cuda)",
                                   False: "no (--buffers numpy or mpi)"}.get(
            aware, "unknown (the library does not say)")}

    @classmethod
    def options_problem(cls, options, *, collective=None, dtype=None,
                        op: str = "") -> Optional[str]:
        if options.buffers != "cuda":
            return None
        if collective is not None:        # a tensor has no value-index pair type to lay them out in
            return f"{op}'s value-index pairs are host memory only; use --buffers numpy or mpi" \
                if _pairs(collective, dtype, op) is not None else None
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
                raise BackendDeclined(
                    f"--buffers cuda: {library_version()} "
                    f"{'cannot take' if aware is False else 'does not say whether it takes'} "
                    "GPU memory (MPIX_Query_cuda_support); use a CUDA-aware MPI build")
            from collbench.backends._torch import torch_modules
            from collbench.launch.origin.launcher import detect
            torch, _ = torch_modules()
            index = detect().local_rank % torch.cuda.device_count()
            torch.cuda.set_device(index)
            self.device = TorchDevice(torch, torch.device("cuda", index))
        self._ops = {**{op: getattr(self.MPI, op.upper()) for op in MPI_OPS}, "none": self.MPI.SUM}

    @classmethod
    def supports(cls, *, collective, dtype, op: str) -> Optional[str]:
        pair = _pairs(collective, dtype, op)
        if pair is not None and mpi_pair_type(pair) is None:
            paired = [name for name, d in DTYPES.items()
                      if d.numpy is not None and mpi_pair_type(pair_dtype(d))]
            return (f"MPI's value-index pair types hold {', '.join(paired)} only (MPI_FLOAT_INT, "
                    f"MPI_DOUBLE_INT, MPI_2INT, MPI_LONG_INT); mpi-pickle reduces {dtype.name} "
                    "pairs")
        return super().supports(collective=collective, dtype=dtype, op=op)

    def bind(self, buffers, *, collective, send_len, recv_len, op, roles) -> Bound:
        # maxloc's pairs: mpi4py is told their MPI type
        pair = mpi_pair_type(buffers.send.dtype)

        def typed(view):
            return [view, getattr(self.MPI, pair)] if pair else view

        # in place: the input lies in the receive buffer, which is as long as it needs
        in_place = (not buffers.in_place
                    and collective.placement(self.family, self.options.placement) == IN_PLACE)
        work = buffers.recv[:max(send_len, recv_len) if in_place else recv_len]
        c = BufferCall(self.rank, self.size, roles, self.comm, typed(buffers.send[:send_len]),
                       typed(buffers.recv[:recv_len]), self._ops[op], api=self.options.api,
                       in_place=in_place, in_place_marker=self.MPI.IN_PLACE, work=typed(work))
        call = collective.buffer_call(c)
        view = buffers.recv[:recv_len]
        # the bcast root's buffer is its source
        keeps = buffers.in_place and self.rank == roles.root
        at = collective.in_place_input(self.size, self.rank, roles, send_len) if in_place else None

        def reset():
            if not keeps:
                self.device.poison(work)
            # this rank's input, where the in-place call takes it
            if at is not None:
                buffers.recv[at:at + send_len] = buffers.send[:send_len]
            self.device.synchronize()           # GPU memory: the poison is written before MPI reads

        def result():
            self.device.synchronize()
            return view

        def release():                          # persistent requests, once no call uses them
            for request in c.requests:
                request.Free()

        if self.options.api != "blocking" and collective.kind == COLLECTIVE:
            return Bound.two_step(call, _wait, reset, result, release)

        def checked():
            reset()
            call()
            return result()

        return Bound(run=call, run_blocking=call, checked=checked, release=release)

    def barrier(self) -> None:
        self.whole.Barrier()
