"""torch.distributed plumbing shared by the gloo and nccl backends.

torch is imported only here and only when a torch backend (or a torch-only control channel)
is set up. The default process group is always gloo; each backend measures on a process group
of its own, so control messages and the other backend's traffic never share its channel.

Rendezvous (``--init-method``):
  * ``env://``: MASTER_ADDR/MASTER_PORT in the environment (torchrun, collbench's local
    self-launch, or the user) win. Otherwise, under an MPI launcher, rank 0 opens a TCP store
    on a free port and broadcasts the port through MPI; each rank connects at the address it
    reached rank 0's coordinator with (``collbench.launch.network.rendezvous``). The store listens
    on 127.0.0.1 when all ranks share a host.
  * ``tcp://HOST:PORT`` and ``file:///PATH`` go to ``init_process_group`` as they are, once
    ``collbench.launch.network.rendezvous`` has checked what torch would only time out on.
"""

from __future__ import annotations

import datetime
import gc
import importlib.util
import json
import os
import socket
import sys
from typing import Any, Optional

import numpy as np

from collbench import environment
from collbench.backends.base import Control
from collbench.errors import BackendUnavailable
from collbench.launch.liveness import supervise
from collbench.launch.network import addresses, rendezvous
from collbench.launch.origin.launcher import detect
from collbench.launch.network.addresses import free_port

INSTALL_HINT = 'pip install "collbench[torch]" (or pip install torch)'
#: How long torch waits for the other ranks in its rendezvous and its first collectives.
INIT_TIMEOUT = datetime.timedelta(seconds=120)


def torch_missing() -> Optional[str]:
    if importlib.util.find_spec("torch") is None:
        return f"torch is not installed; install it with: {INSTALL_HINT}"
    return None


def installed_version() -> Optional[tuple]:
    """(major, minor) of the installed torch, read from its package record (no import); None
    when unknown."""
    import importlib.metadata
    import re

    try:
        found = re.match(r"(\d+)\.(\d+)", importlib.metadata.version("torch"))
    except importlib.metadata.PackageNotFoundError:
        return None
    return (int(found.group(1)), int(found.group(2))) if found else None


def torch_modules():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise BackendUnavailable(f"torch is not usable here ({exc}); install it with: "
                                 f"{INSTALL_HINT}") from None
    if not dist.is_available():
        raise BackendUnavailable("this torch build has no torch.distributed")
    return torch, dist


def _world_from_env() -> tuple[int, int]:
    launcher = detect()
    return launcher.rank, launcher.world_size


def init_default_group(control: Optional[Control] = None, init_method: str = "env://") -> None:
    """Initialise the default (gloo) process group once per process, as ``init_method`` (the
    ``--init-method`` URL) says; ``init_scheme`` tells afterwards how it met.

    ``env://``: with MASTER_ADDR/MASTER_PORT (torchrun, collbench's local self-launch, or the
    user) gloo binds the interface that routes to MASTER_ADDR unless GLOO_SOCKET_IFNAME says
    otherwise; a rank other than 0 that cannot reach rank 0's store there within seconds says
    so and ends (``rendezvous.await_master``). Under an MPI launcher rank 0 opens the store and
    every rank reaches it at the address it reached rank 0's coordinator with
    (``collbench.launch.network.rendezvous``); a store for one host listens on 127.0.0.1 only.

    ``tcp://`` and ``file://``: ``_init_at``.
    """
    global _method
    if _group_ready():
        return
    method = rendezvous.parse_init_method(init_method)
    if method.scheme == "env://":
        _init_env(control)
    else:
        _init_at(method, control)
    _method = method


#: How this process's default group met, once collbench made it.
_method: Optional["rendezvous.InitMethod"] = None


def init_scheme() -> str:
    """env://, tcp:// or file://: how the default group met; "" if collbench did not make it."""
    return _method.scheme if _method is not None else ""


def remove_rendezvous_file(control: Control) -> None:
    """After a run that ended well, once every rank has torn its groups down: the file of a
    file:// rendezvous goes. torch removes it itself only when every rank's store object is
    destroyed, which a rank ending under an MPI launcher does not always get to (under load it
    was left behind, and the next run refused it as stale). It is this run's: rank 0 found no
    file there before it began. Needs a control channel that outlives the groups (MPI's). Over
    torch's own (no MPI) torch's removal is all there is, so each rank lets its store go here,
    while the run is still its own, rather than at the interpreter's exit, where an object that
    still holds it (the job's abort, a thread's frame) may never be freed: under torchrun, beside
    two busy loops, the file was left twice in about 25 runs. That still happened (2 of about 6
    whole-suite runs), so rank 0's guardian also removes the file once every rank has ended."""
    if _method is None or _method.scheme != "file://":
        return
    if isinstance(control, TorchControl):
        control.release()
        gc.collect()                  # the groups' objects, in cycles or not: their store with them
        if control.rank == 0:         # and should one outlive its run, the file goes after the job
            supervise.remove_after_the_job(_method.path)
        return
    control.barrier()                 # every rank's store is closed: nothing recreates the file
    if control.rank == 0:
        try:
            os.unlink(_method.path)
        except FileNotFoundError:
            pass


def _init_env(control: Optional[Control]) -> None:
    env = os.environ
    self_launched = detect(env).self_launched == "local"
    user_address = (environment.MASTER_ADDR in env and environment.MASTER_PORT in env
                    and not self_launched)
    if user_address or (control is None and not self_launched):
        rank, size = (control.rank, control.size) if control is not None else _world_from_env()
        if environment.MASTER_ADDR not in env:                 # one process, no launcher at all
            env[environment.MASTER_ADDR], env[environment.MASTER_PORT] = (
                "127.0.0.1", str(free_port("127.0.0.1")))
        # Before torch is imported, which takes seconds: a rendezvous that cannot succeed is
        # said at once. Rank 0 listens at MASTER_PORT (unless torchrun's agent does already).
        rendezvous.refuse_rank0_finding(
            rendezvous.master_port_problem()
            if rank == 0 and env.get(_AGENT_STORE) != "True" else None, control)
        _choose_interface(rendezvous.towards_master(rank))
        if rank != 0:
            rendezvous.await_master(rank)
        _, dist = torch_modules()
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size,
                                timeout=INIT_TIMEOUT)
        return
    _, dist = torch_modules()
    if self_launched:
        rank, size = _world_from_env()
        address, port = env[environment.MASTER_ADDR], int(env[environment.MASTER_PORT])
        store = _store(dist, address, port, rank, size)
        _choose_interface(rendezvous.towards_master(rank))
    else:
        rank, size = control.rank, control.size
        joined = rendezvous.joined()
        local = joined is None or joined.all_local
        address = "127.0.0.1" if rank == 0 or joined is None else joined.rank0_address
        store = _store(dist, address, 0, rank, size, local) if rank == 0 else None
        port = control.bcast(store.port if rank == 0 else None)
        if rank != 0:
            store = _store(dist, address, port, rank, size, local)
        _choose_interface(rendezvous.gloo_interface() if joined is not None else _loopback_name())
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=INIT_TIMEOUT)


#: torchrun's word to torch that its agent hosts the store at MASTER_ADDR:MASTER_PORT.
_AGENT_STORE = environment.TORCHELASTIC_USE_AGENT_STORE


def _init_at(method: "rendezvous.InitMethod", control: Optional[Control]) -> None:
    """tcp://HOST:PORT or file:///PATH, through torch's own rendezvous, after collbench's
    checks of what torch would only time out on (``rendezvous.meet_at_tcp``, ``meet_at_file``).
    Where no MPI carries those checks, file:// settles them over the store at
    MASTER_ADDR:MASTER_PORT, which every launch without MPI has (``_master_exchange``)."""
    rank, size = (control.rank, control.size) if control is not None else _world_from_env()
    if method.scheme == "tcp://":
        agent = _torchrun_store_at(method)
        # first: rank 0 listens only once torch is imported, as slowly as the others
        _, dist = torch_modules()
        # collbench's own ranks are watched by their launching process, which stops them if
        # rank 0 ends (as for env://); the others wait a while for rank 0, then say so
        _choose_interface(rendezvous.meet_at_tcp(method, rank, control, rank0_listens=not agent,
                                                 patient=detect(os.environ).self_launched
                                                 != "local"))
        if not agent and os.environ.get(_AGENT_STORE) == "True":
            os.environ[_AGENT_STORE] = "False"        # rank 0 hosts the store at HOST:PORT
    else:
        _, dist = torch_modules()
        exchange = (control if control is not None or size == 1
                    else _master_exchange(dist, rank, size))
        rendezvous.meet_at_file(method, rank, exchange)
        if control is not None:
            _choose_interface(rendezvous.gloo_interface()
                              if rendezvous.joined() is not None else _loopback_name())
        else:
            _choose_interface(rendezvous.towards_master(rank)
                              if os.environ.get(environment.MASTER_ADDR) else _loopback_name())
    dist.init_process_group("gloo", init_method=method.url, rank=rank, world_size=size,
                            timeout=INIT_TIMEOUT)


def _torchrun_store_at(method: "rendezvous.InitMethod") -> bool:
    """Whether tcp://HOST:PORT is torchrun's own store (its agent's, at MASTER_ADDR:MASTER_PORT):
    torch then makes every rank a client of it. Any other address is rank 0's to host, which
    torch does under torchrun only once told that the agent's store is not the one."""
    env = os.environ
    if (env.get(_AGENT_STORE) != "True"
            or str(method.port) != env.get(environment.MASTER_PORT, "").strip()):
        return False
    try:
        return (addresses.resolve(method.host)
                == addresses.resolve(env.get(environment.MASTER_ADDR, "")))
    except addresses.RouteError:
        return False


def _master_exchange(dist, rank: int, size: int) -> "_StoreExchange":
    """The store at MASTER_ADDR:MASTER_PORT, for what ranks without MPI settle before the default
    group exists: torchrun's agent's, or else one rank 0 opens there, as env:// would."""
    env = os.environ
    address, port = env[environment.MASTER_ADDR], int(env[environment.MASTER_PORT])
    if env.get(_AGENT_STORE) == "True":
        return _StoreExchange(dist.TCPStore(address, port, None, is_master=False,
                                            timeout=INIT_TIMEOUT), rank, size)
    if rank != 0 and detect(env).self_launched != "local":
        rendezvous.await_master(rank)
    return _StoreExchange(_store(dist, address, port, rank, size), rank, size)


class _StoreExchange:
    """``bcast`` and ``gather`` of small JSON values over a torch store, as ``Control`` has them,
    for the ranks' checks before the default group exists."""

    def __init__(self, store, rank: int, size: int) -> None:
        self.store, self.rank, self.size = store, rank, size
        # a run torchrun restarts finds its earlier attempt's keys in the agent's store
        self._prefix = ("collbench/rendezvous/"
                        f"{os.environ.get(environment.TORCHELASTIC_RESTART_COUNT, '0')}/")
        self._calls = 0

    def _key(self) -> str:
        self._calls += 1
        return f"{self._prefix}{self._calls}"

    def bcast(self, obj: Any, root: int = 0) -> Any:
        key = self._key()
        if self.rank == root:
            self.store.set(key, json.dumps(obj))
            return obj
        return json.loads(self.store.get(key))

    def gather(self, obj: Any, root: int = 0) -> Optional[list]:
        key = self._key()
        self.store.set(f"{key}/{self.rank}", json.dumps(obj))
        if self.rank != root:
            return None
        return [json.loads(self.store.get(f"{key}/{r}")) for r in range(self.size)]


def _group_ready() -> bool:
    """The default group exists already (without importing torch to ask)."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def _choose_interface(name: Optional[str]) -> None:
    """gloo binds GLOO_SOCKET_IFNAME; left to itself it binds what the host name resolves to,
    which may be loopback or nothing. The user's choice stands."""
    if name and not os.environ.get(environment.GLOO_SOCKET_IFNAME):
        os.environ[environment.GLOO_SOCKET_IFNAME] = name


def _store(dist, address: str, port: int, rank: int, size: int, local: bool = True):
    """Rank 0 hosts the store: on every interface when ranks span hosts, else on loopback only
    (``address`` is where rank 0 itself connects). Others connect to ``address``."""
    if rank != 0:
        return dist.TCPStore(address, port, size, is_master=False, timeout=INIT_TIMEOUT)
    if not local or not address.startswith("127."):
        return dist.TCPStore(address, port, size, is_master=True, timeout=INIT_TIMEOUT,
                             wait_for_workers=False)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(max(128, size))
    store = dist.TCPStore(address, listener.getsockname()[1], size, is_master=True,
                          timeout=INIT_TIMEOUT,
                          wait_for_workers=False, master_listen_fd=listener.fileno())
    listener.detach()                # the store serves on this descriptor, and closes it itself
    return store


def _loopback_name() -> str:
    try:
        for name in os.listdir("/sys/class/net"):
            with open(f"/sys/class/net/{name}/flags") as fh:
                if int(fh.read().strip(), 16) & 0x8:   # IFF_LOOPBACK
                    return name
    except OSError:
        pass
    return "lo"


#: How long one control message may wait. The ranks outside a pair wait in one while the pair
#: measures a whole batch, which large windows make minutes long; a stuck job is ended by
#: collbench's --timeout watchdog and its job channel, not by this.
CONTROL_TIMEOUT = datetime.timedelta(days=7)


class TorchControl(Control):
    """Control messages over a gloo group of their own, for runs with no MPI at all."""

    def __init__(self, init_method: str = "env://") -> None:
        init_default_group(None, init_method)
        torch, dist = torch_modules()
        self._torch, self._dist = torch, dist
        self._group = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()

    def barrier(self) -> None:
        self._dist.barrier(group=self._group)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        box = [obj]
        self._dist.broadcast_object_list(box, src=root, group=self._group)
        return box[0]

    def gather(self, obj: Any, root: int = 0) -> Optional[list]:
        out = [None] * self.size if self.rank == root else None
        self._dist.gather_object(obj, out, dst=root, group=self._group)
        return out

    def reduce_max(self, values: np.ndarray, root: int = 0) -> Optional[np.ndarray]:
        t = self._torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64).copy())
        self._dist.reduce(t, dst=root, op=self._dist.ReduceOp.MAX, group=self._group)
        return t.numpy() if self.rank == root else None

    def release(self) -> None:
        """Let go of the control group, torn down with the others: torch's store goes with the
        last object that holds it (``remove_rendezvous_file``)."""
        self._group = None


def torch_versions() -> dict:
    torch, dist = torch_modules()
    out = {"torch": torch.__version__}
    if torch.cuda.is_available():
        out["cuda"] = torch.version.cuda
        try:
            out["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:
            pass
    return out
