"""Processes as the kernel sees them (Linux /proc): whether one runs, its name, state, parent,
start time and children, a child's death signal, and orphans adopted and ended. The only reader
of ``/proc/<pid>/stat``.

Written here rather than taken from psutil: a guardian forks before anything is imported and
keeps to the standard library, as do the stand-in and a rank's signal thread, and these few
fields are all they need; psutil would put a compiled dependency on every rank's path for them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import resource          # loaded now: under a low ulimit -v there may be no room to map it later
from typing import Optional

#: a watching thread's stack: ample for collbench's own threads, an eighth of the usual 8 MiB
THREAD_STACK = 1 << 20

#: Fields of /proc/<pid>/stat after the name, counted from 0 (state is field 3 of proc(5)).
_STATE, _PARENT, _START_TICKS = 0, 1, 19


def _stat(pid: int) -> Optional[list]:
    """The fields of ``/proc/<pid>/stat`` after the process's name (which may hold spaces and
    parentheses: it ends at the last ")"); None if the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return data[data.rindex(b")") + 2:].split()
    except (OSError, ValueError):
        return None


def state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (R, S, D, T, t, Z…), '' if unknown."""
    fields = _stat(pid)
    return fields[_STATE].decode("ascii", "replace") if fields else ""


def parent(pid: int) -> Optional[int]:
    """The pid of ``pid``'s parent, None if unknown."""
    fields = _stat(pid)
    try:
        return int(fields[_PARENT]) if fields else None
    except (ValueError, IndexError):
        return None


def boot_time() -> Optional[float]:
    """When the host booted, in seconds since the epoch."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            return float(next(line.split()[1] for line in fh if line.startswith("btime ")))
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def clock_ticks() -> int:
    """Ticks per second of /proc's times (``SC_CLK_TCK``)."""
    return os.sysconf("SC_CLK_TCK")


def started_at(pid: int, boot: Optional[float] = None) -> Optional[float]:
    """When ``pid`` started, in seconds since the epoch (``boot``: the host's boot time, when the
    caller asks for many processes); None if unknown."""
    boot = boot_time() if boot is None else boot
    fields = _stat(pid)
    try:
        return (boot + int(fields[_START_TICKS]) / clock_ticks()
                if fields and boot is not None else None)
    except (ValueError, IndexError, OSError):
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, which has ended, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat(pid)
    return fields is None or fields[:1] != [b"Z"]


def in_use(paths: list) -> set:
    """Those of ``paths`` (real paths) that a process holds open or has mapped, of the processes
    whose files this one may read: every process, as root; as a user, the user's own (another
    user's process cannot open a file only its owner may read, as MPI's are made)."""
    wanted, held = set(paths), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:                    # ended meanwhile, or another user's
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                held.add(target)
        held.update(path for path in _mapped(int(entry)) if path in wanted)
    return held


def _mapped(pid: int):
    """The paths of the files ``pid`` maps (none where its maps cannot be read)."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except OSError:
        return
    for line in lines:
        fields = line.split(None, 5)             # address, perms, offset, dev, inode, path
        if len(fields) == 6:
            yield fields[5].rstrip("\n")


#: Where MPI libraries keep the shared memory of a job's ranks on a host (MPICH's names).
SHARED_MEMORY = ("/dev/shm/mpich_shm_", "/dev/shm/mpich_vci_")


def mapped_shared_memory(pid: int) -> frozenset:
    """The files of the MPI library's shared memory (``SHARED_MEMORY``) that ``pid`` maps."""
    return frozenset(path for path in _mapped(pid)
                     if path.startswith(SHARED_MEMORY) and not path.endswith("(deleted)"))


def remove_unused(paths, seconds: float = 0.0) -> None:
    """Each of ``paths`` removed once no process maps or holds it, waiting up to ``seconds`` for
    those that still do; one still used then is left to its users. A rank that ended by a
    signal or an error left the shared memory its library removes only at MPI_Finalize (2-3 MB
    of memory each, for good)."""
    deadline = time.monotonic() + seconds
    left = [p for p in paths if os.path.exists(p)]
    while left:
        used = in_use(left)
        for path in set(left) - used:
            with contextlib.suppress(OSError):
                os.unlink(path)
        left = sorted(used)
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.1)


def name(pid: int) -> str:
    """The kernel's name of ``pid`` (its ``comm``, at most 15 characters); "" if unknown."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def children(pid: int) -> list:
    """The processes ``pid`` started that are still its children (its threads' lists in /proc)."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as fh:
                found += [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        pass
    return found


def tree(pid: int) -> list:
    """``pid`` and every process below it (from /proc's children lists), parents first."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        found.append(current)
        todo += children(current)
    return found


#: the variables a launcher gives a rank its number in (``environment`` names them for reading)
_RANK_VARIABLES = (b"PMI_RANK", b"PMIX_RANK", b"OMPI_COMM_WORLD_RANK", b"RANK", b"SLURM_PROCID")


def stopped_ranks(pids) -> list:
    """(pid, rank) of each of ``pids`` that is stopped (SIGSTOP, a debugger) and carries a rank
    number in its environment, in rank order: whom a rank waiting in MPI's start-up waits for."""
    found = {}
    for pid in pids:
        if state(pid) not in ("T", "t"):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                variables = dict(v.split(b"=", 1) for v in fh.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        number = next((variables[v] for v in _RANK_VARIABLES if v in variables), b"")
        if number.isdigit():
            found.setdefault(int(number), pid)
    return [(pid, rank) for rank, pid in sorted(found.items())]


class StoppedRanks:
    """The ranks below a process seen stopped (``stopped_ranks``) at every look, and since when:
    how long a step has waited for a rank that makes no progress."""

    def __init__(self) -> None:
        self._since: dict = {}

    def longest(self, root: Optional[int]) -> float:
        """Look again below ``root``: the seconds the longest-stopped rank has been stopped at
        every look (0.0 when none is, or there is no ``root``)."""
        now = time.monotonic()
        pids = [pid for pid, _ in stopped_ranks(tree(root))] if root else []
        self._since = {pid: self._since.get(pid, now) for pid in pids}
        return max((now - since for since in self._since.values()), default=0.0)


def listening(port: int) -> Optional[set]:
    """The inodes of the sockets that listen on TCP ``port`` in this network namespace (the
    kernel's tables), empty when none does; None when the tables cannot be read."""
    found, read = set(), False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        read = True
        for row in rows:
            fields = row.split()
            if (len(fields) > 9 and fields[3] == "0A"
                    and int(fields[1].rsplit(":", 1)[1], 16) == port):
                found.add(fields[9])
    return found if read else None


#: Below these, a failure may well be the limit's doing (one socket per peer and MPI's own
#: files; MPI's shared memory is a file of some megabytes): said beside it
LOW_OPEN_FILES = 256
LOW_FILE_SIZE = 1 << 30
LOW_ADDRESS_SPACE = 16 << 30          # MPI's transports map shared memory and buffers


def low_limits() -> str:
    """" (ulimit -n is 16; ulimit -f is 1000 KiB)" when this process's limits on open files, a
    file's size or its address space are low enough to explain a failure; "" otherwise."""
    said = []
    try:
        files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        size = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        space = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (OSError, ValueError):
        return ""
    if files != resource.RLIM_INFINITY and files < LOW_OPEN_FILES:
        said.append(f"ulimit -n is {files}")
    if size != resource.RLIM_INFINITY and size < LOW_FILE_SIZE:
        # bash counts ulimit -f in KiB, dash in blocks of 512 bytes: said in bytes where it is
        # not a whole number of KiB (dash's ulimit -f 1 was said as 0 KiB)
        said.append(f"ulimit -f is {size // 1024} KiB" if size % 1024 == 0
                    else f"the file size limit is {size} bytes")
    if space != resource.RLIM_INFINITY and space < LOW_ADDRESS_SPACE:
        said.append(f"ulimit -v is {space // 1024} KiB")
    return f" ({'; '.join(said)})" if said else ""


#: Open files a rank needs: its libraries' own (Python, MPI's shared memory, torch's store) and a
#: few per rank of the job (connections to each; gloo's rank 0 holds the store's too). Seen on
#: this host, 4 ranks: 24-37 under MPI, 28 under gloo, 42 for gloo's rank 0.
OPEN_FILES_BASE = 32
OPEN_FILES_PER_RANK = 8


#: Below this file size limit (ulimit -f) no run can start: MPICH's launcher writes the host's
#: topology (5.5 KB here) and dies of SIGXFSZ, ending the job before a rank can say why; UCX
#: writes its shared memory in pieces of 64 KiB; the result files and journal grow past it.
MIN_FILE_SIZE = 64 << 10


def file_size_problem() -> str:
    """Why no run can start under this process's file size limit; "" when one can. A soft limit
    below it is raised as far as the hard one lets it, as a user could."""
    if _short_of(resource.RLIMIT_FSIZE, MIN_FILE_SIZE, up_to_hard=True) is None:
        return ""
    return (f"{low_limits().strip(' ()')}: an MPI launch writes larger files as it starts (the "
            "host's topology, shared memory), and the result files grow past it; raise it to "
            f"{MIN_FILE_SIZE >> 10} KiB or more")


def open_files_problem(ranks: int) -> str:
    """Why this rank of ``ranks`` could run out of open files; "" when it cannot. A soft limit
    (ulimit -Sn) below the need is raised as far as the hard one lets it, as a user could;
    only a hard limit below the need is a problem. (Under it, torch's store retried for a minute,
    printing C++ frames, and MPI failed in its start-up.)"""
    need = OPEN_FILES_BASE + OPEN_FILES_PER_RANK * max(1, ranks)
    soft = _short_of(resource.RLIMIT_NOFILE, need)
    if soft is None:
        return ""
    return (f"ulimit -n is {soft}, and a rank of a {ranks}-rank job needs about {need} open files "
            "(its libraries' own, and its connections to the other ranks); raise it")


def _short_of(limit: int, need: int, up_to_hard: bool = False) -> Optional[int]:
    """The soft ``limit`` where even the hard one is below ``need``; None where it meets it, once
    the soft limit is raised (to ``need``, or as far as the hard one goes) where it was short.
    None too where the limits cannot be read."""
    try:
        soft, hard = resource.getrlimit(limit)
        if soft == resource.RLIM_INFINITY or soft >= need:
            return None
        if hard == resource.RLIM_INFINITY or hard >= need:
            resource.setrlimit(limit, (hard if up_to_hard else need, hard))
            return None
    except (OSError, ValueError):
        return None
    return soft


def adopt_orphans() -> bool:
    """Have the processes below this one that lose their parent come to this one, not to init
    (``PR_SET_CHILD_SUBREAPER``): a guardian then ends what its rank started and left behind,
    in a session of its own or not. False where that cannot be set."""
    return _prctl(36, 1)


def end_children(spare: frozenset = frozenset(), grace: float = 1.0, patience: float = 3.0) -> list:
    """End this process's children but ``spare`` (those it had before), and the orphans they
    leave as they go (they come to this process: ``adopt_orphans``): SIGTERM, then SIGKILL to
    those still there ``grace`` seconds later; each reaped, without waiting past ``patience``
    seconds in all for one that cannot die (a process in the kernel's uninterruptible sleep).
    Returns the pids it signalled."""
    import signal
    import time

    signalled: dict = {}                 # pid -> when it was sent SIGTERM
    start = time.monotonic()
    while time.monotonic() - start < patience:
        now = time.monotonic()
        left = [pid for pid in children(os.getpid()) if pid not in spare and _reap(pid) is None]
        if not left:
            break
        for pid in left:
            if pid not in signalled:
                signalled[pid] = now
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
            elif now - signalled[pid] >= grace:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    return list(signalled)


def _reap(pid: int) -> Optional[int]:
    """The status of child ``pid`` once it has ended (reaping it), None while it runs."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:          # reaped already, or not ours
        return 0
    return status if done else None


def die_with_parent(signum: int) -> bool:
    """Have the kernel send this process ``signum`` when its parent (thread) ends
    (``PR_SET_PDEATHSIG``); False where that cannot be set."""
    return _prctl(1, signum)          # PR_SET_PDEATHSIG


#: Signals whose default action dumps core: a process that passes one on dies of SIGKILL instead
CORE_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE,
                          signal.SIGILL, signal.SIGQUIT, signal.SIGSYS, signal.SIGTRAP,
                          signal.SIGXCPU, signal.SIGXFSZ})


def die_of(signum: int) -> None:
    """End this process by ``signum``, as a process killed by it would end (SIGKILL for one that
    would dump core: the core would be this process's, not the one that crashed)."""
    if signum in CORE_SIGNALS or signum in (signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN,
                                            signal.SIGTTOU, signal.SIGCHLD, signal.SIGCONT,
                                            signal.SIGURG, signal.SIGWINCH):
        signum = signal.SIGKILL
    try:
        if signum != signal.SIGKILL:
            signal.signal(signum, signal.SIG_DFL)       # the main thread's: else ValueError
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        time.sleep(1.0)
    except (ValueError, OSError):
        pass
    finally:
        os._exit(128 + signum)


def stay_small(arenas: int = 2) -> None:
    """Keep this process's address space small, for ``ulimit -v``: glibc gives each thread that
    allocates an arena of its own, 64 MiB of address space reserved, and each thread a stack of
    ``ulimit -s`` (8 MiB). A guardian with six threads reserved 515-589 MiB, a rank 408-430 MiB;
    under a limit, whichever thread came first took the room, and a guardian could not start a
    thread, or a rank load libmpi, where a limit 90 MiB lower worked. ``arenas``: 1 puts every
    thread on the main one (a guardian, which only watches); 2 leaves the main thread, the one
    that measures, an arena that collbench's watching threads never take."""
    import threading

    try:
        threading.stack_size(THREAD_STACK)
    except (ValueError, RuntimeError):
        pass
    try:
        import ctypes
        ctypes.CDLL(None).mallopt(-8, arenas)          # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
