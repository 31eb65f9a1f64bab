"""mpi4py access shared by the MPI backends and the MPI control channel.

mpi4py is imported here, lazily, so that MPI is initialised only in ranks that use it.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from functools import lru_cache
from typing import Any, Optional

import numpy as np

from collbench.backends import threads
from collbench.backends.base import Control
from collbench.benchmarks.dtypes import PAIR_FIELDS
from collbench.errors import BackendUnavailable, HostUsageError
from collbench.launch import processes
from collbench.launch.liveness import supervise

INSTALL_HINT = 'pip install "collbench[mpich]" (or pip install mpi4py mpich)'
#: The reductions MPI defines, by collbench's name (mpi4py's is it upper-cased: MPI.SUM,
#: MPI.MAXLOC); MPI has no average.
MPI_OPS = ("sum", "max", "min", "prod", "land", "lor", "band", "bor", "maxloc", "minloc")
#: MPI's predefined pair types (mpi4py's names; MPI_2INT is INT_INT), by the C type of the value
#: (numpy's character code: float, double, int, long, short).
MPI_PAIR_TYPES = {"f": "FLOAT_INT", "d": "DOUBLE_INT", "i": "INT_INT", "l": "LONG_INT",
                  "h": "SHORT_INT"}


def mpi_pair_type(numpy_type: np.dtype) -> Optional[str]:
    """The name of MPI's predefined type for buffers of ``numpy_type`` when it is a value–index
    pair (``collbench.benchmarks.dtypes.pair_dtype``; mpi4py cannot infer it from a structured
    array), else None."""
    if getattr(numpy_type, "names", None) != PAIR_FIELDS:       # a torch dtype has none
        return None
    value = numpy_type.fields[PAIR_FIELDS[0]][0]
    for code, name in MPI_PAIR_TYPES.items():
        if np.dtype(code) == value:
            return name
    return None


def mpi_module():
    """mpi4py's MPI, initialised; what the library prints on stderr as it starts is kept for the
    line that says why, should it end the rank there (``supervise.startup_output``)."""
    try:
        if "mpi4py.MPI" in sys.modules:
            from mpi4py import MPI
        else:
            with supervise.startup_output():
                threads.tell_mpi4py()
                from mpi4py import MPI
            import atexit
            atexit.register(_library_output_to_stderr)       # runs before MPI_Finalize
    except Exception as exc:  # mpi4py missing (ImportError), or no loadable libmpi (RuntimeError)
        limits = processes.low_limits()
        if "ulimit -v" in limits and any(s in str(exc) for s in ("failed to map segment",
                                                                 "Cannot allocate memory")):
            # every rank of the host has the same limit: the first says it, not each
            raise HostUsageError(f"MPI's library cannot be loaded on {socket.gethostname()}: the "
                                 f"address space ran out{limits}; raise the limit") from None
        raise BackendUnavailable(f"MPI is not usable here ({exc}); install it with: "
                                 f"{INSTALL_HINT}") from None
    return MPI


def _library_output_to_stderr() -> None:
    """As the rank leaves, what the MPI library still prints on stdout (UCX_LOG_LEVEL=debug
    writes hundreds of lines in MPI_Finalize) goes to stderr: stdout may hold the document the
    user asked for (-f json), which it would follow and spoil."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        os.dup2(2, 1)
    except OSError:
        pass


_PROBE = ("import mpi4py; mpi4py.rc.initialize = False\n"
          "from mpi4py import MPI; MPI.Get_library_version()")
#: MPICH answers only once MPI is initialised: a singleton, in a process of its own
_CUDA_PROBE = "from collbench.backends._mpi import cuda_aware; print('cuda-aware', cuda_aware())"


def cuda_aware() -> Optional[bool]:
    """Whether the MPI library loaded in this process takes CUDA device memory, as it says
    through ``MPIX_Query_cuda_support`` (MPICH and Open MPI export it; MPICH answers only after
    MPI_Init); None when it cannot say."""
    import ctypes
    mpi_module()
    try:
        with open("/proc/self/maps") as maps:
            paths = list(dict.fromkeys(line.split()[-1] for line in maps
                                       if "libmpi" in line.split()[-1]))
    except OSError:
        return None
    for path in paths:
        try:
            query = getattr(ctypes.CDLL(path), "MPIX_Query_cuda_support", None)
        except OSError:
            continue
        if query is not None:
            query.restype = ctypes.c_int
            return bool(query())
    return None


def probe_cuda_aware() -> Optional[bool]:
    """``cuda_aware`` of the library collbench's ranks would load, asked by a one-rank MPI job
    of its own (``collbench env``); None when it cannot say."""
    import subprocess
    import sys
    try:
        probe = subprocess.run([sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True,
                               timeout=30)
    except subprocess.TimeoutExpired:
        return None
    said = probe.stdout.split()
    return {"True": True, "False": False}.get(said[-1]) if said[:1] == ["cuda-aware"] else None


@lru_cache(maxsize=1)
def mpi_unavailable_reason() -> Optional[str]:
    """Why mpi4py cannot run here, or None.

    Without a launcher the MPI library is also loaded, in a separate process (this one must not
    load MPI before it is configured), and so in collbench's own local ranks, which must meet
    the verdict of the process that launched them (``--backend all``). Under a launcher that is
    skipped: an MPI launcher reports a missing library when MPI starts, and under torchrun the
    plan refuses MPI backends at once.
    """
    import importlib.util
    if importlib.util.find_spec("mpi4py") is None:
        return f"mpi4py is not installed; install it with: {INSTALL_HINT}"
    from collbench.launch.origin.launcher import detect
    from collbench.errors import UsageError
    try:
        if detect().name not in ("none", "collbench"):
            return None
    except UsageError:          # not a launch: load the library here, as without a launcher
        pass
    import subprocess
    import sys
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                           timeout=60)
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        return (f"no MPI library could be loaded ({lines[-1] if lines else 'unknown error'}); "
                f"install one with: {INSTALL_HINT}")
    return None


def library_version() -> str:
    from collbench.versions import tidy_library_version

    return tidy_library_version(mpi_module().Get_library_version())


def abort_world(code: int) -> bool:
    """End every rank of the MPI job with ``code``; False when MPI cannot be used here."""
    try:
        MPI = mpi_module()
        MPI.COMM_WORLD.Abort(code)
    except Exception:
        return False
    return True


def persistent_collectives(MPI, comm) -> bool:
    """Whether this MPI library and mpi4py have MPI-4's persistent collectives, asked of the
    library by making one on ``comm`` (every rank of it calls this): Open MPI 5 has them while it
    says it is MPI 3.1, so the version says nothing."""
    if not hasattr(MPI.Comm, "Allreduce_init"):
        return False
    try:
        request = comm.Allreduce_init(np.zeros(1), np.zeros(1), MPI.SUM)
    except (NotImplementedError, MPI.Exception):
        return False
    request.Free()
    return True


#: How a rank waits in collbench's own steps (the plan, a size's end, the results) for ranks that
#: arrive later: it polls for ``SPIN_S``, then sleeps between polls from ``FIRST_PAUSE_S``,
#: doubling up to ``LONGEST_PAUSE_S``. MPICH's blocking calls spin: a rank that waited there took
#: a core for as long as the others were away (3.0 CPU-s of a 3 s wait, benchmarks/waiting_cpu.py),
#: and on a host with more ranks than cores it took the core from the rank it waited for.
SPIN_S = 200e-6
FIRST_PAUSE_S = 50e-6
LONGEST_PAUSE_S = 5e-3


def wait_sleeping(request, clock=time.perf_counter, sleep=time.sleep) -> None:
    """Wait for ``request`` (an MPI request) to complete: polling first, then sleeping."""
    end = clock() + SPIN_S
    while not request.Test():
        if clock() > end:
            break
    else:
        return
    pause = FIRST_PAUSE_S
    while not request.Test():
        sleep(pause)
        pause = min(2 * pause, LONGEST_PAUSE_S)


class MpiControl(Control):
    def __init__(self) -> None:
        MPI = mpi_module()
        self._MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    @property
    def thread_level(self) -> str:
        """The MPI thread level the library gave (``threads.provided``)."""
        return threads.provided(self._MPI)

    def _arrive(self) -> None:
        """Every rank has come to this step: a rank that waits for the others sleeps, so the
        message that follows is exchanged among ranks that are all there."""
        wait_sleeping(self.comm.Ibarrier())

    def barrier(self) -> None:
        self._arrive()

    def bcast(self, obj: Any, root: int = 0) -> Any:
        self._arrive()
        return self.comm.bcast(obj, root=root)

    def gather(self, obj: Any, root: int = 0) -> Optional[list]:
        self._arrive()
        return self.comm.gather(obj, root=root)

    def reduce_max(self, values: np.ndarray, root: int = 0) -> Optional[np.ndarray]:
        self._arrive()
        values = np.ascontiguousarray(values, dtype=np.float64)
        out = np.empty_like(values) if self.rank == root else None
        self.comm.Reduce(values, out, op=self._MPI.MAX, root=root)
        return out

    def abort(self, code: int) -> None:
        self.comm.Abort(code)


class MpiBase:
    """What both MPI backends share: the benchmark communicator and host buffers.

    A mixin over ``Backend``: subclasses bind their own calls.
    """

    uses_mpi = True
    ops = MPI_OPS

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        return mpi_unavailable_reason()

    groups: tuple = ()

    def row_axes(self) -> dict:
        return {**super().row_axes(), "thread_level": self.options.thread_level}

    def setup(self, *, control: Control) -> None:
        self.MPI = mpi_module()
        # A duplicate of COMM_WORLD of this backend's own, so that control messages and the
        # other backends' traffic never mix with what is measured.
        self.whole = self.MPI.COMM_WORLD.Dup()
        self.comm = self.whole            # what is measured on: the whole, or this rank's group
        if (getattr(self.options, "api", "blocking") == "persistent"
                and not persistent_collectives(self.MPI, self.whole)):
            from collbench.errors import BackendDeclined
            raise BackendDeclined(f"--api persistent: {library_version()} (MPI "
                                  f"{'%d.%d' % self.MPI.Get_version()}) has no persistent "
                                  "collectives (MPI-4's MPI_Allreduce_init …); use MPICH 4 or Open "
                                  "MPI 5 and later")

    def split(self, groups: tuple) -> None:
        """Measure on a communicator per group (``comm.Split``, coloured by group); ``whole``
        stays for the barrier before each sample, which starts every group at once."""
        self.groups = groups
        rank = self.whole.Get_rank()
        colour = next(i for i, members in enumerate(groups) if rank in members)
        self.comm = self.whole.Split(colour, key=rank)

    def renew(self) -> None:
        """Fresh communicators for the next in-job round (every rank is between rounds)."""
        if self.comm is not self.whole:
            self.comm.Free()
        self.whole.Free()
        self.whole = self.comm = self.MPI.COMM_WORLD.Dup()
        if self.groups:
            self.split(self.groups)

    @classmethod
    def supports(cls, *, collective, dtype, op: str) -> Optional[str]:
        if dtype.numpy is None and collective.moves_data:      # a barrier carries no data
            return f"mpi4py sends numpy arrays and numpy has no {dtype.name}; use gloo or nccl"
        if collective.reduces and op not in MPI_OPS:
            return f"MPI has no {op} reduction (it has {', '.join(MPI_OPS)})"
        return super().supports(collective=collective, dtype=dtype, op=op)

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    def versions(self) -> dict:
        import mpi4py
        return {"mpi_library": library_version(), "mpi4py": mpi4py.__version__,
                "mpi_standard": "%d.%d" % self.MPI.Get_version()}
