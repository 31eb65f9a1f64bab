"""The interface every backend implements; the call it binds and its control channel are
``collbench.measure.calls``'s (named here too, for plugins).

A backend owns its communicator and buffers. The harness asks it to allocate once per
(collective, backend) at the largest size, to bind one collective call over slices of those
buffers, and to barrier and synchronise; it never sees mpi4py or torch objects.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from collbench.backends.devices import HostDevice
# the calls the harness drives: here for backends and plugins
from collbench.measure.calls import Bound, Control, grouped

if TYPE_CHECKING:
    from collbench.benchmarks.base import Benchmark, Roles
    from collbench.benchmarks.check import Tables
    from collbench.benchmarks.dtypes import Dtype


@dataclass(frozen=True)
class BackendOptions:
    """What the user chose about a backend's set-up, given to every backend before ``setup`` (as
    ``backend.options``); each takes what applies to it: ``buffers`` (the mpi backend: numpy,
    mpi for MPI.Alloc_mem, cuda), ``payload`` (mpi-pickle: array, bytes, list, dict),
    ``init_method`` (gloo, nccl: env://, tcp://HOST:PORT, file:///PATH), ``api`` (how a call is
    issued: blocking; nonblocking, started and then waited for; persistent, set up once and
    started each time: ``collbench.benchmarks.base.APIS``), ``placement`` (out-of-place or
    in-place, where a collective has that form: ``Benchmark.placements``), ``thread_level`` (the
MPI backends: the thread level MPI is initialised at, ``collbench.backends.threads``), ``cache``
(hot: every call on one set of buffers; cold: each on the next of a pool that spans the cache,
``collbench.measure.caches``), ``coalesce`` (how many calls go as one group: ``coalesced``)."""

    buffers: str = "numpy"
    payload: str = "array"
    init_method: str = "env://"
    api: str = "blocking"
    placement: str = "out-of-place"
    thread_level: str = "single"
    cache: str = "hot"
    coalesce: int = 1


@dataclass(frozen=True)
class Setup:
    """A backend as a run measures it: its name, the options it is given, and the ``key`` that
    names it in the run (its order, its notes, what it skips). The key is the name, followed by
    the options it takes that are not the usual, as a row's label says them ("mpi (mpi
    buffers)"), so that one backend on two kinds of buffers is measured side by side as two."""

    name: str
    options: BackendOptions = BackendOptions()
    key: str = ""


class Backend(ABC):
    """A communication library measured by collbench. Keyword-only, one module each."""

    name: ClassVar[str]
    #: where its buffers live (``collbench.backends.devices``); set in ``setup`` when it depends
    #: on the rank, as one GPU per rank does
    device: Any = HostDevice()
    #: how it issues a collective: "buffer" (mpi4py's buffer API), "object" (its pickle API),
    #: "tensor" (torch.distributed), or None for a backend that binds every call itself
    family: ClassVar[Optional[str]] = None
    uses_mpi: ClassVar[bool] = False
    #: the user's choices for backends (set before ``setup``), and which of them it takes
    #: (names of ``BackendOptions`` fields); a choice no backend of the run takes is refused
    options: BackendOptions = BackendOptions()
    takes_options: ClassVar[tuple] = ()
    #: the timings it measures (``--timing``, ``collbench.measure.timings``): the device timings
    #: (graph, device) need calls queued on a GPU stream, whose events and graphs time them
    timings: ClassVar[tuple] = ("latency", "throughput")
    #: the reductions it issues (``--op``); the default ``supports`` refuses the others, so that a
    #: backend written before an op existed is not handed it
    ops: ClassVar[tuple] = ("sum", "max", "min", "prod")

    @classmethod
    @abstractmethod
    def unavailable_reason(cls) -> Optional[str]:
        """None when usable here, else one line naming what is missing and how to install it."""

    @classmethod
    def options_problem(cls, options: BackendOptions, *, collective: Optional["Benchmark"] = None,
                        dtype: Optional["Dtype"] = None, op: str = "") -> Optional[str]:
        """None when this backend can run as ``options`` say, else why not; asked before any rank
        starts, once for the whole backend (no ``collective``: the plan skips it with a note),
        then with each collective, dtype and op that ``supports`` took (the plan leaves that
        combination out, as for ``supports``). What only the ranks can know (the MPI library's
        own answer) ``setup`` says by raising ``errors.BackendDeclined``."""
        return None

    @classmethod
    def self_launch_ranks(cls) -> Optional[int]:
        """How many ranks to start on this host when collbench launches itself and ``-n`` is not
        given (one per GPU, say); None: no preference (a few, up to the cores)."""
        return None

    @classmethod
    def environment(cls) -> dict:
        """What ``collbench env`` shows for this backend beyond whether it is usable: the devices
        it would drive (nccl: the GPUs torch sees), as {label: text}. Must be cheap."""
        return {}

    @abstractmethod
    def setup(self, *, control: Control) -> None: ...

    @property
    @abstractmethod
    def rank(self) -> int: ...

    @property
    @abstractmethod
    def size(self) -> int: ...

    @classmethod
    def supports(cls, *, collective: "Benchmark", dtype: "Dtype", op: str) -> Optional[str]:
        """None if this combination can run, else the reason it cannot (asked when the plan is
        built, before any rank starts)."""
        if cls.name in collective.lacks:
            return collective.lacks[cls.name]
        if cls.family is not None and not collective.issued_by(cls.family):
            return f"{collective.name} has no {cls.family} call"
        if collective.reduces and op not in cls.ops:
            return f"{cls.name} issues the reductions {', '.join(cls.ops)}, not {op}"
        return None

    def allocate(self, *, send_len: int, recv_len: int, dtype: "Dtype", in_place: bool) -> Any:
        """Allocate buffers once; returns a handle passed back to fill and bind (by default the
        device's ``Buffers``)."""
        return self.device.allocate(send_len, recv_len, dtype, in_place)

    def fill(self, buffers: Any, *, tables: "Tables", rank: int, length: int) -> None:
        """Write ``rank``'s check values into the first ``length`` elements of the send buffer
        (``collbench.benchmarks.check.Tables.fill``, on the buffers' device)."""
        tables.fill(buffers.send[:length], rank)

    def release(self, buffers: Any) -> None:
        """Give back buffers from ``allocate`` once their block is measured (no call bound to
        them runs again)."""
        self.device.release(buffers)

    @abstractmethod
    def bind(self, buffers: Any, *, collective: "Benchmark", send_len: int, recv_len: int,
             op: str, roles: "Roles") -> Bound:
        """One call of ``collective`` (a ``collbench.benchmarks.base.Benchmark``: a collective or
        a point-to-point exchange) over the first ``send_len`` / ``recv_len`` elements of the
        buffers; ``roles`` says where the ranks stand (the root, the pair, the window). Called on
        the ranks that take part only."""

    def coalesced(self, bounds: list) -> Bound:
        """``bounds`` (calls bound in two steps, one per buffer set) issued as one group
        (``--coalesce``): every call started, then each completed (MPI's non-blocking calls);
        a backend whose library groups calls its own way says so here (torch's coalescing
        manager)."""
        completes = [b.complete for b in bounds]

        def issue(starts: list) -> None:
            handles = [start() for start in starts]
            for complete, handle in zip(completes, handles):
                complete(handle)

        return grouped(bounds, issue)

    @abstractmethod
    def barrier(self) -> None: ...

    def synchronize(self) -> None:
        """Wait for outstanding device work (nothing to wait for on the host)."""
        self.device.synchronize()

    def memory_scale(self, itemsize: int) -> float:
        """How many times a message's data bytes it holds in memory beyond what its family's
        measured factors count (mpi-pickle's lists and dicts: an object per element)."""
        return 1.0

    def max_message_bytes(self) -> Optional[int]:
        """The largest payload one call can carry, or None when there is no such limit."""
        return None

    def device_memory_bytes(self) -> Optional[int]:
        """Free memory of this rank's own device, when buffers live there (None: host memory)."""
        return self.device.free_memory()

    def split(self, groups: tuple) -> None:
        """Measure from now on within this rank's group of ``groups`` (tuples of world ranks that
        partition the world; ``collbench.run.groups``): ``rank``, ``size`` and every bound call
        are the group's, while ``barrier`` stays over every rank, so that the groups start each
        sample together. A backend that cannot make groups raises ``errors.BackendDeclined``."""
        from collbench.errors import BackendDeclined
        raise BackendDeclined("it makes no groups (--split)")

    def renew(self) -> None:
        """Replace the communicator (process group) by a fresh one: each in-job round measures
        on its own, as each self-launched round does in new processes."""

    def versions(self) -> dict:
        return {}

    def row_axes(self) -> dict:
        """The row columns this backend decides (``collbench.results.records``): what its buffers
        are (its device's kind), the object its messages are (mpi-pickle's payload), how its
        ranks met (the torch backends' init method), how its calls were issued (``--api``), the
        MPI thread level it ran at (the MPI backends)."""
        return {"buffers": self.device.kind, "payload": "", "init_method": "",
                "api": self.options.api, "thread_level": ""}

    def close(self) -> None: ...

    def closed(self, control: Control) -> None:
        """After a run that ended well, once every rank has closed every backend: what the job as
        a whole leaves goes (the torch backends: a file:// rendezvous's file). Default: nothing."""
