"""A stand-in for the self-launching process: if that process dies without cleaning up (SIGKILL,
the out-of-memory killer), the run's state folder holds the journal of what was measured and
nobody else would finish it.

``Janitor`` starts a small process in a session of its own before the state folder exists, and
makes the folder after it, so that a kill at any moment leaves either no folder or a watched
one. When the launching process is gone, the stand-in waits for the last launch to end,
rebuilds the result files from the journal and removes the folder. Why it is built so:
docs/development.md, "Inside a launch".

Only the standard library is imported until the rebuild.
"""

from __future__ import annotations

import contextlib
import glob
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from collbench.launch import notes, processes
from collbench.launch.journal import rebuild
from collbench.launch.liveness.wire import STOP_GRACE

#: how long the stand-in waits for the last launch's processes to end before it kills them:
#: a guardian's grace for its rank to save what it must (supervise.STOP_GRACE), and a margin
LAUNCH_END_WAIT = STOP_GRACE + 4.0
#: how long the stand-in waits for the processes it killed to be gone
KILLED_GONE_WAIT = 5.0
#: the state folder's note of the process that made it: "PID START HOST" (its start, epoch seconds)
OWNER = "owner"
#: every stand-in's prefix begins so (``Janitor``)
ROUNDS_PREFIX = "collbench-rounds-"
#: a folder unchanged this long whose owner this host cannot see is an orphan: its maker died
#: between making it and writing the note, an older collbench made it, or another host (or a
#: container, in a process namespace of its own) that shares this temporary folder did. A live
#: run appends to its journal at every size, which --timeout (300 s by default) bounds.
UNOWNED_AFTER_S = 600.0


class Janitor:
    """The stand-in for the calling process, for the state folder it makes (``folder``)."""

    def __init__(self, prefix: str = ROUNDS_PREFIX) -> None:
        self.prefix = os.path.join(tempfile.gettempdir(), f"{prefix}{os.urandom(8).hex()}-")
        try:
            self.process = subprocess.Popen([sys.executable, "-m",
                                             "collbench.launch.self_launch.janitor",
                                             str(os.getpid()), self.prefix],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            self.process = None

    def folder(self) -> str:
        """A new private folder that the stand-in finishes should this process die. It names
        its owner (this process), so that should the stand-in die too, the next run's stand-in
        finishes it (``orphaned``)."""
        made = tempfile.mkdtemp(prefix=os.path.basename(self.prefix),
                                dir=os.path.dirname(self.prefix))
        with contextlib.suppress(OSError):
            Path(made, OWNER).write_text(f"{os.getpid()} "
                                         f"{processes.started_at(os.getpid()) or 0:.2f} "
                                         f"{socket.gethostname()}")
        return made

    def close(self) -> None:
        """The folder is gone (or about to be, by the caller): the stand-in is not needed."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _wait_for_death(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (OSError, AttributeError):
        while processes.alive(pid):
            time.sleep(0.5)
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def launch_processes(state: str) -> list:
    """The pids, on this host, of the guardians and ranks that the last launch noted."""
    host = socket.gethostname()
    pids = []
    for note in Path(state).glob(f"{notes.GUARDIAN_PREFIX}*"):
        try:
            _rank, child, where = note.read_text().split(maxsplit=2)
            if where.strip() == host:
                pids += [int(note.name[len(notes.GUARDIAN_PREFIX):]), int(child)]
        except (OSError, ValueError):
            continue
    return pids


def folders(prefix: str) -> list:
    """The folders of this user whose names start with ``prefix`` (``Janitor.folder``): another
    user's folder of that name is not this run's."""
    found = []
    for path in glob.glob(glob.escape(prefix) + "*"):
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            found.append(path)
    return found


def _owner_gone(state: str) -> bool:
    """Whether the process that made the state folder ``state`` has ended (its pid gone, or
    taken by a process that started later). An owner this host cannot see (no note, or another
    host's) has ended once the folder has been left unchanged for ``UNOWNED_AFTER_S``."""
    try:
        pid, start, host = Path(state, OWNER).read_text().split()
        pid, start = int(pid), float(start)
    except (OSError, ValueError):
        pid, start, host = 0, 0.0, ""
    if host != socket.gethostname():
        return _unchanged_for(state) > UNOWNED_AFTER_S
    now = processes.started_at(pid)
    return not processes.alive(pid) or (now is not None and start > 0 and abs(now - start) > 1.0)


def _unchanged_for(state: str) -> float:
    """Seconds since anything in the folder ``state`` last changed (0 when it cannot be read)."""
    try:
        latest = max([os.lstat(state).st_mtime] + [entry.stat(follow_symlinks=False).st_mtime
                                                     for entry in os.scandir(state)])
    except OSError:
        return 0.0
    return time.time() - latest


def orphaned(own_prefix: str) -> list:
    """State folders of this user whose maker and whose stand-in both died (SIGKILL to one,
    then the other): nobody else would finish them. Each is taken by renaming it, so that two
    stand-ins starting at once never both finish one."""
    taken = []
    for state in folders(os.path.join(os.path.dirname(own_prefix), ROUNDS_PREFIX)):
        if state.startswith(own_prefix) or not _owner_gone(state):
            continue
        claimed = os.path.join(os.path.dirname(state), f"collbench-orphan-{os.urandom(8).hex()}")
        try:
            os.rename(state, claimed)
        except OSError:            # another stand-in took it first, or it went
            continue
        taken.append(claimed)
    return taken


def _made_at(state: str):
    """When the run whose state folder this is started (its owner's note), or None."""
    try:
        made = float(Path(state, OWNER).read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return made if made > 0 else None


def main(argv: list) -> int:
    """``PARENT_PID PREFIX``: finishes the state folder named PREFIX… once PARENT_PID is gone;
    first, the folders of runs whose stand-in died with them (``orphaned``)."""
    parent, prefix = int(argv[0]), argv[1]
    began = time.time()
    for state in orphaned(prefix):    # its launch's processes ended with their parent; the pids
        made = _made_at(state)         # its notes name may be others' by now, and are left alone
        rebuild(state, remove=True)
        if made is not None:           # what its killed launch left in /tmp and /dev/shm
            from collbench.launch.self_launch.mpiexec import remove_orphaned_mpich_files

            remove_orphaned_mpich_files(made)
    _wait_for_death(parent)
    code = 0
    for state in folders(prefix):
        code = max(code, _finish(state))
    # MPICH removes its topology file and shared memory only when a job ends well; a mpiexec
    # that died with the launching process (its output's reader gone: SIGPIPE), or what was
    # killed above, left them
    from collbench.launch.self_launch.mpiexec import remove_orphaned_mpich_files

    remove_orphaned_mpich_files(began)
    return code


def _finish(state: str) -> int:
    """The launch of the folder ``state`` ended, its files rebuilt, the folder gone."""
    # The guardians see the death and stop their ranks, saving what they must; what has not
    # ended after that (a stopped guardian, mpiexec and its proxies waiting for it) is killed.
    launched = notes.launched_pids(state)

    def everything() -> list:
        return [pid for root in launched for pid in processes.tree(root)] + launch_processes(state)

    deadline = time.monotonic() + LAUNCH_END_WAIT
    while any(processes.alive(pid) for pid in everything()) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = everything()
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + KILLED_GONE_WAIT     # gone, not dying: their files are free
    while any(processes.alive(pid) for pid in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    return rebuild(state, remove=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
