"""Where a backend's buffers live: a small strategy apart from the communication library.

A backend is a library driving a device. The device owns allocation, filling, poisoning the
receive side before a check, copies back to the host, synchronisation and its free memory:

* ``HostDevice``: numpy arrays in main memory, page-aligned (mpi, mpi-pickle);
* ``MpiMemoryDevice``: numpy arrays over memory from ``MPI.Alloc_mem`` (mpi ``--buffers mpi``),
  which the library may have registered with the network or placed in shared memory;
* ``TorchDevice``: torch tensors on a torch device: the CPU (gloo) or one CUDA GPU (nccl, and
  mpi ``--buffers cuda`` on a CUDA-aware MPI).

Room for more: a cupy device would implement the same few methods, and any backend whose
library accepts its arrays (mpi4py takes CUDA arrays from a CUDA-aware MPI) could drive it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

PAGE = 4096


@dataclass
class Buffers:
    send: Any
    recv: Any               # the same object as ``send`` for in-place collectives
    in_place: bool
    held: list = field(default_factory=list)     # what the device must free (MPI.Alloc_mem's memory)


def sentinel(dtype) -> float:
    """What a receive side is overwritten with before a check: NaN, or -1 for integers (255 in
    uint8: -1 wrapped, as torch's ``fill_(-1)`` writes it; a pair's fields take -1 each)."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return np.nan
    return np.iinfo(dtype).max if np.issubdtype(dtype, np.unsignedinteger) else -1


class HostDevice:
    """numpy arrays in main memory; every call is complete when it returns."""

    name = "host"
    kind = "numpy"            # the row's buffers column
    asynchronous = False

    @staticmethod
    def _aligned_zeros(length: int, dtype: np.dtype) -> np.ndarray:
        """A zeroed array starting on a page boundary (as OSU aligns its buffers), so results do
        not depend on where the allocator happened to place a small buffer."""
        dtype = np.dtype(dtype)
        raw = np.zeros(length * dtype.itemsize + PAGE, dtype=np.uint8)
        offset = (-raw.ctypes.data) % PAGE
        return raw[offset:offset + length * dtype.itemsize].view(dtype)

    def allocate(self, send_len: int, recv_len: int, dtype, in_place: bool) -> Buffers:
        """``dtype``: a ``collbench.benchmarks.datatypes.Dtype`` that numpy has."""
        send = self._aligned_zeros(max(send_len, 1), dtype.numpy)
        recv = send if in_place else self._aligned_zeros(max(recv_len, 1), dtype.numpy)
        return Buffers(send, recv, in_place)

    def fill(self, buffers: Buffers, start: int, values: np.ndarray) -> None:
        buffers.send[start:start + len(values)] = values

    def poison(self, view) -> None:
        view[:] = sentinel(view.dtype)

    def to_host(self, view) -> np.ndarray:
        return view

    def synchronize(self) -> None:
        pass

    def free_memory(self) -> Optional[int]:
        """None: host memory is budgeted by collbench.measure.memory for the whole node."""
        return None

    def release(self, buffers: Buffers) -> None:
        """Give the buffers back (numpy's go with their last reference)."""


class MpiMemoryDevice(HostDevice):
    """numpy arrays over memory the MPI library allocated (``MPI.Alloc_mem``), freed with
    ``MPI.Free_mem`` when the block that used them ends."""

    name = "MPI.Alloc_mem"
    kind = "mpi"

    def __init__(self, MPI) -> None:
        self.MPI = MPI

    def _array(self, length: int, dtype, held: list) -> np.ndarray:
        dtype = np.dtype(dtype)
        memory = self.MPI.Alloc_mem(max(length, 1) * dtype.itemsize)
        held.append(memory)
        array = np.frombuffer(memory, dtype=np.uint8).view(dtype)
        array[:] = 0
        return array

    def allocate(self, send_len: int, recv_len: int, dtype, in_place: bool) -> Buffers:
        held: list = []
        send = self._array(max(send_len, 1), dtype.numpy, held)
        recv = send if in_place else self._array(max(recv_len, 1), dtype.numpy, held)
        return Buffers(send, recv, in_place, held)

    def release(self, buffers: Buffers) -> None:
        for memory in buffers.held:
            self.MPI.Free_mem(memory)
        buffers.held.clear()

class TorchDevice:
    """torch tensors on ``device`` (a ``torch.device``): the CPU, or one CUDA GPU."""

    #: the element types it takes: torch's names are collbench's
    DTYPES = frozenset({"float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8"})

    def __init__(self, torch, device) -> None:
        self.torch, self.device = torch, device
        self.name = str(device)
        self.asynchronous = device.type == "cuda"
        self.kind = "cuda" if self.asynchronous else "torch"

    def allocate(self, send_len: int, recv_len: int, dtype, in_place: bool) -> Buffers:
        """``dtype``: a ``collbench.benchmarks.datatypes.Dtype`` (bfloat16 included)."""
        tdt = getattr(self.torch, dtype.name)
        send = self.torch.zeros(max(send_len, 1), dtype=tdt, device=self.device)
        recv = send if in_place else self.torch.zeros(max(recv_len, 1), dtype=tdt, device=self.device)
        return Buffers(send, recv, in_place)

    def fill(self, buffers: Buffers, start: int, values: np.ndarray) -> None:
        buffers.send[start:start + len(values)].copy_(self.torch.from_numpy(np.ascontiguousarray(values)))

    def poison(self, view) -> None:
        view.fill_(float("nan") if view.is_floating_point() else -1)

    def to_host(self, view) -> np.ndarray:
        host = view.cpu()
        if host.dtype == self.torch.bfloat16:      # numpy has no bfloat16: widen, exactly
            host = host.float()
        return host.numpy()

    def synchronize(self) -> None:
        if self.asynchronous:
            self.torch.cuda.synchronize(self.device)

    def free_memory(self) -> Optional[int]:
        if not self.asynchronous:
            return None
        free, _total = self.torch.cuda.mem_get_info(self.device)
        return int(free)

    def release(self, buffers: Buffers) -> None:
        """torch's tensors go with their last reference."""
