"""The collectives, as data: buffer lengths, expected results and bus-bandwidth factors.

Size semantics follow nccl-tests so that bus bandwidth means the same thing: for allreduce,
bcast and reduce the size is each rank's buffer; for the others it is the whole n-rank array
(each rank contributes or receives ``size / n``). Lengths here are in elements.

Each rank's send buffer holds ``op.value(rank, k, n)`` at index k. ``expected`` returns what
rank ``rank`` must find at receive indices ``idx``, or None when that rank receives nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from collbench.collectives.datatypes import ReduceOp
from collbench.errors import UsageError

Expected = Callable[[ReduceOp, int, int, int, int, np.ndarray], Optional[np.ndarray]]


@dataclass(frozen=True)
class Collective:
    """One collective: what it moves, how to check it, how to turn time into bus bandwidth."""

    name: str
    bus_factor: Callable[[int], float]
    size_is_per_rank: bool       # True: size = each rank's buffer; False: size = whole n-rank array
    send_div: bool               # send length = elements / n if send_div, else elements
    recv_div: bool
    reduces: bool                # takes --op
    rooted: bool                 # takes --root
    in_place: bool               # one buffer serves as send and receive (bcast)
    expected: Expected           # (op, n, rank, root, elements, idx) -> values or None
    moves_data: bool = True      # False for barrier: one row, no sizes

    def lengths(self, elements: int, n: int) -> tuple[int, int]:
        """(send, receive) lengths in elements for a size of ``elements`` on n ranks."""
        send = elements // n if self.send_div else elements
        recv = elements // n if self.recv_div else elements
        return send, recv

    def granule(self, n: int) -> int:
        """Element counts must be a multiple of this for the data to split evenly over n ranks."""
        return 1 if self.size_is_per_rank else n


def _ring(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


def _expect_allreduce(op, n, rank, root, elements, idx):
    return op.reduced(idx, n)


def _expect_reduce(op, n, rank, root, elements, idx):
    return op.reduced(idx, n) if rank == root else None


def _expect_bcast(op, n, rank, root, elements, idx):
    return op.value(root, idx, n)


def _expect_allgather(op, n, rank, root, elements, idx):
    chunk = elements // n
    return op.value(idx // chunk, idx % chunk, n)


def _expect_gather(op, n, rank, root, elements, idx):
    return _expect_allgather(op, n, rank, root, elements, idx) if rank == root else None


def _expect_scatter(op, n, rank, root, elements, idx):
    return op.value(root, rank * (elements // n) + idx, n)


def _expect_alltoall(op, n, rank, root, elements, idx):
    chunk = elements // n
    return op.value(idx // chunk, rank * chunk + idx % chunk, n)


def _expect_reduce_scatter(op, n, rank, root, elements, idx):
    return op.reduced(rank * (elements // n) + idx, n)


def _expect_nothing(op, n, rank, root, elements, idx):
    return None


COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("allreduce", lambda n: 2 * (n - 1) / n, True, False, False, True, False, False, _expect_allreduce),
    Collective("bcast", _one, True, False, False, False, True, True, _expect_bcast),
    Collective("reduce", _one, True, False, False, True, True, False, _expect_reduce),
    Collective("allgather", _ring, False, True, False, False, False, False, _expect_allgather),
    Collective("gather", _ring, False, True, False, False, True, False, _expect_gather),
    Collective("scatter", _ring, False, False, True, False, True, False, _expect_scatter),
    Collective("alltoall", _ring, False, False, False, False, False, False, _expect_alltoall),
    Collective("reduce_scatter", _ring, False, False, True, True, False, False, _expect_reduce_scatter),
    Collective("barrier", _one, True, False, False, False, False, False, _expect_nothing, moves_data=False),
)}

ORDER = tuple(COLLECTIVES)


def get_collective(name: str) -> Collective:
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise UsageError(f"unknown collective {name!r}; choose one of: {', '.join(ORDER)}") from None
