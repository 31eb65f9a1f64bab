"""Signals on a rank: SIGINT, SIGTERM, SIGHUP and SIGUSR1 end it from a thread of its own, at
once, even while the main thread is blocked inside MPI or torch (see ``handle_signals``).

Only the standard library is imported here.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

from collbench.launch import notes
from collbench.launch.liveness import supervise
from collbench.launch.liveness.supervise import saved_results_clause
from collbench.launch.liveness.wire import EARLY_EXIT_GRACE, STOP_GRACE
from collbench.launch.origin.terminal import END_PROGRESS_LINE, user_terminals


_stopping = threading.Event()
#: how often the signal thread looks for a pending SIGUSR1 (the guardian's "stop now")
USR1_POLL_S = 0.05
#: Seconds a rank in a job waits for word of a stop before it calls an error its own.
ECHO_GRACE = 2.0


def stopping(peer_lost: bool = False) -> bool:
    """A signal is ending this rank, or is about to: errors the main thread meets now are its
    echo, not news. gloo sees a peer's death at once (its connections are reset), while the
    coordinator's word of it takes a moment more, from another host perhaps; so a rank in a
    job gives that word ``ECHO_GRACE`` seconds to come. ``peer_lost``: the error says a peer
    went (a connection reset): one that a signal ended on its own is named by the coordinator
    once the others had ``EARLY_EXIT_GRACE`` to follow it, so the word may take that long."""
    if not supervise.has_guardian():
        return _stopping.is_set()
    return _stopping.wait(EARLY_EXIT_GRACE + ECHO_GRACE if peer_lost else ECHO_GRACE)


# this rank's wakeup pipe (read end, write end), once handle_signals made it
_pipe: list = []


def _nothing(signum, _frame) -> None:
    """The Python-level handler: the thread of ``handle_signals`` acts on the signal. It writes
    the signal to the pipe too, should something have put another wakeup fd in ours' place (a
    second word of one signal is no news to the thread)."""
    if _pipe:
        try:
            os.write(_pipe[1], bytes([signum]))
        except OSError:
            pass


def _forget_in_child() -> None:
    """In a child forked without exec (a worker pool): the rank's pipe, handlers and blocked
    SIGUSR1 are not its."""
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
    for fd in _pipe:
        try:
            os.close(fd)
        except OSError:
            pass
    _pipe.clear()



def take_back() -> None:
    """Once the MPI library has started: the handlers it set give way to collbench's again.
    UCX takes SIGHUP for its own (it raises its log level and the rank goes on), so a SIGHUP to
    one rank under a user's mpiexec let the run finish with exit 0 and UCX's debug lines."""
    if not _pipe:
        return
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is _nothing:
            signal.signal(signum, _nothing)          # sets the process's handler again
            signal.siginterrupt(signum, False)


def handle_signals(rank: int) -> None:
    """SIGINT, SIGTERM, SIGHUP and SIGUSR1 end this rank from a thread of their own, at once.

    A Python signal handler would only run once the main thread returns from the MPI or
    torch call it is blocked in, which, when a peer is gone, is never. So the handlers here do
    nothing, and the signal's number, which Python's own C handler writes to a pipe at once
    (``signal.set_wakeup_fd``), wakes a thread of its own: rank 0 says what happened, the others
    give it a moment (a launcher kills every rank once one has exited), and the rank leaves
    without MPI_Finalize, which could wait forever. What must be saved is saved first
    (``before_exit``), under a deadline so that a stuck save cannot keep the rank alive.

    SIGINT, SIGTERM and SIGHUP are not blocked, so the processes a rank starts (a plugin's
    helper) do not inherit a mask that would make them deaf to them; system calls they
    interrupt are restarted. SIGUSR1 alone stays blocked and is taken by ``sigtimedwait``: MPICH's
    launcher sends it to the job's processes as one of them ends, at moments (MPI_Abort, the
    interpreter's finalisation) when a handler of Python's no longer stands, and it killed ranks.
    """
    wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    # before any thread: they inherit it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    _pipe[:] = [woken, wake]
    os.register_at_fork(after_in_child=_forget_in_child)
    for signum in wanted:
        signal.signal(signum, _nothing)
        signal.siginterrupt(signum, False)
    signal.set_wakeup_fd(wake, warn_on_full_buffer=False)

    def next_signal() -> int:
        while True:
            try:
                ready = select.select([woken], [], [], USR1_POLL_S)[0]
                data = os.read(woken, 1) if ready else b""
            except InterruptedError:
                continue
            if data and data[0] in wanted:
                return data[0]
            if signal.sigtimedwait({signal.SIGUSR1}, 0) is not None:
                return signal.SIGUSR1

    def wait() -> None:
        signum = next_signal()
        _stopping.set()
        while (signum == signal.SIGUSR1 and supervise.has_guardian()
               and not supervise.asked_to_stop() and not supervise.guardian_died()):
            # Not the guardian's: MPICH's launcher tells the ranks that another process of the job
            # ended (it does so when it leaves the clean-up to collbench). That process's guardian
            # tells the coordinator, which names it and ends the job: this rank waits to be told.
            signum = next_signal()
        # a stuck save must not keep us
        deadline = threading.Timer(STOP_GRACE / 2, os._exit, (128 + signum,))
        deadline.daemon = True
        deadline.start()
        supervise.ending()
        # the guardian's "stop now": it, or the coordinator, says why;
        if signum == signal.SIGUSR1:
            if supervise.guardian_died():   # or the guardian died (PR_SET_PDEATHSIG), and cannot
                notes.orphaned(rank)
        elif rank == 0 and not notes.said_elsewhere():
            notes.clear_terminal()
            if user_terminals().stderr:
                sys.stderr.write(END_PROGRESS_LINE)
            notes.say(f"collbench: interrupted by {signal.Signals(signum).name}; "
                      f"{saved_results_clause()}")
        else:
            time.sleep(1.0)
        supervise.run_before_exit()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)

    threading.Thread(target=wait, name="collbench-signals", daemon=True).start()

