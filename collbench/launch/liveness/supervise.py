"""Keeping a rank's failure loud, the job's end prompt, and its results safe.

Each rank forks before anything else is imported: the child is the real rank, and the parent,
its **guardian**, waits for it and keeps its connection to the job's ``coordinator``, which
names a rank that dies and ends the job on every host. This module is the rank's side of that:
the fork, the position the rank writes for its guardian before each size, what must be saved
before it leaves, and the job's abort; ``watchdog`` and ``signals`` work beside it. Why it is
built so: docs/development.md, "Inside a launch"; what a user sees: docs/failures.md.

Only the standard library is imported here: the guardian must stay small.
"""

from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Callable, Optional

from collbench.launch import notes, processes
from collbench.launch.liveness import coordinator, wire
from collbench.launch.liveness.wire import STOP_GRACE

_POSITION_BYTES = 512
#: the signals that end a run; a guardian passes them on to its rank
_ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Position:
    """What this rank is doing now, in memory shared with its guardian; and, in its last byte,
    whether the guardian has asked the rank to stop (its SIGUSR1 is then not news of its death)."""

    def __init__(self) -> None:
        self._buf = mmap.mmap(-1, _POSITION_BYTES)

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")[:_POSITION_BYTES - 3]
        self._buf[0:2] = len(data).to_bytes(2, "little")
        self._buf[2:2 + len(data)] = data

    def read(self) -> str:
        n = int.from_bytes(self._buf[0:2], "little")
        return self._buf[2:2 + n].decode("utf-8", "replace")

    def ask_to_stop(self) -> None:
        self._buf[_POSITION_BYTES - 1] = 1

    @property
    def asked_to_stop(self) -> bool:
        return self._buf[_POSITION_BYTES - 1] == 1


_position: Optional[_Position] = None
_rank_label = "rank 0"
_channel: Optional[socket.socket] = None   # the rank's end of its line to the guardian
_channel_lock = threading.Lock()
# rank 0: the port and token of its guardian's coordinator
_coordinator_at: Optional[dict] = None
_guardian_pid: Optional[int] = None        # the rank's guardian (its parent)


def guard_rank(launcher) -> None:
    """Fork a guardian for this rank (Linux only). Returns in the child; never in the guardian."""
    global _position, _rank_label, _channel, _coordinator_at, _guardian_pid
    rank, size = launcher.rank, launcher.world_size
    _rank_label = f"rank {rank}"
    position = _Position()
    _position = position
    if not sys.platform.startswith("linux"):
        return
    pair = socket.socketpair() if size > 1 else None
    listener = coordinator.open_listener() if rank == 0 and size > 1 else None
    token = os.urandom(16).hex()     # not secrets: it loads hashlib, noisy where no room is left
    guardian, launcher_process = os.getpid(), os.getppid()
    sys.stdout.flush()
    sys.stderr.flush()
    # A signal that reaches the child before its first instruction is taken there inside fork,
    # and Python's after-fork reset drops it: the rank went on as if never signalled. Blocked
    # across the fork, it waits until each side has its handlers.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _ENDING_SIGNALS)
    child = os.fork()
    if child == 0:
        processes.die_with_parent(signal.SIGUSR1)
        if os.getppid() != guardian:        # the guardian died between fork and prctl
            os._exit(1)
        _guardian_pid = guardian
        notes.speak_for(launcher_process)
        if listener is not None:
            _coordinator_at = {"port": listener.getsockname()[1], "token": token}
            listener.close()
        if pair is not None:
            pair[0].close()
            _channel = pair[1]
            atexit.register(_channel.close)     # it lives as long as the rank, then goes quietly
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)    # one that came is taken now
        return
    notes.speak_for(launcher_process)
    noted: list = []           # a signal before the guardian takes them: passed on when it does
    for signum in _ENDING_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, lambda s, _frame: noted.append(s))
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if pair is not None:
        pair[1].close()
    from collbench.launch.liveness.guardian import Guardian
    Guardian(child, rank, size, position, pair[0] if pair else None, listener,
             token).run(tuple(noted))


@contextlib.contextmanager
def startup_output():
    """While a library starts in this rank (MPI_Init), what it prints on stdout or stderr goes to
    a file its guardian reads should the rank die there (``notes.startup_output``), so that the
    line about the failed start names the library's cause; once the library has started it is
    copied to stderr. stdout is collbench's own: UCX writes its warnings there ("network device
    'bogus0' is not available"), and `-f json > x.json` began with them. Without a guardian,
    both are left alone.

    Meanwhile the guardian's death kills the rank outright (SIGKILL, not SIGUSR1): mpi4py starts
    MPI holding the interpreter's lock, so the rank's signal thread cannot run there, and a rank
    whose guardian was killed while it waited in MPI_Init spun there, with mpiexec's proxy, past
    any --timeout (the guardian enforces it)."""
    if _guardian_pid is None:
        yield
        return
    processes.die_with_parent(signal.SIGKILL)
    try:
        with _output_kept(_guardian_pid):
            yield
    finally:
        processes.die_with_parent(signal.SIGUSR1)


@contextlib.contextmanager
def _output_kept(guardian: int):
    """stdout and stderr to a file while the library starts (``startup_output``)."""
    path = ""
    saved: list = []
    try:
        path = notes.startup_output(guardian)     # no usable temporary folder: OSError
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            for target in (1, 2):
                saved.append(os.dup(target))
                os.dup2(fd, target)
        finally:
            os.close(fd)
    # no room for a descriptor, or the name taken: both stay as they are
    except OSError:
        _restore(saved)
        with contextlib.suppress(OSError):
            if path:
                os.unlink(path)
        yield
        return
    try:
        yield
    except BaseException:
        # The library failed to start: what it said stays in the file, for the one line that
        # says why (the guardian's or the launcher's), rather than on the terminal beside it
        _restore(saved)
        raise
    _restore(saved)
    try:
        with open(path, "rb") as fh:
            said = fh.read()
        os.unlink(path)
    except OSError:
        said = b""
    if said:
        os.write(2, said)


def _restore(saved: list) -> None:
    """stdout and stderr back as they were (``saved``: their copies, in that order), the copies
    closed."""
    with contextlib.suppress(ValueError, OSError):
        sys.stdout.flush()
        sys.stderr.flush()
    for target, copy in zip((1, 2), saved):
        with contextlib.suppress(OSError):
            os.dup2(copy, target)
        os.close(copy)


def asked_to_stop() -> bool:
    """This rank's guardian has asked it to stop (its SIGUSR1 follows)."""
    return _position is not None and _position.asked_to_stop


def guardian_died(seconds: float = 1.0) -> bool:
    """After a SIGUSR1 the guardian did not send (it asks in shared memory first): whether it
    was the news of the guardian's death (PR_SET_PDEATHSIG). That signal comes as the
    guardian's first thread ends, while its others may still be ending: wait for the whole
    process, at most ``seconds``."""
    if _guardian_pid is None or _position is None or _position.asked_to_stop:
        return False
    if os.getppid() != _guardian_pid:
        return True
    try:
        fd = os.pidfd_open(_guardian_pid)
    except ProcessLookupError:
        return True
    except (OSError, AttributeError):
        return False
    try:
        return bool(select.select([fd], [], [], seconds)[0])
    finally:
        os.close(fd)


def ask_guardian(message: dict, seconds: float) -> Optional[dict]:
    """One request to this rank's guardian and its answer; None without a guardian or answer."""
    if _channel is None:
        return None
    with _channel_lock:
        _channel.settimeout(seconds)
        reader = wire.MessageReader(_channel)
        if not wire.send_message(_channel, message):
            return None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            answers = reader.feed()
            if answers is None:
                return None
            if answers:
                return answers[0]
    return None


def leaving(code) -> None:
    """Tell the guardian the exit code this rank is about to leave with (``sys.exit``'s), and wait
    until it has it: an exit code it was not told (a library that ended the process) is then
    not taken for collbench's own (``guardian.SHARED_EXIT_CODES``)."""
    if isinstance(code, int) and not isinstance(code, bool):
        ask_guardian({"t": "exit", "code": code}, 1.0)


def watch_startup(seconds: float, stopped: float = 0.0) -> None:
    """Have the guardian stop this rank if it has not joined the job ``seconds`` from now (0:
    never), or once a rank of its host has been stopped for ``stopped`` seconds (0: only at
    ``seconds``): the start-up deadline that still holds when MPI_Init keeps this interpreter."""
    if _channel is not None and seconds > 0:
        with _channel_lock:
            wire.send_message(_channel, {"t": "startup", "limit": seconds, "stopped": stopped})


def coordinator_at() -> Optional[dict]:
    """Rank 0: where its guardian's coordinator listens ({"port", "token"}); None elsewhere."""
    return _coordinator_at


def join_job(candidates: list, port: int, token: str, seconds: float = 30.0) -> Optional[dict]:
    """Have the guardian connect to the coordinator: {"address", "local"} on success,
    {"error"} on failure, None when this rank has no guardian."""
    answer = ask_guardian({"t": "join", "candidates": candidates, "port": port, "token": token},
                          seconds)
    if answer is None:
        return None if _channel is None else {"error": "its guardian did not answer"}
    if answer.get("t") == "joined":
        return {"address": answer["address"], "local": answer["local"]}
    return {"error": answer.get("error", "unknown")}


_job_abort: Optional[Callable[[int], None]] = None


def set_job_abort(abort: Optional[Callable[[int], None]]) -> None:
    """How to end the whole job from this rank (MPI_Abort); without it only this process ends,
    and the launcher (or collbench's own parent) stops the others."""
    global _job_abort
    _job_abort = abort


_before_exit: list = []
_result_files: list = []
_kept = [notes.EVERY_SIZE]       # what the files hold, said in a line about an early end
_journal: list = [None]          # the folder of the run's journal, for the guardian


def remove_after_the_job(path: str) -> bool:
    """Rank 0: have its guardian remove ``path`` once every rank of a job that ended well has
    ended (torch's file:// store, which torch leaves where a rank's store object outlives its
    run). False without a guardian and job channel to do it."""
    if _channel is None or _coordinator_at is None:
        return False
    with _channel_lock:
        return wire.send_message(_channel, {"t": "remove-after-job", "path": str(path)})


def set_result_files(paths, journal=None, kept: str = "") -> None:
    """The files this rank writes, so that a line about an early end can name them (also the
    coordinator's, which runs in this rank's guardian), and the folder of the run's journal,
    from which the guardian rebuilds them if this rank is killed outright; ``kept``: what they
    hold then (``notes.kept_after_rounds``)."""
    _result_files[:] = [str(p) for p in paths]
    _journal[0] = journal
    if kept:
        _kept[0] = kept
    if _channel is not None and _result_files:
        with _channel_lock:
            wire.send_message(_channel, {"t": "files", "paths": _result_files, "kept": _kept[0],
                                                "journal": str(journal)
                                         if journal is not None else None})


def forget_journal() -> None:
    """The result files cannot be written (a full disk): the guardian must not try again."""
    set_result_files(_result_files, None)


def size_finished() -> None:
    """Rank 0 finished a size: the files keep it, should the run end early."""
    if _kept[0] == notes.NO_SIZE_YET:
        set_result_files(_result_files, _journal[0], notes.EVERY_SIZE)


def saved_results_clause(paths=None, kept: str = "") -> str:
    """The end of a line about an early end: where what was measured is."""
    paths = _result_files if paths is None else paths
    return notes.files_clause(paths, kept or _kept[0])


def before_exit(callback: Callable[[], None]) -> None:
    """Run ``callback`` when this rank ends early (a signal, a timeout, an abort): what must not
    be left half done, such as a result file being written. It runs on whichever thread ends
    the rank, possibly while the main thread is stuck in a collective."""
    _before_exit.append(callback)


def run_before_exit() -> None:
    while _before_exit:
        callback = _before_exit.pop()
        try:
            callback()
        except Exception:          # an early exit must not fail on its way out
            pass


def abort_job(code: int) -> None:
    """End the whole job with ``code``: through the coordinator when this rank has joined one
    (it reaches every host), else MPI_Abort, else this process alone."""
    run_before_exit()
    sys.stdout.flush()
    sys.stderr.flush()
    answer = ask_guardian({"t": "abort-job", "code": code}, 2.0)
    if answer is not None and answer.get("t") == "taken":
        time.sleep(2 * STOP_GRACE)            # the guardian stops this rank
    time.sleep(0.5)          # let the launcher forward the message before it kills the job
    if _job_abort is not None:
        _job_abort(code)
    os._exit(code)


#: What this rank is doing, as ``set_position`` last said, for a rank without a guardian.
_here = ""


#: set once a signal ends this rank (``signals``): its main thread stops at its next step
_ending = threading.Event()


def ending() -> None:
    """A signal ends this rank, on a thread of its own that saves what must be saved and then
    ends the process: the main thread goes no further than its next step. Going on, it finished
    the run while the others waited a moment to let rank 0 speak first, and left with exit 0 as
    if never signalled."""
    _ending.set()


def set_position(what: str) -> None:
    """Record what this rank is doing, for the guardian's report if it dies, and for this rank's
    own line if it fails; a rank that a signal ends stops here (``ending``)."""
    global _here
    # the signal's thread ends the process, within its deadline; a rank its guardian asked to
    # stop, and continued if it was stopped, would otherwise go on into the next collective
    # for the moment its signal thread takes to see that, and let the others go on as well
    while ((_ending.is_set() or asked_to_stop())
           and threading.current_thread() is threading.main_thread()):
        time.sleep(1.0)
    _here = what
    if _position is not None:
        _position.write(what)


def rank_label() -> str:
    """How lines from this rank name it ("rank 3")."""
    return _rank_label


def current_position() -> str:
    """What this rank is doing now, as last recorded by ``set_position`` ("" before that)."""
    return _position.read() if _position is not None else _here


def has_guardian() -> bool:
    """This rank has a guardian, and so a line to the job's coordinator."""
    return _channel is not None
