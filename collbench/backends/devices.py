"""Where a backend's buffers live: a small strategy apart from the communication library.

A backend is a library driving a device. The device owns allocation, the array operations the
result check runs where the buffers are, poisoning the receive side before a check,
synchronisation and its free memory: ``HostDevice`` (numpy in main memory), ``MpiMemoryDevice``
(numpy over ``MPI.Alloc_mem``) and ``TorchDevice`` (torch tensors on the CPU or one CUDA GPU).
Kept apart, another array library (cupy, say) can be one more device, driven by any backend
whose library accepts its arrays (docs/plugins.md, "The interface").
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from collbench.backends import pages
from collbench.benchmarks.check import sentinel

PAGE = pages.PAGE         # what host buffers are aligned to (collbench.backends.pages)
#: What torch warns when a CUDA graph's capture recorded nothing.
EMPTY_GRAPH = "CUDA Graph is empty"


@dataclass
class Buffers:
    send: Any
    recv: Any               # the same object as ``send`` for in-place collectives
    in_place: bool
    held: list = field(default_factory=list)     # what the device must free (MPI.Alloc_mem's
                                                 # memory)


def _spin(units: int) -> float:
    """A fixed amount of arithmetic in the interpreter, which holds this core (and Python's lock)
    for as long as it runs: the compute the overlap puts between a call's start and its wait."""
    x = 0.0
    for _ in range(units):
        x = x * 0.5 + 1.0
    return x


class HostCompute:
    """Work on the host between a call's start and its wait (``--api nonblocking``: OSU's dummy
    compute): a fixed number of steps of ``_spin``, calibrated to last a given time on an idle
    core, so that what the call takes from the core shows as a longer compute."""

    def __init__(self) -> None:
        self.units, self._took, self._rate = 1, 0.0, 0.0

    def _time(self, units: int) -> float:
        t0 = time.perf_counter()
        _spin(units)
        return time.perf_counter() - t0

    def calibrate(self, seconds: float) -> None:
        """Steps that take at least ``seconds`` on this core, from the rate of a short try (a few
        milliseconds, once), checked (the shortest of three runs; of one from 50 ms on, where a
        scheduler's tick is a small share) and lengthened, at most three times: a calibration costs
        a few times ``seconds``, whatever the size."""
        if not self._rate:
            self._rate = 20_000 / max(min(self._time(20_000) for _ in range(3)), 1e-9)
        runs = 3 if seconds < 0.05 else 1
        units = max(1, int(seconds * self._rate))
        for _ in range(3):
            took = min(self._time(units) for _ in range(runs))
            if took >= seconds:
                break
            units = int(units * seconds / max(took, 1e-9) * 1.05) + 1
        self.units = units

    def run(self) -> None:
        t0 = time.perf_counter()
        _spin(self.units)
        self._took = time.perf_counter() - t0

    def seconds(self) -> float:
        """How long the last ``run`` took."""
        return self._took


class HostDevice:
    """numpy arrays in main memory; every call is complete when it returns."""

    name = "host"
    kind = "numpy"            # the row's buffers column
    asynchronous = False

    @staticmethod
    def _aligned_zeros(length: int, dtype: np.dtype) -> np.ndarray:
        """A zeroed array starting on a page boundary (as OSU aligns its buffers), so results do
        not depend on where the allocator happened to place a small buffer, on the pages
        ``collbench.backends.pages`` says (--pages)."""
        dtype = np.dtype(dtype)
        return pages.zeros(length * dtype.itemsize).view(dtype)

    def allocate(self, send_len: int, recv_len: int, dtype, in_place: bool) -> Buffers:
        """``dtype``: a ``collbench.benchmarks.dtypes.Dtype`` that numpy has."""
        send = self._aligned_zeros(max(send_len, 1), dtype.numpy)
        recv = send if in_place else self._aligned_zeros(max(recv_len, 1), dtype.numpy)
        return Buffers(send, recv, in_place)

    @staticmethod
    def operand(array):
        """What the check works on for ``array`` (a buffer's slice): the array itself."""
        return array

    def table(self, values: np.ndarray, dtype) -> np.ndarray:
        """Check values (``values``, of ``dtype.host``) as an array of the buffers' type."""
        return np.ascontiguousarray(values,
                                    dtype=dtype.numpy if dtype.numpy is not None else dtype.host)

    @staticmethod
    def count(mask) -> int:
        return int(np.count_nonzero(mask))

    @staticmethod
    def widen(values) -> np.ndarray:
        return values.astype(np.float64)

    def poison(self, view) -> None:
        view[:] = sentinel(view.dtype)

    def synchronize(self) -> None:
        pass

    @staticmethod
    def compute() -> HostCompute:
        """What the overlap computes between a call's start and its wait: work on this core."""
        return HostCompute()

    def free_memory(self) -> Optional[int]:
        """None: host memory is budgeted by collbench.measure.memory for the whole node."""
        return None

    @staticmethod
    def cache_size() -> tuple:
        """(bytes, where that came from) of the cache these buffers sit behind: the host's last
        level (``--cache cold`` spans it)."""
        from collbench.measure import caches
        return caches.host_cache()

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
        raw = np.frombuffer(memory, dtype=np.uint8)
        pages.advise(raw.ctypes.data, raw.nbytes)
        array = raw.view(dtype)
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
    DTYPES = frozenset({"float32", "float64", "float16", "bfloat16", "int32", "int64", "int8",
                        "uint8"})

    def __init__(self, torch, device) -> None:
        self.torch, self.device = torch, device
        self.name = str(device)
        self.asynchronous = device.type == "cuda"
        self.kind = "cuda" if self.asynchronous else "torch"

    def allocate(self, send_len: int, recv_len: int, dtype, in_place: bool) -> Buffers:
        """``dtype``: a ``collbench.benchmarks.dtypes.Dtype`` (bfloat16 included)."""
        tdt = getattr(self.torch, dtype.name)

        def zeros(length: int):
            if self.asynchronous:
                return self.torch.zeros(length, dtype=tdt, device=self.device)
            # main memory on the pages --pages says, as the host's numpy buffers are
            size = self.torch.empty(0, dtype=tdt).element_size()
            return self.torch.from_numpy(pages.zeros(length * size)).view(tdt)

        send = zeros(max(send_len, 1))
        recv = send if in_place else zeros(max(recv_len, 1))
        return Buffers(send, recv, in_place)

    def _as_numpy(self, dtype_name: str) -> bool:
        """Tensors in main memory of a type numpy has are checked as numpy views of themselves:
        numpy compares and counts them several times faster than torch on the CPU."""
        return not self.asynchronous and dtype_name != "bfloat16"

    def operand(self, tensor):
        """What the check works on for ``tensor`` (a buffer's slice): itself on a GPU, or where
        numpy lacks its type; else a numpy view of the same memory."""
        return tensor.numpy() if self._as_numpy(str(tensor.dtype).replace("torch.", "")) else tensor

    def table(self, values: np.ndarray, dtype):
        """Check values (``values``, of ``dtype.host``: float32 for bfloat16, exact for them) as a
        tensor of the buffers' type on this device (a period of a pattern, a few KiB), or as a
        numpy array where ``operand`` gives numpy views."""
        if self._as_numpy(dtype.name):
            return np.ascontiguousarray(values, dtype=dtype.numpy)
        host = self.torch.from_numpy(np.ascontiguousarray(values))
        return host.to(device=self.device, dtype=getattr(self.torch, dtype.name))

    def count(self, mask):
        """A GPU's count stays there (a tensor) until the check has added up every piece;
        count_nonzero, not sum, which is several times slower."""
        if isinstance(mask, np.ndarray):
            return int(np.count_nonzero(mask))
        return self.torch.count_nonzero(mask)

    @staticmethod
    def widen(values):
        return values.astype(np.float64) if isinstance(values, np.ndarray) else values.double()

    def poison(self, view) -> None:
        view.fill_(float("nan") if view.is_floating_point() else -1)

    def synchronize(self) -> None:
        if self.asynchronous:
            self.torch.cuda.synchronize(self.device)

    def clock(self) -> "CudaClock":
        """The GPU's own clock: CUDA events on the current stream (``--timing graph, device``)."""
        return CudaClock(self.torch, self.device)

    def compute(self):
        """What the overlap computes between a call's start and its wait: on a GPU a kernel on the
        current stream, which runs beside the library's own stream; on the CPU, work on this
        core."""
        return (CudaCompute(CudaClock(self.torch, self.device))
                if self.asynchronous else HostCompute())

    def capture(self, run, calls: int):
        """``calls`` calls of ``run`` captured once in a CUDA graph; returns what replays them, and
        whether the capture recorded no GPU work (NCCL queues nothing for an in-place collective
        on one rank; torch then warns of an empty graph, which here is no mistake to report).
        As torch asks: a few calls on a side stream first, so that the library's lazy set-up
        (NCCL's, the caching allocator's) is not captured."""
        torch = self.torch
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(3):
                run()
        current.wait_stream(side)
        self.synchronize()
        graph = torch.cuda.CUDAGraph()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    run()
        self.synchronize()
        empty = False
        for warning in said:
            if EMPTY_GRAPH in str(warning.message):
                empty = True
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                       warning.lineno)
        return graph.replay, empty

    def cache_size(self) -> tuple:
        """(bytes, where that came from) of the cache these buffers sit behind: a GPU's L2, or
        the host's last level for tensors in main memory (``--cache cold`` spans it)."""
        from collbench.measure import caches
        if not self.asynchronous:                    # main memory: the host's
            return caches.host_cache()
        size = int(getattr(self.torch.cuda.get_device_properties(self.device), "L2_cache_size", 0)
                   or 0)
        return (size, "the GPU's L2, torch.cuda.get_device_properties") if size > 0 else \
            (caches.ASSUMED_BYTES, "assumed: torch does not say the GPU's L2")

    def free_memory(self) -> Optional[int]:
        if not self.asynchronous:
            return None
        free, _total = self.torch.cuda.mem_get_info(self.device)
        return int(free)

    def release(self, buffers: Buffers) -> None:
        """torch's tensors go with their last reference."""


class CudaClock:
    """Times work on the current CUDA stream with its own events, and holds the stream for the
    device timing: ``hold`` queues a kernel that spins on the GPU for the hold's length
    (``torch.cuda._sleep``), then an event; ``end`` tells whether that event was still pending
    once the start event, the call and the stop event were all queued, that is whether the hold
    kept the host's dispatch out of the interval (nvbench holds its stream the same way, with a
    kernel that waits for the host's word)."""

    def __init__(self, torch, device) -> None:
        self.torch, self.device = torch, device
        self.started = torch.cuda.Event(enable_timing=True)
        self.stopped = torch.cuda.Event(enable_timing=True)
        self.released = torch.cuda.Event()
        self.hold_s, self.longest_s, self._cycles = 0.0, 0.0, 0

    def begin(self) -> None:
        self.started.record()

    def end(self) -> bool:
        """Queues the stop event; whether the stream was still held then (True without a hold)."""
        self.stopped.record()
        return not self.hold_s or not self.released.query()

    def seconds(self) -> float:
        """The device's time from the start event to the stop event, once it has passed both."""
        self.stopped.synchronize()
        return self.started.elapsed_time(self.stopped) * 1e-3

    def hold_for(self, seconds: float, longest: float) -> None:
        self.hold_s, self.longest_s = seconds, longest
        self._cycles = int(seconds * self._cycles_per_second())

    def lengthen(self) -> None:
        """A hold ended before its call was queued: twice as long from now on, up to the longest."""
        self.hold_for(min(self.longest_s, 2 * self.hold_s), self.longest_s)

    def hold(self) -> None:
        self.torch.cuda._sleep(self._cycles)
        self.released.record()

    def _cycles_per_second(self) -> float:
        """How many of ``_sleep``'s cycles make a second on this GPU, measured once."""
        if not hasattr(self, "_rate"):
            cycles = 1_000_000
            self.torch.cuda._sleep(cycles)          # the first launch loads the kernel
            self.begin()
            self.torch.cuda._sleep(cycles)
            self.stopped.record()
            self._rate = cycles / max(self.seconds(), 1e-9)
        return self._rate

    def close(self) -> None:
        self.torch.cuda.synchronize(self.device)


class CudaCompute:
    """A kernel that spins on the GPU for a set time (``torch.cuda._sleep``) between a call's
    start and its wait, timed by its own events; the caller synchronises before ``seconds``."""

    def __init__(self, clock: CudaClock) -> None:
        self.clock, self._cycles = clock, 1

    def calibrate(self, seconds: float) -> None:
        self._cycles = max(1, int(seconds * self.clock._cycles_per_second()))

    def run(self) -> None:
        self.clock.begin()
        self.clock.torch.cuda._sleep(self._cycles)
        self.clock.stopped.record()

    def seconds(self) -> float:
        return self.clock.seconds()
