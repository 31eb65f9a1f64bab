"""mpiexec's output, relayed to ours as it comes, less what the launcher says about a job
collbench has already explained."""

from __future__ import annotations

import collections
import errno
import os
import re
import subprocess
import sys
import threading


#: carriage returns and terminal control sequences (cursor, erase) at the start of a line
_CONTROLS = re.compile(rb"^(?:\r|\x1b\[[0-9;?]*[A-Za-z])*")


class Relay:
    """Copies mpiexec's output to ours as it comes, leaving out what the launcher itself says
    about a job collbench has already explained (MPICH's "BAD TERMINATION" banner, which it
    prints on stdout and would corrupt ``-f json``; Ctrl-C chatter; MPI_Abort's line).
    ``spoke``: a collbench line went by on stderr; ``said``: the last of them; ``launcher_said``:
    what MPICH's mpiexec said first of its own failure ("unrecognized launcher: bogus"), left
    out of the output but kept for the line that says why the job ended."""

    NOISE = (b"=====", b"=   ", b"YOUR APPLICATION TERMINATED", b"This typically refers to a problem",
             b"Please see the FAQ page", b"[mpiexec@", b"[proxy:", b"Abort(", b"Assertion failed",
             b"internal ABORT", b"application called MPI_Abort", b"[unset]:", b"Press Ctrl-C again",
             b"Ctrl-C caught", b"Sending Ctrl-C")

    def __init__(self, process: subprocess.Popen) -> None:
        self.spoke = False
        self.said: collections.deque = collections.deque(maxlen=64)
        self.launcher_said = ""
        #: a signal is ending the job: only collbench's own lines go on (not the tracebacks of
        #: ranks interrupted while Python started, nor the libraries' words as they die)
        self.quiet = False
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
            if held and not self.quiet and not any(held.startswith(n[:len(held)]) for n in self.NOISE):
                keep.append(held)          # a partial line (a progress bar): pass it on now
                held = b""
            if keep:
                self._write(out, b"".join(keep), target)
        if held and not self._noise(held):
            self._write(out, held, target)

    def _noise(self, line: bytes) -> bool:
        text = _CONTROLS.sub(b"", line)        # what a terminal shows: a bar's erasing left out
        if text.startswith(b"collbench:"):
            self.spoke = True
            self.said.append(text.decode("utf-8", "replace").rstrip("\r"))
        elif text.startswith(b"[mpiexec@") and not self.launcher_said:   # [mpiexec@host] where (file:line): what
            self.launcher_said = text.decode("utf-8", "replace").rsplit("): ", 1)[-1].strip()[:200]
        return text.startswith(self.NOISE) or (self.quiet and not text.startswith(b"collbench:"))

    def saw(self, line: str) -> bool:
        """Whether ``line`` went by: whole, or the start of it, wrapped to a terminal's width by
        the rank that printed it (its other parts then follow on lines of their own)."""
        wanted = " ".join(line.split())
        return any(wanted.startswith(" ".join(seen.split())) for seen in self.said
                   if len(seen.split()) > 1)

    @staticmethod
    def _write(out, data: bytes, target) -> None:
        try:
            out.write(data)
            out.flush()
        except OSError as exc:       # the run goes on, files are written; a full disk is said at the end
            if exc.errno not in (errno.EPIPE, errno.EBADF) and hasattr(target, "failed"):
                target.failed(exc.strerror or str(exc))
        except ValueError:           # a closed stream
            pass

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=5)

