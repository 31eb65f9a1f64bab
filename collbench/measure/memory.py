"""Memory guard: what a size needs on each host, against what the host can give, before allocating.

A rank needs what it held when the sweep started, plus measured factors per byte of its
buffers and the check's bounded temporaries; summed over a host's ranks, that must fit the
host's budget (available memory or room under a cgroup limit, less a reserve, within
``COLLBENCH_MEMORY_LIMIT``). Sizes that do not fit are skipped with a note rather than killed
by the kernel, and large sizes are asked about again just before they run. The rule:
docs/methodology.md, "Memory"; the factors: benchmarks/README.md, "Memory factors".
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Callable, Optional

from collbench import environment
from collbench.benchmarks.registry import COLLECTIVES, get_benchmark
from collbench.errors import UsageError
from collbench.measure.sizes import parse_bytes

GiB = 1 << 30
MiB = 1 << 20
#: left to other processes: this much, plus a share of what is available
RESERVE_BYTES = 256 * MiB
RESERVE_SHARE = 0.10
#: a size is large, and asked about again just before it is measured, when its ranks on one host
#: need more than this, or than this share of the host's budget
RECHECK_BYTES = 64 * MiB
RECHECK_SHARE = 0.02
#: of a process's room under ``ulimit -v``, kept for what an allocation maps besides its bytes
SPACE_RESERVE = 64 * MiB
UNLIMITED = 1 << 60          # cgroup v1 writes "no limit" as a number near 2**63


@dataclass(frozen=True)
class Factor:
    """Peak resident memory beyond the base, per byte of nominal send + receive buffers, on the
    root of a rooted collective and on every other rank."""

    root: float
    others: float


# Each collective module carries its factors (``Collective.memory_factors``), measured by
# benchmarks/memory_factors.py (figures in benchmarks/README.md, "Memory factors"): the smallest
# factor covering every peak seen over 64M-1G on 2 and 4 ranks (512M for the pickle API), plus a
# margin of 0.25, 0.5 for the pickle API (its copies vary the most, and the inner ranks of its
# trees hold as much as the root: both get the root's), rounded up to 0.05. "buffer": mpi
# (MPICH 5.0), "object": mpi-pickle (mpi4py 4.1), "tensor": gloo (torch 2.13).
#: the fill and check temporaries, measured when the check built expected values on the host (94
#: MiB for bcast, 150-160 MiB for allgather and alltoall); the check now holds at most
#: ``check.WORK_BYTES`` (36 MiB), and with these figures every peak of benchmarks/memory_factors.py
#: --quick stayed covered (smallest estimate / peak 1.26, benchmarks/README.md)
WORK_BYTES = 192 * MiB
WORK_PER_BYTE = 12


def factor(family: Optional[str], collective: str) -> Factor:
    """The factor for ``family`` (a plugin issuing its own calls has None). Without figures for
    the family, the collective's largest; for a collective without any, the largest measured."""
    measured = get_benchmark(collective).memory_factors
    if family in measured:
        return Factor(*measured[family])
    known = list(measured.values()) or [f for c in COLLECTIVES.values()
                                        for f in c.memory_factors.values()]
    return Factor(max(root for root, _ in known), max(others for _, others in known))


def rank_need(collective: str, family: Optional[str], nominal: int, is_root: bool) -> int:
    """Bytes one rank takes beyond its base at a size whose send + receive buffers are
    ``nominal``."""
    f = factor(family, collective)
    return min(WORK_BYTES, WORK_PER_BYTE * nominal) + int((f.root if is_root else f.others)
                                                          * nominal)


@dataclass(frozen=True)
class Probe:
    """What one rank says about its host: available bytes (cgroup included), the bytes it holds
    now, and the user's limit (None: none)."""

    host: str
    available: int
    held: int
    limit: Optional[int]
    #: room left in this process's address space under its ``ulimit -v`` (RLIMIT_AS): the limit
    #: less what it has mapped; None without a limit. A process's own, not its host's.
    space: Optional[int] = None


@dataclass(frozen=True)
class Shortfall:
    """The host that cannot take a size: what its ranks still need, its budget, its ranks;
    ``rank``: the rank whose own address-space limit (``ulimit -v``) is too small, if that is it."""

    host: str
    need: int
    budget: int
    ranks: int
    rank: Optional[int] = None


def headroom(available: int) -> int:
    """What collbench may take of ``available``: the rest is left to other processes."""
    return max(0, int(available * (1 - RESERVE_SHARE)) - RESERVE_BYTES)


def budgets(probes: list) -> dict:
    """Per host: the bytes its ranks may still take (the fullest rank's view of the host)."""
    out: dict = {}
    for host in dict.fromkeys(p.host for p in probes):
        mine = [p for p in probes if p.host == host]
        room = headroom(min(p.available for p in mine))
        limits = [p.limit for p in mine if p.limit is not None]
        if limits:
            room = min(room, max(0, min(limits) - sum(p.held for p in mine)))
        out[host] = room
    return out


def shortfall(need: Callable[[int], int], probes: list, base_bytes: list,
              allocated: int = 0) -> Optional[Shortfall]:
    """None when every host has room for what its ranks still need; else the host short of it by
    the most. ``need(rank)``: what the rank takes beyond its base, ``base_bytes[rank]`` (what it
    held when the sweep started). What a rank has grown since counts as room for this size only
    up to ``allocated``, the buffers of the block, which the need includes: anything else
    (leftovers of another block, a leak) stays in use."""
    for r, p in enumerate(probes):        # a process's own ulimit -v, before the host's memory
        if p.space is not None and need(r) > max(0, p.space - SPACE_RESERVE):
            return Shortfall(p.host, need(r), max(0, p.space - SPACE_RESERVE), 1, rank=r)
    worst = None
    for host, budget in budgets(probes).items():
        ranks = [r for r, p in enumerate(probes) if p.host == host]
        more = sum(max(0, need(r) - min(max(0, probes[r].held - base_bytes[r]), allocated))
                   for r in ranks)
        if more > budget and (worst is None or more - budget > worst.need - worst.budget):
            worst = Shortfall(host, more, budget, len(ranks))
    return worst


def is_large(collective: str, family: Optional[str], nominal: int, ranks_per_host: int,
             probes: list) -> bool:
    """Whether a size is worth asking every rank about again just before it is measured: its
    ranks on one host need more than ``RECHECK_BYTES`` or ``RECHECK_SHARE`` of the smallest
    budget beyond their base."""
    f = factor(family, collective)
    need = ranks_per_host * max(f.root, f.others) * nominal
    return need > min(RECHECK_BYTES, RECHECK_SHARE * min(budgets(probes).values()))


def _amount(n: int) -> str:
    """Bytes as a person reads them: bytes under 1 KiB, KiB under 1 MiB, MiB under 1 GiB, two
    decimals under 10 GiB."""
    if n < 1024:
        return f"{max(n, 0)} bytes"
    if n < MiB:
        return f"{max(n, 0) / 1024:.0f} KiB"
    if n < GiB:
        return f"{n / MiB:.0f} MiB"
    return f"{n / GiB:.2f} GiB" if n < 10 * GiB else f"{n / GiB:.1f} GiB"


def skip_note(where: str, short: Shortfall, now: bool = False) -> str:
    when = "now " if now else ""
    # the need is not the point: nothing is left
    if short.rank is not None and short.budget <= 0:
        return (f"{where}: rank {short.rank} on {short.host} has {when}no address space left for "
                f"buffers under its ulimit -v (the libraries keep {_amount(SPACE_RESERVE)} of it; "
                "raise it); skipped, as its allocation would fail")
    if short.rank is not None:
        return (f"{where}: needs about {_amount(short.need)} more address space in rank "
                f"{short.rank} on {short.host}, more than the {_amount(short.budget)} its "
                f"ulimit -v leaves{' now' if now else ''}; skipped, as its allocation would fail")
    return (f"{where}: needs about {_amount(short.need)} more on {short.host} ({short.ranks} "
            f"rank{'s' if short.ranks > 1 else ''}), more than the {_amount(short.budget)} "
            f"{when}available there; skipped, as it would run out of memory")


# What this host has ------------------------------------------------------------------------------

def user_limit() -> Optional[int]:
    """``COLLBENCH_MEMORY_LIMIT``: the most the ranks on one host may hold together (None:
    unset)."""
    text = os.environ.get(environment.MEMORY_LIMIT, "").strip()
    if not text:
        return None
    try:
        return parse_bytes(text)
    except UsageError:
        raise UsageError(f"{environment.MEMORY_LIMIT}={text!r} is not a size "
                         "(e.g. 8G, 512M)") from None


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return UNLIMITED


def memory_cgroup(proc_cgroup: str = "/proc/self/cgroup",
                  root: str = "/sys/fs/cgroup") -> Optional[tuple]:
    """(1 or 2, folder) of this process's memory cgroup, or None. Under a cgroup namespace (a
    container) /proc says "/" and the mount is the process's own cgroup already."""
    try:
        with open(proc_cgroup, encoding="ascii") as fh:
            lines = [line.rstrip("\n").split(":", 2) for line in fh]
    except OSError:
        return None
    for parts in lines:
        if len(parts) == 3 and "memory" in parts[1].split(","):
            mount = os.path.join(root, "memory")
            folder = os.path.join(mount, parts[2].lstrip("/"))
            return 1, folder if os.path.isdir(folder) else mount
    for parts in lines:
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            try:
                with open(os.path.join(root, "cgroup.controllers"), encoding="ascii") as fh:
                    if "memory" not in fh.read().split():
                        return None
            except OSError:
                return None
            folder = os.path.join(root, parts[2].lstrip("/"))
            return 2, folder if os.path.isdir(folder) else root
    return None


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read()
    except OSError:
        return None


def _stat(folder: str, key: str) -> int:
    for line in (_read(os.path.join(folder, "memory.stat")) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def cgroup_room(found: Optional[tuple], root: str = "/sys/fs/cgroup") -> Optional[int]:
    """Bytes left under the tightest memory limit of the cgroup ``found`` and its ancestors
    (limit - usage, where usage leaves out inactive page cache, which the kernel reclaims
    first); None when no level has a limit."""
    if found is None:
        return None
    version, folder = found
    names = (("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
             if version == 1 else ("memory.max", "memory.current", "inactive_file"))
    mount = os.path.join(root, "memory") if version == 1 else root
    room = None
    while True:
        limit, usage = _read(os.path.join(folder, names[0])), _read(os.path.join(folder, names[1]))
        if (limit is not None and usage is not None and limit.strip() != "max"
                and int(limit) < UNLIMITED):
            here = int(limit) - max(0, int(usage) - _stat(folder, names[2]))
            room = here if room is None else min(room, here)
        parent = os.path.dirname(folder)
        if folder in (mount, "/") or parent == folder or not parent.startswith(mount):
            return None if room is None else max(0, room)
        folder = parent


def available_bytes() -> int:
    """What this host can give now: MemAvailable, or less when a cgroup limits this process."""
    room = cgroup_room(memory_cgroup())
    meminfo = _meminfo_available()
    return meminfo if room is None else min(meminfo, room)


def held_bytes() -> int:
    """This process's resident memory now (VmRSS)."""
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def address_space_room() -> Optional[int]:
    """What this process may still map under its address-space limit (``ulimit -v``,
    RLIMIT_AS); None when there is none."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    mapped = 0
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("VmSize:"):
            mapped = int(line.split()[1]) * 1024
    return max(0, soft - mapped)


def probe() -> Probe:
    return Probe(socket.gethostname(), available_bytes(), held_bytes(), user_limit(),
                 address_space_room())


#: What one self-launched rank holds before any buffer: the rank (interpreter, numpy, mpi4py,
#: rich) and its guardian, measured here at 95-100 MiB for MPI backends (when rank 0 still
#: imported pandas); a rank that imports torch holds about 250 MiB more.
RANK_BASE_BYTES = 100 * MiB
TORCH_RANK_BASE_BYTES = 350 * MiB


def check_rank_count(n: int, torch: bool) -> None:
    """Refuse to start ``n`` ranks on this host when their bare processes alone could not fit in
    what is available (a mistyped ``-n 100000`` would otherwise start processes until the machine
    gives out). A bound against the impossible, not a fit: the sizes' guard keeps the headroom."""
    base = TORCH_RANK_BASE_BYTES if torch else RANK_BASE_BYTES
    room = available_bytes()
    if n * base > room:
        raise UsageError(f"-n {n}: {n} ranks on this host would need about {_amount(n * base)} "
                         f"before any buffer ({_amount(base)} each), and {_amount(room)} is "
                         f"available; at most {room // base} fit here; use fewer, or a launcher "
                         "that spreads them over hosts")
