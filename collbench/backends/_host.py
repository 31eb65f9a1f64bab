"""Host (numpy) buffers shared by the backends whose data lives in main memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from collbench.backends.base import Bound


@dataclass
class HostBuffers:
    send: np.ndarray
    recv: np.ndarray
    in_place: bool


PAGE = 4096


def _aligned_zeros(length: int, dtype: np.dtype) -> np.ndarray:
    """A zeroed array starting on a page boundary (as OSU aligns its buffers), so results do
    not depend on where the allocator happened to place a small buffer."""
    dtype = np.dtype(dtype)
    raw = np.zeros(length * dtype.itemsize + PAGE, dtype=np.uint8)
    offset = (-raw.ctypes.data) % PAGE
    return raw[offset:offset + length * dtype.itemsize].view(dtype)


def allocate(send_len: int, recv_len: int, dtype: np.dtype, in_place: bool) -> HostBuffers:
    send = _aligned_zeros(max(send_len, 1), dtype)
    recv = send if in_place else _aligned_zeros(max(recv_len, 1), dtype)
    return HostBuffers(send, recv, in_place)


def fill(buffers: HostBuffers, start: int, values: np.ndarray) -> None:
    buffers.send[start:start + len(values)] = values


def sentinel(dtype: np.dtype):
    return np.nan if np.issubdtype(dtype, np.floating) else -1


def bound_in_place(call: Callable, buffers: HostBuffers, recv_len: int, *, keeps_data: bool) -> Bound:
    """A Bound for a call that writes into ``buffers.recv``.

    ``keeps_data``: this rank's receive side is also its source (the bcast root) and must not
    be poisoned before the check.
    """
    view = buffers.recv[:recv_len]

    def checked() -> Optional[np.ndarray]:
        if not keeps_data:
            view[:] = sentinel(view.dtype)
        call()
        return view

    return Bound(run=call, run_blocking=call, checked=checked)
