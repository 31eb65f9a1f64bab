"""What the self-launching process leaves to a stand-in: if it dies without cleaning up (SIGKILL,
the out-of-memory killer), the run's state folder holds the journal of what was measured and
nobody else would finish it.

``Janitor`` starts, beside the self-launching process and before its state folder exists, a
small process of its own session (so that neither the launcher's clean-up nor a signal to the
job's process group reaches it). It waits for that process to end; if the state folder is there,
it waits for the processes of the last launch to end (their guardians may still be writing), then
rebuilds the result files from the journal and removes the folder. A process that ends normally
removes the folder itself and ends its stand-in (``Janitor.close``).

Being there from the start is the point: a guardian that noticed the death could be SIGKILLed by
mpiexec's clean-up before it acted, and between two rounds there is no guardian at all. So the
stand-in starts first and the folder is made after it (``Janitor.folder``), under a name only
this stand-in looks for: a random prefix it is given, made by ``tempfile.mkdtemp`` (owned by
this user, private), so that a kill at any moment leaves either no folder or a watched one.

Only the standard library is imported until the rebuild.
"""

from __future__ import annotations

import glob
import os
import secrets
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


class Janitor:
    """The stand-in for the calling process, for the state folder it makes (``folder``)."""

    def __init__(self, prefix: str = "collbench-rounds-") -> None:
        self.prefix = os.path.join(tempfile.gettempdir(), f"{prefix}{secrets.token_hex(8)}-")
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "collbench.launch.self_launch.janitor",
                                             str(os.getpid()), self.prefix],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            self.process = None

    def folder(self) -> str:
        """A new private folder that the stand-in finishes should this process die."""
        return tempfile.mkdtemp(prefix=os.path.basename(self.prefix), dir=os.path.dirname(self.prefix))

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


def main(argv: list) -> int:
    """``PARENT_PID PREFIX``: finishes the state folder named PREFIX… once PARENT_PID is gone."""
    parent, prefix = int(argv[0]), argv[1]
    _wait_for_death(parent)
    code = 0
    for state in folders(prefix):
        code = max(code, _finish(state))
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
    for pid in everything():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return rebuild(state, remove=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
