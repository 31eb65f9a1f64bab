"""Whether what a rank prints reaches a person's terminal, and how wide that terminal is.

A rank rarely writes to the terminal itself: its launcher reads its stdout and stderr through
pipes (under Open MPI, maybe a pseudo-terminal of its own) and copies them to its own streams.
So what counts is where the launcher writes: as the self-launching process told its ranks
(``mark_terminals``), as a launcher on this host shows in /proc (``launcher_terminal``), as
srun does, or, failing these, the rank's own streams. How each is found: docs/launching.md,
"Whether the output reaches a terminal".
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Mapping, Optional

from collbench import environment
from collbench.launch import processes

#: the programs that start ranks and copy their output to their own streams
LAUNCHERS = frozenset({"mpiexec", "mpiexec.hydra", "mpirun", "orterun", "prterun", "prte", "srun"})
_ANCESTORS = 8          # rank, guardian, proxy, launcher: a launcher is never further up than this


@dataclass(frozen=True)
class Terminals:
    """The user's streams as this rank's output reaches them."""

    stdout: bool = False         # stdout ends on a terminal
    stderr: bool = False
    #: both are one terminal, and the launcher copies each stream on its own: tables go through
    #: stderr with the progress bar, so that the copying cannot reorder a table and the bar
    tables_on_stderr: bool = False
    columns: Optional[int] = None        # the terminal's width, when known


def _device_width(path: str) -> Optional[int]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        columns = os.get_terminal_size(fd).columns
    except OSError:
        return None
    finally:
        os.close(fd)
    return columns or None


def _is_terminal_device(target: str) -> bool:
    return target.startswith(("/dev/pts/", "/dev/tty")) or target == "/dev/console"


def _srun(env: Mapping[str, str]) -> Optional[int]:
    """The pid of the srun that started this task, when it runs on this host."""
    port = env.get("SLURM_SRUN_COMM_PORT", "")
    if not port.isdigit():
        return None
    inodes = {f"socket:[{i}]" for i in processes.listening(int(port)) or ()}
    if not inodes:
        return None
    for entry in os.listdir("/proc"):
        if entry.isdigit() and processes.name(int(entry)) == "srun":
            try:
                if any(os.readlink(f"/proc/{entry}/fd/{fd}") in inodes
                       for fd in os.listdir(f"/proc/{entry}/fd")):
                    return int(entry)
            except OSError:
                continue
    return None


def launcher_terminal(pid: Optional[int] = None,
                      env: Mapping[str, str] = os.environ) -> Optional[Terminals]:
    """The streams of the launcher that started this process (``pid``'s, by default this
    one's): the nearest launcher among its ancestors, or the srun it reports to; None when
    neither runs on this host or its streams cannot be read (another user's process)."""
    pid = os.getpid() if pid is None else pid
    for _ in range(_ANCESTORS):
        pid = processes.parent(pid)
        if not pid or pid == 1:
            pid = None
            break
        if processes.name(pid) in LAUNCHERS:
            break
    else:
        pid = None
    if pid is None and environment.SLURM_STEP_ID in env:
        pid = _srun(env)
    if pid is None:
        return None
    try:
        out, err = os.readlink(f"/proc/{pid}/fd/1"), os.readlink(f"/proc/{pid}/fd/2")
    except OSError:
        return None
    on_terminal = [_is_terminal_device(t) for t in (out, err)]
    width = _device_width(out if on_terminal[0] else err) if any(on_terminal) else None
    return Terminals(on_terminal[0], on_terminal[1], on_terminal[0] and out == err, width)


def mark_terminals(env: dict) -> None:
    """Tell self-launched ranks, which write through the launcher's pipes, what the user's
    streams are: terminals or not, one terminal behind both, and its width (``COLUMNS``)."""
    for stream, name in ((sys.stdout, environment.STDOUT_TTY),
                         (sys.stderr, environment.STDERR_TTY)):
        if stream.isatty():
            env[name] = "1"
    if one_terminal():
        env[environment.ONE_TERMINAL] = "1"
    if sys.stdout.isatty() or sys.stderr.isatty():
        env.setdefault(environment.COLUMNS, str(shutil.get_terminal_size().columns))


def user_terminals(env: Optional[Mapping[str, str]] = None) -> Terminals:
    """The user's streams as this rank's output reaches them (see the module's docstring)."""
    env = os.environ if env is None else env
    if env.get(environment.LAUNCHED):
        return Terminals(env.get(environment.STDOUT_TTY) == "1",
                         env.get(environment.STDERR_TTY) == "1",
                         env.get(environment.ONE_TERMINAL) == "1")
    return launcher_terminal() or Terminals(sys.stdout.isatty(), sys.stderr.isatty())


def one_terminal() -> bool:
    """Whether this process's stdout and stderr are one terminal."""
    try:
        if not (sys.stdout.isatty() and sys.stderr.isatty()):
            return False
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
        return (out.st_rdev, out.st_ino) == (err.st_rdev, err.st_ino)
    except (OSError, ValueError):
        return False


#: shows the cursor (a progress bar hides it) and erases the line it is on (the bar's, which the
#: terminal's own "^C" follows), so that a last message starts on a line of its own
END_PROGRESS_LINE = "\x1b[?25h\r\x1b[2K"
