"""Keeping a rank's failure loud and its results safe.

* A **guardian**: each rank forks before anything else is imported. The child is the real
  rank; the parent only waits for it. If the child dies abnormally (a signal, or an exit code
  collbench never uses), the guardian prints which rank died, where, and during which
  collective and size, then exits non-zero, so the launcher ends the job at once. The child
  gets SIGKILL if its guardian is killed (``PR_SET_PDEATHSIG``), so a launcher's clean-up
  never leaves an orphan rank. Where the position lives: a few shared bytes (mmap), written by
  the rank before each size, outside any timed region.
* A **watchdog** thread per rank: if one size takes longer than ``--timeout`` seconds, it
  names the collective and size and aborts the whole job. It sleeps until the deadline.
* **Signals**: SIGINT and SIGTERM are taken by a thread of their own, which ends the rank at
  once even while the main thread is blocked inside MPI or torch.

Only the standard library is imported here: the guardian must stay small.
"""

from __future__ import annotations

import mmap
import os
import signal
import socket
import sys
import threading
import time
from typing import Callable, Optional

#: Exit codes collbench itself uses; any other exit of a rank counts as a crash.
OWN_EXIT_CODES = {0, 1, 2, 124, 130, 143}
TIMEOUT_EXIT = 124
_POSITION_BYTES = 512


class _Position:
    """What this rank is doing now, in memory shared with its guardian."""

    def __init__(self) -> None:
        self._buf = mmap.mmap(-1, _POSITION_BYTES)

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")[:_POSITION_BYTES - 2]
        self._buf[0:2] = len(data).to_bytes(2, "little")
        self._buf[2:2 + len(data)] = data

    def read(self) -> str:
        n = int.from_bytes(self._buf[0:2], "little")
        return self._buf[2:2 + n].decode("utf-8", "replace")


_position: Optional[_Position] = None
_rank_label = "rank 0"


def _set_pdeathsig() -> bool:
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


def guard_rank(rank: int) -> None:
    """Fork a guardian for this rank (Linux only). Returns in the child; never in the guardian."""
    global _position, _rank_label
    _rank_label = f"rank {rank}"
    if not sys.platform.startswith("linux") or os.environ.get("COLLBENCH_NO_GUARDIAN"):
        _position = _Position()
        return
    position = _Position()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        _set_pdeathsig()
        if os.getppid() == 1:          # the guardian died between fork and prctl
            os._exit(1)
        _position = position
        return
    _guardian(child, rank, position)


def _guardian(child: int, rank: int, position: _Position) -> None:
    def forward(signum, _frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, forward)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        how, code = f"was killed by signal {sig} ({signal.Signals(sig).name})", 128 + sig
    else:
        code = os.WEXITSTATUS(status)
        how = f"exited with code {code}"
    if code not in OWN_EXIT_CODES:
        where = position.read() or "start-up"
        sys.stderr.write(f"collbench: rank {rank} (pid {child} on {socket.gethostname()}) {how} during "
                         f"{where}; the job is stopped; result files keep every size finished before\n")
        sys.stderr.flush()
    os._exit(code)


class Watchdog:
    """Aborts the job when one size runs past its deadline. One thread per rank, mostly asleep."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._deadline: Optional[float] = None
        self._what = ""
        self._limit = 0.0
        self._thread = threading.Thread(target=self._loop, name="collbench-watchdog", daemon=True)
        self._thread.start()

    def arm(self, seconds: float, what: str) -> None:
        with self._lock:
            self._deadline = time.monotonic() + seconds if seconds > 0 else None
            self._what, self._limit = what, seconds
        self._wake.set()

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None
        self._wake.set()

    def _loop(self) -> None:
        while True:
            with self._lock:
                deadline = self._deadline
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._wake.wait(wait):
                self._wake.clear()
                continue
            with self._lock:
                expired = self._deadline is not None and time.monotonic() >= self._deadline
                what, limit = self._what, self._limit
            if expired:
                sys.stderr.write(f"collbench: {_rank_label}: timeout: {what} did not finish within "
                                 f"{limit:g} s (--timeout); aborting the job; result files keep every "
                                 f"size finished before\n")
                sys.stderr.flush()
                abort_job(TIMEOUT_EXIT)


_job_abort: Optional[Callable[[int], None]] = None


def set_job_abort(abort: Optional[Callable[[int], None]]) -> None:
    """How to end the whole job from this rank (MPI_Abort); without it only this process ends,
    and the launcher (or collbench's own parent) stops the others."""
    global _job_abort
    _job_abort = abort


_before_exit: list = []


def before_exit(callback: Callable[[], None]) -> None:
    """Run ``callback`` when this rank ends early (a signal, a timeout, an abort): what must not
    be left half done, such as a result file being written. It runs on whichever thread ends
    the rank, possibly while the main thread is stuck in a collective."""
    _before_exit.append(callback)


def _run_before_exit() -> None:
    while _before_exit:
        callback = _before_exit.pop()
        try:
            callback()
        except Exception:          # an early exit must not fail on its way out
            pass


def abort_job(code: int) -> None:
    _run_before_exit()
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(0.5)          # let the launcher forward the message before it kills the job
    if _job_abort is not None:
        _job_abort(code)
    os._exit(code)


def at(what: str) -> None:
    """Record what this rank is doing, for the guardian's report if it dies."""
    if _position is not None:
        _position.write(what)


def where() -> str:
    return _position.read() if _position is not None else ""


def handle_signals(rank: int) -> None:
    """SIGINT and SIGTERM end this rank from a thread of their own, at once.

    A Python signal handler would only run once the main thread returns from the MPI or
    torch call it is blocked in, which, when a peer is gone, is never. So the signals are
    blocked here, before MPI, torch or the watchdog start threads (they inherit the mask), and
    one thread waits for them: rank 0 says what happened, the others give it a moment (a
    launcher kills every rank once one has exited), and the rank leaves without
    MPI_Finalize, which could wait forever. Files need nothing: they are complete after every size.
    """
    wanted = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)

    def wait() -> None:
        signum = signal.sigwait(wanted)
        if rank == 0:
            if sys.stderr.isatty() or os.environ.get("COLLBENCH_STDERR_TTY") == "1":
                sys.stderr.write("\x1b[?25h")          # a progress bar may have hidden the cursor
            sys.stderr.write(f"collbench: interrupted by {signal.Signals(signum).name}; result files keep "
                             "every size finished before\n")
        else:
            time.sleep(1.0)
        _run_before_exit()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)

    threading.Thread(target=wait, name="collbench-signals", daemon=True).start()
