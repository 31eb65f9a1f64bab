"""The contract every collective module fulfils, and what each backend family hands it.

A collective knows its buffers (lengths for n ranks, what each rank must find after the call,
the bus-bandwidth factor) and how each family of backend issues it:

* ``buffer_call``: mpi4py's buffer API (``comm.Allreduce`` …) on send and receive buffers;
* ``object_call``: mpi4py's pickle API (``comm.allreduce`` …), results returned as objects;
* ``tensor_call``: torch.distributed on tensors, returning the call and what to reset before
  the check (torch reduces and broadcasts in place).

A family the collective does not implement returns None: the plan reports the combination as
unsupported before any rank starts. Sizes follow nccl-tests: for allreduce, bcast and reduce
the size is each rank's buffer; for the others it is the whole n-rank array (each rank sends or
receives ``size / n``). Lengths are in elements. Each rank's send buffer holds
``pattern.value(rank, k, n)`` at index k (``collbench.collectives.datatypes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import numpy as np

from collbench.collectives.datatypes import CheckPattern


@dataclass(frozen=True)
class BufferCall:
    """What an mpi4py buffer-API backend provides: its communicator, slices of its buffers
    (send and receive are the same object for in-place collectives), the MPI op, the root."""

    comm: Any
    send: Any
    recv: Any
    op: Any
    root: int


@dataclass(frozen=True)
class ObjectCall:
    """What an mpi4py pickle-API backend provides: the send slice and numpy's ufunc for the op."""

    comm: Any
    send: np.ndarray
    rank: int
    n: int
    recv_len: int
    ufunc: Optional[np.ufunc]
    root: int

    def chunks(self, length: int) -> list:
        """The send slice cut into n pieces of ``length`` elements."""
        return [self.send[j * length:(j + 1) * length] for j in range(self.n)]


@dataclass(frozen=True)
class TensorCall:
    """What a torch.distributed backend provides: the module, its group, tensor slices, the op,
    and the device the tensors live on (``collbench.backends.devices.TorchDevice``)."""

    dist: Any
    group: Any
    send: Any
    recv: Any
    rank: int
    n: int
    root: int
    op: Any
    device: Any

    def first_available(self, *names: str) -> Callable:
        """The first of ``names`` this torch has (names changed across torch versions)."""
        for name in names:
            if hasattr(self.dist, name):
                return getattr(self.dist, name)
        raise AttributeError(names[0])

    def restore(self) -> None:
        """Refill the in-place work buffer (the receive side) from the untouched send side."""
        self.recv.copy_(self.send)

    def poison(self) -> None:
        """Overwrite the receive side, so that only what arrives passes the check."""
        self.device.poison(self.recv)

    def poison_unless_root(self) -> None:
        if self.rank != self.root:
            self.poison()

    def no_reset(self) -> None:
        pass


class Collective:
    """One collective. Subclasses set the class attributes and implement what applies."""

    name: ClassVar[str]
    position: ClassVar[int]           # where it comes in ``all`` and in tables
    size_is_per_rank: ClassVar[bool] = True   # False: the size is the whole n-rank array
    send_div: ClassVar[bool] = False  # each rank sends size / n
    recv_div: ClassVar[bool] = False  # each rank receives size / n
    reduces: ClassVar[bool] = False   # takes --op
    rooted: ClassVar[bool] = False    # takes --root
    in_place: ClassVar[bool] = False  # one buffer serves as send and receive
    moves_data: ClassVar[bool] = True  # False for barrier: one row, no sizes
    #: where the size is the whole array, what each rank does with its size / n (command help)
    part_per_rank: ClassVar[str] = "has"
    #: peak memory beyond the base per byte of send + receive buffers, (root, others), for each
    #: family, measured by benchmarks/memory_factors.py; a family or collective without figures
    #: gets the largest measured (``collbench.measure.memory.factor``)
    memory_factors: ClassVar[dict] = {}

    def bus_factor(self, n: int) -> float:
        """Bus bandwidth = algorithm bandwidth × this (nccl-tests' convention)."""
        return 1.0

    def lengths(self, elements: int, n: int) -> tuple[int, int]:
        """(send, receive) lengths in elements for a size of ``elements`` on n ranks."""
        send = elements // n if self.send_div else elements
        recv = elements // n if self.recv_div else elements
        return send, recv

    def granule(self, n: int) -> int:
        """Element counts must be a multiple of this for the data to split evenly over n ranks."""
        return 1 if self.size_is_per_rank else n

    def expected(self, pattern: CheckPattern, n: int, rank: int, root: int, elements: int,
                 idx: np.ndarray) -> Optional[np.ndarray]:
        """What ``rank`` must find at receive indices ``idx``, or None when it receives nothing."""
        return None

    def buffer_call(self, c: BufferCall) -> Optional[Callable[[], Any]]:
        return None

    def object_call(self, c: ObjectCall) -> Optional[Callable[[], Any]]:
        return None

    def tensor_call(self, c: TensorCall) -> Optional[tuple[Callable[[], Any], Callable[[], None]]]:
        return None

    def issued_by(self, family: str) -> bool:
        """Whether this collective implements ``family`` (buffer, object or tensor)."""
        method = f"{family}_call"
        return getattr(type(self), method) is not getattr(Collective, method)

    def __repr__(self) -> str:
        return f"<collective {self.name}>"


def ring_factor(n: int) -> float:
    """(n - 1) / n: what each rank moves of the whole array in a ring algorithm."""
    return (n - 1) / n
