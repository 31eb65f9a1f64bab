"""mpiexec's output, relayed to ours as it comes, less what the launcher says about a job
collbench has already explained."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading


class Relay:
    """Copies mpiexec's output to ours as it comes, leaving out what the launcher itself says
    about a job collbench has already explained (MPICH's "BAD TERMINATION" banner, which it
    prints on stdout and would corrupt ``-f json``; Ctrl-C chatter; MPI_Abort's line).
    ``spoke``: a collbench line went by on stderr; ``said``: the last of them."""

    NOISE = (b"=====", b"=   ", b"YOUR APPLICATION TERMINATED", b"This typically refers to a problem",
             b"Please see the FAQ page", b"[mpiexec@", b"[proxy:", b"Abort(", b"Assertion failed",
             b"internal ABORT", b"application called MPI_Abort", b"[unset]:", b"Press Ctrl-C again",
             b"Ctrl-C caught", b"Sending Ctrl-C")

    def __init__(self, process: subprocess.Popen) -> None:
        self.spoke = False
        self.said: collections.deque = collections.deque(maxlen=64)
        self._threads = [threading.Thread(target=self._copy, args=(process.stdout, sys.stdout), daemon=True),
                         threading.Thread(target=self._copy, args=(process.stderr, sys.stderr), daemon=True)]
        for t in self._threads:
            t.start()

    def _copy(self, source, target) -> None:
        out = getattr(target, "buffer", target)
        held = b""
        while True:
            try:
                chunk = os.read(source.fileno(), 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            held += chunk
            *lines, held = held.split(b"\n")
            keep = [line + b"\n" for line in lines if not self._noise(line)]
            if held and not any(held.startswith(n[:len(held)]) for n in self.NOISE):
                keep.append(held)          # a partial line (a progress bar): pass it on now
                held = b""
            if keep:
                self._write(out, b"".join(keep))
        if held and not self._noise(held):
            self._write(out, held)

    def _noise(self, line: bytes) -> bool:
        text = line.lstrip(b"\r")
        if text.startswith(b"collbench:"):
            self.spoke = True
            self.said.append(text.decode("utf-8", "replace").rstrip("\r"))
        return text.startswith(self.NOISE)

    @staticmethod
    def _write(out, data: bytes) -> None:
        try:
            out.write(data)
            out.flush()
        except (OSError, ValueError):
            pass                     # a closed or broken stream: the run goes on, files are written

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=5)


ONE_TERMINAL_ENV = "COLLBENCH_ONE_TERMINAL"
#: set (to 1) for self-launched ranks when the user's stdout, or stderr, is a terminal
TTY_ENV = {"stdout": "COLLBENCH_STDOUT_TTY", "stderr": "COLLBENCH_STDERR_TTY"}


def mark_terminals(env: dict) -> None:
    """Tell self-launched ranks, which write through the launcher's pipes, what the user's
    streams are: terminals or not, and one terminal behind both (``one_terminal``)."""
    for stream, name in ((sys.stdout, TTY_ENV["stdout"]), (sys.stderr, TTY_ENV["stderr"])):
        if stream.isatty():
            env[name] = "1"
    if one_terminal():
        env[ONE_TERMINAL_ENV] = "1"


def user_terminals(env=None) -> tuple[bool, bool, bool]:
    """(stdout is a terminal, stderr is a terminal, tables go through stderr) for this rank's
    output. Self-launched, as the launching process saw the user's streams (what the rank sees
    itself is the launcher's pipe, MPICH, or a pseudo-terminal, Open MPI); else its own."""
    from collbench.launch.launcher import LAUNCHED_ENV

    env = os.environ if env is None else env
    if env.get(LAUNCHED_ENV):
        return (env.get(TTY_ENV["stdout"]) == "1", env.get(TTY_ENV["stderr"]) == "1",
                env.get(ONE_TERMINAL_ENV) == "1")
    return sys.stdout.isatty(), sys.stderr.isatty(), False


def one_terminal() -> bool:
    """Whether stdout and stderr are one terminal. Then rank 0 writes its tables and progress
    bar through one stream: the launcher relays each stream on its own, and two could reorder
    the bar's erasing around a table, leaving a stale bar in it."""
    try:
        if not (sys.stdout.isatty() and sys.stderr.isatty()):
            return False
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
        return (out.st_rdev, out.st_ino) == (err.st_rdev, err.st_ino)
    except (OSError, ValueError):
        return False
