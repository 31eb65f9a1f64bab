"""How the ranks of a job find each other beyond MPI: joining rank 0's coordinator, and the
addresses torch's store and gloo use afterwards.

Every rank's guardian connects to the coordinator in rank 0's guardian, trying loopback first
(the same host), then each of rank 0's non-loopback addresses, then ``MASTER_ADDR``. The
address that answered is, by construction, one this rank reaches rank 0 at: torch's store is
reached there, and gloo binds the interface of this end of that connection. Host names and
what they resolve to play no part (they often do not resolve in containers, and resolve to
127.0.1.1 on Debian).
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from collbench.errors import UsageError
from collbench.launch import netaddr, supervise


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
    out = ["127.0.0.1"] + netaddr.outward_addresses()
    if os.environ.get("MASTER_ADDR"):
        out.append(os.environ["MASTER_ADDR"])
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
    failed = [(r, rep) for r, rep in enumerate(reports) if rep["answer"] is not None and "error" in rep["answer"]]
    if failed:
        r, rep = failed[0]
        more = f" (and {len(failed) - 1} more rank{'s' if len(failed) > 2 else ''})" if len(failed) > 1 else ""
        return {"error": f"rank {r} on {rep['host']} cannot reach rank 0 on {rank0_host}{more}: "
                         f"{rep['answer']['error']}"}
    used = [rep["answer"]["address"] for rep in reports if rep["answer"] is not None]
    outward = Counter(a for a in used if not netaddr.is_loopback(a)).most_common(1)
    return {"all_local": not outward, "outward": outward[0][0] if outward else None}


def gloo_interface() -> Optional[str]:
    """The interface gloo should bind on this rank: the one facing rank 0 (rank 0: the one the
    other hosts reached it through); loopback when every rank shares this host."""
    j = _joined
    if j is None:
        return None
    if j.all_local:
        return netaddr.interface_of("127.0.0.1")
    if j.rank0_outward is not None and netaddr.is_loopback(j.local_address):
        return netaddr.interface_of(j.rank0_outward)       # rank 0, or a rank on its host
    return netaddr.interface_of(j.local_address)


def towards_master(rank: int) -> Optional[str]:
    """Under torchrun or a user's MASTER_ADDR: the interface that routes to MASTER_ADDR (what
    gloo should bind when the user named none). A name that does not resolve, or an address
    with no route to it, is one line naming the address and this host, before torch waits.

    On rank 0's host MASTER_ADDR may lead to loopback (its own name on 127.0.1.1): loopback is
    right only if no other host takes part. The hosts that do have connected to the store at
    MASTER_PORT already (torchrun's agents, before any rank starts): the address they reached
    this host at names the interface."""
    address = os.environ.get("MASTER_ADDR", "")
    try:
        source = netaddr.source_address(netaddr.resolve(address))
    except netaddr.RouteError as exc:
        raise UsageError(f"rendezvous of rank {rank} with MASTER_ADDR {address!r} cannot succeed: {exc}") from None
    if netaddr.is_loopback(source):
        outward = netaddr.reached_at(int(os.environ.get("MASTER_PORT", "0")))
        if outward:
            return netaddr.interface_of(outward[0])
    return netaddr.interface_of(source)


#: Seconds a rank other than 0 waits for rank 0's store to accept connections.
MASTER_PATIENCE = 10.0


def await_master(rank: int) -> None:
    """A rank other than 0 under torchrun or a user's MASTER_ADDR: rank 0's store must accept a
    connection within ``MASTER_PATIENCE`` seconds (rank 0 may still be starting; under torchrun
    the store is up before any rank starts). torch itself would try for its whole rendezvous
    timeout and then say little; this is one line naming the address and this host."""
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    try:
        netaddr.await_listener(address, port, MASTER_PATIENCE)
    except netaddr.RouteError as exc:
        raise UsageError(f"rendezvous of rank {rank} with MASTER_ADDR {address!r} cannot succeed: {exc}: rank 0 "
                         "is not running there, or MASTER_ADDR and MASTER_PORT differ between ranks") from None


def check_local_master(env) -> None:
    """collbench's own local launch puts every rank on this host, rank 0's store included: a
    MASTER_ADDR the user left set must be an address of this host (torch would otherwise try
    to reach it, or bind it, for minutes). Said in one line before any rank starts."""
    address = env.get("MASTER_ADDR", "").strip()
    if not address:
        return
    try:
        resolved = netaddr.resolve(address)
    except netaddr.RouteError as exc:
        raise UsageError(f"MASTER_ADDR={address!r}: {exc}; a run started with -n puts every rank on this host: "
                         "unset MASTER_ADDR, or name this host") from None
    if not netaddr.is_loopback(resolved) and resolved not in netaddr.outward_addresses():
        raise UsageError(f"MASTER_ADDR={address!r} ({resolved}) is not an address of {socket.gethostname()}, and "
                         "a run started with -n puts every rank here: unset MASTER_ADDR (collbench then uses "
                         "127.0.0.1), or start the ranks on their hosts with torchrun")


def check_variables(env) -> None:
    """torch reads MASTER_ADDR and MASTER_PORT itself, deep in its rendezvous: check them first."""
    port = env.get("MASTER_PORT")
    if port is not None and not (port.strip().isdigit() and len(port.strip()) <= 5 and 0 < int(port) < 65536):
        raise UsageError(f"MASTER_PORT={port[:20]!r} is not a TCP port (1-65535); fix or unset it")
    if "MASTER_ADDR" in env and not env["MASTER_ADDR"].strip():
        raise UsageError("MASTER_ADDR is set but empty; give the address of rank 0's host, or unset it")
