"""How the ranks of a job find each other beyond MPI: joining rank 0's coordinator, and the
addresses torch's store and gloo use afterwards.

Each guardian joins the coordinator at the first of rank 0's addresses that answers; that
address, one this rank surely reaches rank 0 at, is where torch's store is reached, and gloo
binds the interface of this end of it. Host names play no part (docs/launching.md, "torch
backends: rendezvous and devices"). What only the ranks can see of ``--init-method`` (rank 0's
host, the others' view of the file's folder) is checked here before torch waits for anyone,
and said in one line (docs/launching.md, "How torch ranks meet").
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from collbench import environment
from collbench.errors import SharedUsageError, UsageError
from collbench.launch.network import addresses
from collbench.launch.liveness import supervise


@dataclass(frozen=True)
class Joined:
    rank0_address: str           # where this rank reached rank 0
    local_address: str           # this end of that connection
    all_local: bool              # every rank reached rank 0 through loopback: one host
    rank0_outward: Optional[str]  # rank 0's address as the ranks on other hosts reached it


_joined: Optional[Joined] = None


def joined() -> Optional[Joined]:
    """This rank's view of the job once it joined; None without a coordinator (one rank, or
    no guardian)."""
    return _joined


def _candidates() -> list:
    out = ["127.0.0.1"] + addresses.outward_addresses()
    if os.environ.get(environment.MASTER_ADDR):
        out.append(os.environ[environment.MASTER_ADDR])
    return out


def join(control) -> Optional[Joined]:
    """Every rank joins the coordinator; a rank that cannot is named in one line (exit 2)."""
    global _joined
    if control.size < 2:
        return None
    at = supervise.coordinator_at() if control.rank == 0 else None
    offer = {**at, "candidates": _candidates(), "host": socket.gethostname()} if at else None
    offer = control.bcast(offer)
    if offer is None:
        return None
    answer = supervise.join_job(offer["candidates"], offer["port"], offer["token"])
    reports = control.gather({"host": socket.gethostname(), "answer": answer})
    verdict = _verdict(reports, offer["host"]) if control.rank == 0 else None
    verdict = control.bcast(verdict)
    if "error" in verdict:
        raise UsageError(verdict["error"])
    if answer is None:
        return None
    _joined = Joined(answer["address"], answer["local"], verdict["all_local"], verdict["outward"])
    return _joined


def _verdict(reports: list, rank0_host: str) -> dict:
    failed = [(r, rep) for r, rep in enumerate(reports)
              if rep["answer"] is not None and "error" in rep["answer"]]
    if failed:
        r, rep = failed[0]
        more = (f" (and {len(failed) - 1} more rank{'s' if len(failed) > 2 else ''})"
                if len(failed) > 1 else "")
        return {"error": f"rank {r} on {rep['host']} cannot reach rank 0 on {rank0_host}{more}: "
                         f"{rep['answer']['error']}"}
    used = [rep["answer"]["address"] for rep in reports if rep["answer"] is not None]
    outward = Counter(a for a in used if not addresses.is_loopback(a)).most_common(1)
    return {"all_local": not outward, "outward": outward[0][0] if outward else None}


def gloo_interface() -> Optional[str]:
    """The interface gloo should bind on this rank: the one facing rank 0 (rank 0: the one the
    other hosts reached it through); loopback when every rank shares this host."""
    j = _joined
    if j is None:
        return None
    if j.all_local:
        return addresses.interface_of("127.0.0.1")
    if j.rank0_outward is not None and addresses.is_loopback(j.local_address):
        return addresses.interface_of(j.rank0_outward)       # rank 0, or a rank on its host
    return addresses.interface_of(j.local_address)


def towards_master(rank: int) -> Optional[str]:
    """Under torchrun or a user's MASTER_ADDR: the interface that routes to MASTER_ADDR (what
    gloo should bind when the user named none). A name that does not resolve, or an address
    with no route to it, is one line naming the address and this host, before torch waits.

    On rank 0's host MASTER_ADDR may lead to loopback (its own name on 127.0.1.1): loopback is
    right only if no other host takes part. The hosts that do have connected to the store at
    MASTER_PORT already (torchrun's agents, before any rank starts): the address they reached
    this host at names the interface."""
    address = os.environ.get(environment.MASTER_ADDR, "")
    return _towards(rank, address, int(os.environ.get(environment.MASTER_PORT, "0")),
                    f"MASTER_ADDR {address!r}")


def _towards(rank: int, address: str, port: int, named: str) -> Optional[str]:
    try:
        source = addresses.source_address(addresses.resolve(address))
    except addresses.RouteError as exc:
        raise UsageError(f"rendezvous of rank {rank} with {named} cannot succeed: {exc}") from None
    if addresses.is_loopback(source):
        outward = addresses.reached_at(port)
        if outward:
            return addresses.interface_of(outward[0])
    return addresses.interface_of(source)


#: Seconds a rank other than 0 waits for rank 0's store to accept connections.
MASTER_PATIENCE = 10.0


def await_master(rank: int) -> None:
    """A rank other than 0 under torchrun or a user's MASTER_ADDR: rank 0's store must accept a
    connection within ``MASTER_PATIENCE`` seconds (rank 0 may still be starting; under torchrun
    the store is up before any rank starts). torch itself would try for its whole rendezvous
    timeout and then say little; this is one line naming the address and this host."""
    address, port = os.environ[environment.MASTER_ADDR], int(os.environ[environment.MASTER_PORT])
    try:
        addresses.await_listener(address, port, MASTER_PATIENCE)
    except addresses.RouteError as exc:
        raise UsageError(f"rendezvous of rank {rank} with MASTER_ADDR {address!r} cannot succeed: "
                         f"{exc}: rank 0 is not running there, or MASTER_ADDR and MASTER_PORT "
                         "differ between ranks") from None


def check_local_master(env) -> None:
    """collbench's own local launch puts every rank on this host, rank 0's store included: a
    MASTER_ADDR the user left set must be an address of this host (torch would otherwise try
    to reach it, or bind it, for minutes). Said in one line before any rank starts."""
    address = env.get(environment.MASTER_ADDR, "").strip()
    if not address:
        return
    try:
        resolved = addresses.resolve(address)
    except addresses.RouteError as exc:
        raise UsageError(f"MASTER_ADDR={address!r}: {exc}; a run started with -n puts every rank "
                         "on this host: unset MASTER_ADDR, or name this host") from None
    if not addresses.is_loopback(resolved) and resolved not in addresses.outward_addresses():
        raise UsageError(f"MASTER_ADDR={address!r} ({resolved}) is not an address of "
                         f"{socket.gethostname()}, and a run started with -n puts every rank here: "
                         "unset MASTER_ADDR (collbench then uses 127.0.0.1), or start the ranks on "
                         "their hosts with torchrun")


def check_variables(env) -> None:
    """torch reads MASTER_ADDR and MASTER_PORT itself, deep in its rendezvous: check them first."""
    port = env.get(environment.MASTER_PORT)
    if port is not None and not (port.strip().isdigit() and len(port.strip()) <= 5
                                 and 0 < int(port) < 65536):
        raise UsageError(f"MASTER_PORT={port[:20]!r} is not a TCP port (1-65535); fix or unset it")
    if environment.MASTER_ADDR in env and not env[environment.MASTER_ADDR].strip():
        raise UsageError("MASTER_ADDR is set but empty; give the address of rank 0's host, "
                         "or unset it")


@dataclass(frozen=True)
class InitMethod:
    """``--init-method`` taken apart: how the torch backends' default group meets."""

    url: str
    scheme: str        # "env://", "tcp://" or "file://": what a row records
    host: str = ""     # tcp://: rank 0's host, where it listens
    port: int = 0
    path: str = ""     # file://: torch's file store

    @property
    def folder(self) -> str:
        return os.path.dirname(self.path) or "/"


FORMS = "env://, tcp://HOST:PORT or file:///PATH"


def parse_init_method(url: str) -> InitMethod:
    """The method ``url`` names, or one line saying what init_process_group would refuse or
    misread in it (collbench adds the rank and world size itself)."""
    def bad(why: str) -> UsageError:
        return UsageError(f"--init-method {url!r}: {why}")

    if url == "env://":
        return InitMethod(url, "env://")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:         # a port that is no number, or past 65535
        raise bad(f"{str(exc).lower()}; give tcp://HOST:PORT with PORT from 1 to 65535") from None
    scheme = parts.scheme.lower()
    if scheme == "tcp":
        if not parts.hostname:
            raise bad("no host; give tcp://HOST:PORT with HOST an address of rank 0's host")
        if not port:
            raise bad(f"{'port 0 is no place to listen at' if port == 0 else 'no port'}; give "
                      "tcp://HOST:PORT with PORT from 1 to 65535, where rank 0 listens")
        if (parts.path not in ("", "/") or parts.query or parts.fragment or parts.username
            or parts.password):
            raise bad("give tcp://HOST:PORT and nothing more")
        return InitMethod(url, "tcp://", host=parts.hostname, port=port)
    if scheme == "file":
        if parts.netloc:
            raise bad("a file:// path starts after the third slash: file:///PATH (here the host "
                      f"part is {parts.netloc!r})")
        if (not parts.path.startswith("/") or parts.path.endswith("/") or parts.query
            or parts.fragment):
            raise bad("give file:///PATH with PATH the absolute path of a file (not a folder)")
        return InitMethod(url, "file://", path=parts.path)
    if scheme == "env":
        raise bad("env:// takes nothing more: MASTER_ADDR and MASTER_PORT say where rank 0 is")
    raise bad(f"give {FORMS}")


def check_init_method(url: str, *, here: bool) -> InitMethod:
    """The plan's check of ``--init-method``: its form; with ``here`` (collbench starts every
    rank on this host, or runs alone) also what rank 0 will find, before any rank starts."""
    method = parse_init_method(url)
    problem = _rank0_problem(method, socket.gethostname()) if here else None
    if problem:
        raise UsageError(problem)
    return method


def _rank0_problem(method: InitMethod, host: str) -> Optional[str]:
    if method.scheme == "tcp://":
        return _listen_problem(method, host)
    if method.scheme == "file://":
        return _file_problem(method, f"on {host}", first=True)
    return None


def _listen_problem(method: InitMethod, host: str) -> Optional[str]:
    """Why rank 0 cannot listen at tcp://HOST:PORT (None: it can): HOST must be an address of its
    host (torch's store listens on every interface, and rank 0 connects to HOST as the others
    do), and PORT free there."""
    said = f"--init-method {method.url}"
    try:
        address = addresses.resolve(method.host)
    except addresses.RouteError as exc:
        return f"{said}: {exc}"
    if not addresses.is_loopback(address) and address not in addresses.outward_addresses():
        named = method.host if method.host == address else f"{method.host} ({address})"
        return (f"{said}: {named} is not an address of {host}, rank 0's host, where it listens; "
                "give one of its addresses (127.0.0.1 when every rank runs there)")
    taken = _port_taken(method.port)
    if taken:
        return (f"{said}: rank 0 cannot listen at port {method.port} on {host} ({taken}); "
                "choose a free port")
    return None


def refuse_rank0_finding(problem: Optional[str], exchange) -> None:
    """Rank 0's ``problem`` (None on the others, and where it found none) as every rank's error:
    over ``exchange`` (MPI, or a store: ``bcast``) each rank learns it and raises it, rank 0
    alone saying it; with none, rank 0 raises it and the others find out on their own."""
    if exchange is not None:
        problem = exchange.bcast(problem)
        if problem:
            raise SharedUsageError(problem)
    elif problem:
        raise UsageError(problem)


def master_port_problem(env=os.environ) -> Optional[str]:
    """Why rank 0 cannot listen at MASTER_PORT, as env:// has it do (None: it can)."""
    port = env[environment.MASTER_PORT]
    taken = _port_taken(int(port))
    if taken:
        return (f"MASTER_PORT {port}: rank 0 cannot listen there on {socket.gethostname()} "
                f"({taken}); choose a free port, or unset MASTER_ADDR and MASTER_PORT and "
                "collbench finds one")
    return None


def _port_taken(port: int) -> Optional[str]:
    """Why this host cannot listen at ``port`` on every interface as torch's store does (None:
    it can); with SO_REUSEADDR, as the store sets it, so that an earlier run's connections
    still in TIME_WAIT do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as exc:
            return (exc.strerror or str(exc)).lower()
    return None


def _file_problem(method: InitMethod, where: str, *, first: bool) -> Optional[str]:
    """Why a rank cannot use file:///PATH (None: it can): the folder must exist and be writable
    (torch's file store creates PATH there); for rank 0, the ``first`` to look, PATH must not
    exist yet."""
    said, folder, path = f"--init-method {method.url}", method.folder, method.path
    if not os.path.isdir(folder):
        return f"{said}: the folder {folder} does not exist {where}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return (f"{said}: the folder {folder} is not writable {where} (torch's file store "
                "creates the file there)")
    if os.path.isdir(path):
        return f"{said}: {path} is a folder {where}; name a file in it"
    kind = _special(path)
    if kind:
        return (f"{said}: {path} is {kind} {where}, not a file torch's file store can keep; "
                "name a new file")
    if first and os.path.lexists(path):
        return (f"{said}: {path} exists {where}, left by a run that did not end cleanly (torch's "
                "file store removes it when every rank ends normally) or in use by a run now; "
                "remove it if no run uses it, or name another path")
    return None


def _special(path: str) -> str:
    """What ``path`` is when it is there and not a regular file (a link followed): "a pipe
    (FIFO)", "a device"...; "" otherwise."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a broken link" if os.path.islink(path) else ""
    for test, kind in ((stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return ""


#: Seconds a rank waits to see the mark rank 0 left beside a file:// path (a shared file
#: system may show a new file a moment late).
FILE_PATIENCE = 5.0


def meet_at_file(method: InitMethod, rank: int, exchange) -> None:
    """file:///PATH, before any rank opens PATH. torch's file store lets whichever rank comes
    first create PATH, and a PATH an earlier run left sends gloo to that run's ranks, long gone
    (it then waits its whole timeout). So rank 0 alone looks first: the folder is there and
    writable, PATH is not; it leaves a mark beside PATH, and every other rank must see that mark
    within ``FILE_PATIENCE`` seconds (the ranks share the folder) before any of them goes on.
    No rank removes a PATH it finds: nothing tells an earlier run's file from a live run's
    (the store holds no lock between operations, and a run on another host is out of sight).

    ``exchange`` carries rank 0's findings and the others' (MPI, or a store at MASTER_ADDR and
    MASTER_PORT: ``bcast`` and ``gather``); None for a single rank. A problem is one line, said
    by rank 0."""
    host = socket.gethostname()
    first: dict = {"problem": None, "mark": None, "host": host}
    if rank == 0:
        first["problem"] = _file_problem(method, f"on {host}", first=True)
        if first["problem"] is None:
            first["mark"], first["problem"] = _leave_mark(method, host)
    if exchange is None:
        _remove(first["mark"])
        if first["problem"]:
            raise UsageError(first["problem"])
        return
    first = exchange.bcast(first if rank == 0 else None)
    mine = None
    if first["problem"] is None and rank != 0:
        where = f"on rank {rank}'s host {host}"
        mine = _file_problem(method, where, first=False) or _sees(method, first["mark"],
                                                                  first["host"], where)
    reports = exchange.gather(mine)
    verdict = None
    if rank == 0:
        _remove(first["mark"])
        failed = [report for report in reports if report]
        more = (f" (and {len(failed) - 1} more rank{'s' if len(failed) > 2 else ''})"
                if len(failed) > 1 else "")
        verdict = first["problem"] or (failed[0] + more if failed else None)
    verdict = exchange.bcast(verdict)
    if verdict:
        # rank 0, which may host the exchange's store, ends after the others read it
        exchange.gather(None)
        raise SharedUsageError(verdict)


def _leave_mark(method: InitMethod, host: str) -> tuple:
    """(the mark made beside PATH, None), or (None, why it could not be made)."""
    # not secrets: it loads hashlib, noisy where no room is left
    mark = f"{method.path}.collbench-{os.urandom(4).hex()}"
    try:
        os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except OSError as exc:
        return None, (f"--init-method {method.url}: cannot create a file in {method.folder} on "
                      f"{host} ({(exc.strerror or str(exc)).lower()})")
    return mark, None


def _sees(method: InitMethod, mark: str, rank0_host: str, where: str) -> Optional[str]:
    deadline = time.monotonic() + FILE_PATIENCE
    while not os.path.exists(mark):
        if time.monotonic() > deadline:
            return (f"--init-method {method.url}: {os.path.basename(mark)}, made beside it by rank "
                    f"0 on {rank0_host}, is not there {where} after {FILE_PATIENCE:g} s: the ranks "
                    f"do not share {method.folder}; file:// needs a path every host sees (a shared "
                    "file system)")
        time.sleep(0.1)
    return None


def _remove(mark: Optional[str]) -> None:
    if mark:
        try:
            os.unlink(mark)
        except OSError:
            pass


def meet_at_tcp(method: InitMethod, rank: int, exchange, *, rank0_listens: bool = True,
                patient: bool = True) -> Optional[str]:
    """tcp://HOST:PORT, before init_process_group. Rank 0 listens there (unless torchrun's agent
    does already: not ``rank0_listens``), so HOST must be an address of its host and PORT free:
    rank 0 looks, and under MPI (``exchange``) says it for every rank. Every other rank must
    reach HOST:PORT within ``MASTER_PATIENCE`` seconds (when ``patient``: not where collbench's
    launching process watches rank 0); torch alone would try for its whole timeout and then
    say little. Returns the interface gloo should bind: the one that routes to HOST."""
    refuse_rank0_finding(_listen_problem(method, socket.gethostname())
                         if rank == 0 and rank0_listens else None, exchange)
    named = f"tcp://{method.host}:{method.port}"
    interface = _towards(rank, method.host, method.port, named)
    if patient and (rank != 0 or not rank0_listens):
        try:
            addresses.await_listener(method.host, method.port, MASTER_PATIENCE)
        except addresses.RouteError as exc:
            raise UsageError(f"rendezvous of rank {rank} at {named} cannot succeed: {exc}: rank 0 "
                             "is not listening there (it did not start or it failed, "
                             f"{method.host} is not its host, or a firewall is "
                             "in between)") from None
    return interface


def init_methods_here(env=os.environ) -> str:
    """What ``collbench env`` says of ``--init-method`` on this host, cheaply: no torch, no
    network, no file written."""
    if env.get(environment.MASTER_ADDR) and env.get(environment.MASTER_PORT):
        plain = ("env:// (at MASTER_ADDR:MASTER_PORT, "
                 f"{env[environment.MASTER_ADDR]}:{env[environment.MASTER_PORT]})")
    else:
        plain = "env:// (MASTER_ADDR unset: collbench finds rank 0)"
    reachable = ", ".join(["127.0.0.1"] + addresses.outward_addresses())
    folders = list(dict.fromkeys(f for f in (tempfile.gettempdir(), os.getcwd())
                                 if os.access(f, os.W_OK | os.X_OK)))
    files = (f"file:///PATH in {' or '.join(folders)} (writable here; across hosts, a folder they "
             "share)" if folders
             else f"not file:// in {tempfile.gettempdir()} or {os.getcwd()} (not writable here)")
    return f"{plain}; tcp://ADDRESS:PORT with ADDRESS one of {reachable}; {files}"
