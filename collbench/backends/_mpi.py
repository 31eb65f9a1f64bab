"""mpi4py access shared by the MPI backends and the MPI control channel.

mpi4py is imported here, lazily, so that MPI is initialised only in ranks that use it.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from collbench.backends.base import Control
from collbench.errors import BackendUnavailable

INSTALL_HINT = 'pip install "collbench[mpich]" (or pip install mpi4py mpich)'


def mpi_module():
    try:
        from mpi4py import MPI
    except ImportError as exc:  # mpi4py missing, or libmpi not loadable
        raise BackendUnavailable(f"MPI is not usable here ({exc}); install it with: {INSTALL_HINT}") from None
    return MPI


def mpi4py_missing() -> Optional[str]:
    import importlib.util
    if importlib.util.find_spec("mpi4py") is None:
        return f"mpi4py is not installed; install it with: {INSTALL_HINT}"
    return None


def library_version() -> str:
    return mpi_module().Get_library_version().strip().splitlines()[0].strip()


_bench_comm = None


def bench_comm():
    """A duplicate of COMM_WORLD for measured traffic, so control messages never mix with it."""
    global _bench_comm
    if _bench_comm is None:
        _bench_comm = mpi_module().COMM_WORLD.Dup()
    return _bench_comm


class MpiControl(Control):
    def __init__(self) -> None:
        MPI = mpi_module()
        self._MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def barrier(self) -> None:
        self.comm.Barrier()

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root)

    def gather(self, obj: Any, root: int = 0) -> Optional[list]:
        return self.comm.gather(obj, root=root)

    def reduce_max(self, values: np.ndarray, root: int = 0) -> Optional[np.ndarray]:
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

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        return mpi4py_missing()

    def setup(self, *, control: Control) -> None:
        self.MPI = mpi_module()
        self.comm = bench_comm()

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    def supports(self, *, collective: str, dtype: np.dtype, op: str) -> Optional[str]:
        return None

    def fill(self, buffers, *, start, values):
        from collbench.backends import _host
        _host.fill(buffers, start, values)

    def versions(self) -> dict:
        import mpi4py
        return {"mpi_library": library_version(), "mpi4py": mpi4py.__version__,
                "mpi_standard": "%d.%d" % self.MPI.Get_version()}
