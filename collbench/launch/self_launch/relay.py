"""mpiexec's output, relayed to ours as it comes, less what the launcher says about a job
collbench has already explained."""

from __future__ import annotations

import collections
import errno
import os
import re
import select
import subprocess
import sys
import threading
import time
from typing import Optional


#: carriage returns and terminal control sequences (cursor, erase) at the start of a line
_CONTROLS = re.compile(rb"^(?:\r|\x1b\[[0-9;?]*[A-Za-z])*")
#: how long stderr is held back from the first line of a rank's traceback or of Python's fatal
#: start-up error: a Ctrl-C to the terminal reaches the starting ranks and this process at once,
#: and the ranks' lines can come through mpiexec before this process's main thread has run its
#: handler (and made the relay ``quiet``); held, they are judged once it has
HOLD_S = 1.0
#: the lines that start such a block
_HOLD = (b"Traceback (most recent call last):", b"Fatal Python error:")


def _begins_hold(partial: bytes) -> bool:
    """Whether a partial line may be the start of a block held back (``_HOLD``): Python writes
    "Fatal Python error: " and the rest of its line in two writes."""
    text = _CONTROLS.sub(b"", partial)
    return any(text.startswith(mark) or (len(text) >= 5 and mark.startswith(text))
               for mark in _HOLD)


class Relay:
    """Copies mpiexec's output to ours as it comes, leaving out what the launcher itself says
    about a job collbench has already explained (MPICH's "BAD TERMINATION" banner, which it
    prints on stdout and would corrupt ``-f json``; Ctrl-C chatter; MPI_Abort's line).
    ``spoke``: a collbench line went by on stderr; ``said``: the last of them; ``launcher_said``:
    what MPICH's mpiexec said first of its own failure ("unrecognized launcher: bogus"), left
    out of the output but kept for the line that says why the job ended. ``wrap_width``: the
    width the ranks wrap collbench's lines at (they do so when the user's stderr is a terminal),
    so that the parts of a wrapped line go on together; None where they do not wrap.
    ``stdout``: where mpiexec's stdout goes (ours by default)."""

    NOISE = (b"=====", b"=   ", b"YOUR APPLICATION TERMINATED",
             b"This typically refers to a problem",
             b"Please see the FAQ page", b"[mpiexec@", b"[proxy:", b"Abort(", b"Assertion failed",
             b"internal ABORT", b"application called MPI_Abort", b"[unset]:", b"Press Ctrl-C again",
             b"Ctrl-C caught", b"Sending Ctrl-C")

    def __init__(self, process: subprocess.Popen, wrap_width: Optional[int] = None,
                 stdout=None) -> None:
        self.spoke = False
        self.wrap_width = wrap_width
        self.said: collections.deque = collections.deque(maxlen=64)
        self.launcher_said = ""
        #: a signal is ending the job: only collbench's own lines go on to stderr; what the ranks
        #: print as it reaches them (tracebacks of ranks it interrupted while Python started,
        #: Python's fatal start-up lines) is left out
        self.quiet = False
        self._threads = [threading.Thread(target=self._copy,
                                          args=(process.stdout, stdout or sys.stdout, False),
                                          daemon=True),
                         threading.Thread(target=self._copy,
                                          args=(process.stderr, sys.stderr, True), daemon=True)]
        for t in self._threads:
            t.start()

    def _copy(self, source, target, errors: bool) -> None:
        out = getattr(target, "buffer", target)
        fd = source.fileno()
        held = b""                   # a partial line
        waiting: list = []           # stderr's lines held back from a traceback's first (HOLD_S)
        since = 0.0
        last = b""                   # the last line passed on, while it is collbench's
        while True:
            if waiting:
                left = since + HOLD_S - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    self._pass(out, target, waiting)
                    waiting = []
                    continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            held += chunk
            *lines, held = held.split(b"\n")
            keep = []
            for line in lines:
                if errors and not waiting and _CONTROLS.sub(b"", line).startswith(_HOLD):
                    since, waiting = time.monotonic(), [line]
                elif waiting:
                    waiting.append(line)
                else:
                    # the next part of a collbench line goes on, and may be followed by another
                    ours = (self._continues(last, line)
                            or _CONTROLS.sub(b"", line).startswith(b"collbench:"))
                    passed = not self._noise(line, errors and self._interrupted(line) and not ours)
                    if passed:
                        keep.append(line + b"\n")
                    last = line if passed and ours else b""
            if held and not waiting and not (errors and self.quiet) \
                    and not any(held.startswith(n[:len(held)]) for n in self.NOISE) \
                    and not (errors and _begins_hold(held)):
                # a partial line (a progress bar, or a line cut by the pipe):
                self._noise(held)
                keep.append(held)          # noted if it is collbench's, and passed on now
                held = b""
            if keep:
                self._write(out, b"".join(keep), target)
        if waiting:
            time.sleep(max(0.0, since + HOLD_S - time.monotonic()))
            self._pass(out, target, waiting)
        if held and not self._noise(held, errors and self._interrupted(held)):
            self._write(out, held, target)

    def _pass(self, out, target, lines: list) -> None:
        """Write the lines held back, less what ``quiet`` now leaves out."""
        keep = [line + b"\n" for line in lines if not self._noise(line, self._interrupted(line))]
        if keep:
            self._write(out, b"".join(keep), target)

    def _interrupted(self, line: bytes) -> bool:
        """While quiet (a signal ends the job): whether ``line`` is left out, as every line but
        collbench's own is. What ranks print as the signal reaches them is what a rank
        interrupted as Python started prints: tracebacks and fatal errors, two ranks' at once
        through one launcher. A frame's line was known by its indent and the exception's by
        following the frames, but the launcher may pass one rank's line on in pieces between
        another's (a frame's source line, "import enum", once reached the terminal with no
        indent beside "collbench: interrupted by SIGINT")."""
        return self.quiet and not _CONTROLS.sub(b"", line).startswith(b"collbench:")

    def _continues(self, last: bytes, line: bytes) -> bool:
        """Whether ``line`` is the next part of collbench's line ``last``, wrapped by the rank
        that printed it: a word that did not fit after ``last``, with no indent."""
        if not last or not self.wrap_width or not line[:1].strip() or line.startswith(self.NOISE):
            return False
        return len(_CONTROLS.sub(b"", last).decode("utf-8", "replace")) + 1 + len(
            line.split()[0].decode("utf-8", "replace")) > self.wrap_width

    def _noise(self, line: bytes, interrupted: bool = False) -> bool:
        text = _CONTROLS.sub(b"", line)        # what a terminal shows: a bar's erasing left out
        if text.startswith(b"collbench:"):
            self.spoke = True
            self.said.append(text.decode("utf-8", "replace").rstrip("\r"))
        # [mpiexec@host] where (file:line): what
        elif text.startswith(b"[mpiexec@") and not self.launcher_said:
            self.launcher_said = text.decode("utf-8", "replace").rsplit("): ", 1)[-1].strip()[:200]
        return interrupted or text.startswith(self.NOISE)

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
        # the run goes on, files are written; a full disk is said at the end
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.EBADF) and hasattr(target, "failed"):
                target.failed(exc.strerror or str(exc))
        except ValueError:           # a closed stream
            pass

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=5)

