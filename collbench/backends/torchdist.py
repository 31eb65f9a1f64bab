"""What the gloo and nccl backends share: torch.distributed calls for each collective.

torch's reductions and broadcast work in place, so allreduce and reduce run on a work buffer
(the receive side); before the check it is refilled from the untouched send buffer. Between
timed iterations it is not: values keep reducing into it, which costs the same time.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from collbench.backends import _torch
from collbench.backends.base import Backend, Bound, Control, grouped
from collbench.backends.devices import TorchDevice
from collbench.benchmarks.base import COLLECTIVE, IN_PLACE, TensorCall


class TorchBackend(Backend):
    """A torch.distributed backend on its own process group; subclasses pick the torch device."""

    pg_backend: str = ""
    family = "tensor"
    #: collbench's reductions it issues, by torch's ReduceOp name
    reduce_ops = {"sum": "SUM", "max": "MAX", "min": "MIN", "prod": "PRODUCT", "band": "BAND",
                  "bor": "BOR",
                  "avg": "AVG"}
    #: why the others cannot be measured here
    missing_ops = {"land": "torch.distributed has no logical and (ReduceOp.BAND is bitwise)",
                   "lor": "torch.distributed has no logical or (ReduceOp.BOR is bitwise)",
                   "maxloc": "torch.distributed has no value-index reductions; use mpi or "
                             "mpi-pickle",
                   "minloc": "torch.distributed has no value-index reductions; use mpi or "
                             "mpi-pickle"}
    ops = tuple(reduce_ops)
    takes_options = ("init_method", "api", "placement", "cache", "coalesce")

    def setup(self, *, control: Control) -> None:
        self.torch, self.dist = _torch.torch_modules()
        _torch.init_default_group(control, self.options.init_method)
        self.device = TorchDevice(self.torch, self._torch_device())
        # the group measured on: the whole, or this rank's
        self.whole = self.group = self._new_group()
        self._ops = {**{op: getattr(self.dist.ReduceOp, name)
                        for op, name in self.reduce_ops.items()},
                     "none": self.dist.ReduceOp.SUM}

    def _torch_device(self):
        return self.torch.device("cpu")

    groups: tuple = ()

    def _new_group(self, ranks=None):
        """A process group over ``ranks`` (every rank: None); every rank calls it for every
        group."""
        return self.dist.new_group(ranks=ranks, backend=self.pg_backend)

    def split(self, groups: tuple) -> None:
        """A process group per group, made by every rank in the same order (``new_group``);
        ``whole`` stays for the barrier before each sample, which starts every group at once."""
        self.groups = groups
        me = self.dist.get_rank()
        for members in groups:
            group = self._new_group(list(members))
            if me in members:
                self.group = group

    @property
    def rank(self) -> int:
        return self.dist.get_rank(self.group)

    @property
    def size(self) -> int:
        return self.dist.get_world_size(self.group)

    @classmethod
    def supports(cls, *, collective, dtype: np.dtype, op: str) -> Optional[str]:
        if dtype.name not in TorchDevice.DTYPES and collective.moves_data:
            return f"dtype {dtype.name} has no torch equivalent here"
        if collective.reduces and op not in cls.reduce_ops:
            return cls.missing_ops.get(op, f"{cls.name} has no {op} reduction")
        return super().supports(collective=collective, dtype=dtype, op=op)

    def bind(self, buffers, *, collective, send_len, recv_len, op, roles) -> Bound:
        sv = buffers.send[:send_len]
        rv = sv if buffers.in_place else buffers.recv[:recv_len]
        api = self.options.api
        in_place = collective.placement(self.family, self.options.placement) == IN_PLACE
        call, reset = collective.tensor_call(TensorCall(self.rank, self.size, roles, self.dist,
                                                        self.group, sv, rv,
                                                        self._ops[op], self.device, api, in_place))
        if api != "blocking" and collective.kind == COLLECTIVE:
            sync = self.device.synchronize

            def complete(work):
                work.wait()            # on a GPU: the current stream waits for the library's
                sync()
            return Bound.two_step(call, complete, reset, lambda: rv)
        blocking = self._blocking(call)

        def checked():
            reset()
            blocking()
            return rv

        return Bound(run=call, run_blocking=blocking, checked=checked)

    def coalesced(self, bounds: list) -> Bound:
        """The calls started inside torch's coalescing manager, then waited for together; on a GPU
        the stream is synchronised after. On a GPU the manager puts them in one NCCL group; on
        the host (gloo) it fuses allreduce, allgather and reduce_scatter into one call each
        group and leaves the others to go one by one, started together: their own works are
        waited for too (the fused calls' stand-ins, which refuse a wait, are not)."""
        dist, group = self.dist, self.group
        device = self.device.device if self.device.asynchronous else None
        sync = self.device.synchronize

        def issue(starts: list) -> None:
            with dist._coalescing_manager(group=group, device=device, async_ops=True) as manager:
                works = [start() for start in starts]
            manager.wait()
            for work in works:
                if work is not None and type(work).__name__ != "_IllegalWork":
                    work.wait()
            sync()

        return grouped(bounds, issue)

    def _blocking(self, call: Callable) -> Callable:
        """A call that returns once this rank's part is complete: on an asynchronous device (a
        CUDA stream) followed by a synchronise; gloo's calls already block."""
        if not self.device.asynchronous:
            return call
        sync = self.device.synchronize

        def blocking():
            call()
            sync()

        return blocking

    def barrier(self) -> None:
        self.dist.barrier(group=self.whole)

    def versions(self) -> dict:
        return _torch.torch_versions()

    def row_axes(self) -> dict:
        """How the ranks met is the default group's (``--init-method``), made once per process."""
        return {**super().row_axes(), "init_method": _torch.init_scheme()}

    def renew(self) -> None:
        if self.group is not self.whole:
            self.dist.destroy_process_group(self.group)
        self.dist.destroy_process_group(self.whole)
        self.whole = self.group = self._new_group()
        if self.groups:
            self.split(self.groups)

    def close(self) -> None:
        # Tears down every group, the default one included: the run is over for this process.
        # The groups' objects go too: each holds torch's store (remove_rendezvous_file).
        if self.dist.is_initialized():
            self.dist.destroy_process_group()
        self.whole = self.group = None

    def closed(self, control: Control) -> None:
        _torch.remove_rendezvous_file(control)
