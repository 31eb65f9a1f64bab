"""A rank's guardian: the parent process that waits for the rank and speaks for it.

See ``supervise`` for the whole picture. Only the standard library is used.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import signal
import socket
import threading
import time
from typing import Optional

from collbench import environment
from collbench.launch import notes, processes
from collbench.launch.journal import rebuild
from collbench.launch.liveness import coordinator
from collbench.launch.liveness.link import Link, connect, hello_message
from collbench.launch.liveness.oom import OomWatch
from collbench.launch.liveness.wire import (EXIT_BAD_ENVIRONMENT, EXIT_LOST, EXIT_TIMEOUT,
                                            RANK_EXIT_CODES, STOP_GRACE, MessageReader,
                                           send_message)

#: how long the guardian of a rank that waited past its join limit leaves a stopped rank's
#: guardian to name it first
STOPPED_FIRST_S = 1.0
#: after the job's abort, how long a rank's guardian waits for rank 0's to leave first (it may be
#: rewriting the result files from the journal: about a second)
JOB_EXIT_WAIT = 30.0
#: Exit codes that collbench ends a rank with and a library can too: MPICH's fatal errors end the
#: process with the error's class as its exit code (1 MPI_ERR_BUFFER, 2 MPI_ERR_COUNT, 15
#: MPI_ERR_OTHER...), C libraries exit(1), Python exits 1 after a traceback, and a library or a
#: plugin may end the process with 0 (``os._exit(0)``) in the middle of the run. The rank tells
#: its guardian the code it chose (``supervise.leaving``); one it did not choose is a crash.
SHARED_EXIT_CODES = frozenset({0, 1, 2})
#: how long rank 0's guardian, after a job that ended well, waits for the others' to leave
#: before it removes what the job left (``remove-after-job``)
LEFTOVER_WAIT = 5.0
#: the codes of a rank that a signal ended through collbench's own handling of it
SIGNAL_EXIT_CODES = frozenset({128 + signal.SIGHUP, 128 + signal.SIGINT, 128 + signal.SIGTERM})


#: Less room than this free in /dev/shm is taken for the cause of a rank's failure in MPI's
#: start-up, where MPICH and UCX make their shared memory (MPICH: "Out of memory", exit 15)
SHARED_MEMORY_LOW = 1 << 20


def shared_memory_explained(sig: int, folder: str = "/dev/shm", *, in_startup: bool = False) -> str:
    """What to add after "was killed by signal 7 (SIGBUS)", or, ``in_startup``, after any end of
    a rank in MPI's start-up (``sig`` 0: an exit code) when /dev/shm is read-only or nearly full:
    MPI maps its shared memory from /dev/shm, making it fails there, and touching a page that
    the file system cannot back raises SIGBUS."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return (", most likely shared memory that could not be backed (/dev/shm)"
                if sig == signal.SIGBUS else "")
    free = fs.f_bavail * fs.f_frsize
    read_only = bool(fs.f_flag & os.ST_RDONLY)
    if sig != signal.SIGBUS and not (in_startup and (read_only or free < SHARED_MEMORY_LOW)):
        return ""
    if read_only:
        return f", most likely for MPI's shared memory ({folder} is read-only: make it writable)"
    free_text = f"{free / (1 << 20):.1f} MiB" if free >= 1 << 20 else f"{free // 1024} KiB"
    return (f", most likely for MPI's shared memory ({folder} has {free_text} free of "
            f"{fs.f_blocks * fs.f_frsize / (1 << 20):.1f} MiB; give it more room, e.g. docker "
            "--shm-size)")


class Guardian:
    """The parent of one rank: waits for it, speaks for it to the coordinator, ends it on demand."""

    def __init__(self, child: int, rank: int, size: int, position, channel, listener,
                 token) -> None:
        self.child, self.rank, self.size, self.position = child, rank, size, position
        self.channel = channel
        self.link: Optional[Link] = None
        self.stop_code: Optional[int] = None
        self.oom = OomWatch()
        self.journal: Optional[str] = None     # rank 0: the run's journal folder, once it has files
        # and the files, and what they keep (``notes.files_clause``)
        self.files: list = []
        self.kept = notes.EVERY_SIZE
        self.startup_limit = 0.0               # seconds the rank has to join the job (0: no limit)
        self.chosen_exit: Optional[int] = None     # the exit code the rank said it leaves with
        self.leftover = ""         # rank 0: a file to remove once a job that ended well has ended
        # the MPI library's shared memory the rank mapped once it had joined the job
        self.shared: frozenset = frozenset()
        # what its MPI library said as it failed to start
        self._startup_words: Optional[str] = None
        # reads the rank's requests (``_serve_rank``)
        self._server: Optional[threading.Thread] = None
        # the rank's end was said (``_report``, ``_watch_launcher``)
        self._spoken = False
        self._speaking = threading.Lock()
        # The launcher's process that started this guardian, one rank of several (mpiexec's
        # proxy, srun's step, torchrun's agent): (pid, name); None for one rank (its parent is
        # a shell, which may end before it), or when it is collbench's own launching process
        # (watched as environment.PARENT_PID).
        parent = os.getppid()
        self.launcher = ((parent, processes.name(parent) or "a process")
                         if size > 1 and parent > 1
                         and str(parent) != os.environ.get(environment.PARENT_PID, "") else None)
        self._parent_fd = None
        # a queue whose put a signal handler may make even inside another put (``_forward``)
        self._after_signal: queue.SimpleQueue = queue.SimpleQueue()
        self._thread(self._after_signals, name="collbench-guardian-signals")
        self.coordinator = None
        notes.guardian(rank, child)
        if listener is not None:
            self.coordinator = coordinator.Coordinator(listener, token, self.stop)
            self.coordinator.start()

    def stop(self, code: int, *, in_handler: bool = False) -> None:
        """End the rank quietly (it saves what it must), SIGKILL after a grace period; the
        guardian then exits with ``code``."""
        if self.stop_code is not None:
            return
        self.stop_code = code
        self.position.ask_to_stop()
        for signum in (signal.SIGCONT, signal.SIGUSR1):
            self._signal(signum)
        self._kill_after_grace(in_handler)

    def _kill_after_grace(self, in_handler: bool = False) -> None:
        if in_handler:                      # starting a thread takes a lock (``_forward``)
            self._after_signal.put(("kill", 0))
            return
        timer = threading.Timer(STOP_GRACE, self._signal, (signal.SIGKILL,))
        timer.daemon = True
        timer.start()

    def _signal(self, signum: int) -> None:
        try:
            os.kill(self.child, signum)
        except ProcessLookupError:
            pass

    def _forward(self, signum, _frame) -> None:
        """A signal to the guardian, passed on to its rank. This runs on the main thread between
        any two of its steps, and one of them may hold a lock: the link's, as the guardian tells
        the coordinator that its rank ended (waiting for it here silenced the line for good, and
        the coordinator took rank 0's host for lost after a Ctrl-C), or one of ``threading``'s.
        So it only sends signals and notes; what takes a lock is done on ``_after_signals``."""
        if signum == signal.SIGUSR1 and self.link is None:
            # MPICH's mpiexec tells the job's processes that one of them failed: in start-up the
            # rank could not act on it (it would die of it), and the failed one says why
            self.stop(128 + signum, in_handler=True)
            return
        self._signal(signum)
        if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if self.stop_code is None:      # the job is being ended from outside, which says why:
                self.stop_code = 128 + signum      # a rank that must be killed is no news
                if self.link is not None:          # nor, to the coordinator, is this guardian's end
                    self._after_signal.put(("signalled", signum))
            self._signal(signal.SIGCONT)            # a stopped rank could not act on it
            self._kill_after_grace(in_handler=True)

    def _after_signals(self) -> None:
        """What ``_forward`` leaves to a thread, in turn: a word to the coordinator, a kill after
        the grace period; and an event set once what came before it is done (``_settle``)."""
        while True:
            what = self._after_signal.get()
            if isinstance(what, threading.Event):
                what.set()
            elif what[0] == "signalled" and self.link is not None:
                self.link.send({"t": "signalled", "signal": what[1]})
            elif what[0] == "kill":
                self._kill_after_grace()

    def _settle(self, seconds: float = 1.0) -> None:
        """Before the guardian leaves: what its signal handler left to ``_after_signals`` is
        done."""
        done = threading.Event()
        self._after_signal.put(done)
        done.wait(seconds)

    def run(self, noted: tuple = ()) -> None:
        """``noted``: the signals that came between the fork and now, passed on first."""
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(s, self._forward)
        for s in noted:
            self._forward(s, None)
        spare = frozenset(processes.children(os.getpid())) - {self.child}   # ours before the rank
        if not os.environ.get(environment.STATE):
            notes.remove_stale_startup_outputs()
        processes.adopt_orphans()          # what the rank starts and leaves behind comes to us
        processes.stay_small(arenas=1)
        if self.channel is not None:
            self._server = self._thread(self._serve_rank, name="collbench-guardian")
        parent = os.environ.get(environment.PARENT_PID, "")
        if parent.isdigit():
            self._thread(self._watch_parent, int(parent))
        if self.launcher is not None:
            self._thread(self._watch_launcher)
        while True:
            try:
                _, status = os.waitpid(self.child, 0)
                break
            except InterruptedError:
                continue
        processes.end_children(spare)      # what the rank started ends with it
        self._startup_said()               # read once (and its file removed), whatever the end
        if self.link is None and self.size > 1:
            self._ended_before_joining(status)
        ended_early = os.WIFSIGNALED(status) or os.WEXITSTATUS(status) not in (0, 1, 2)
        if ended_early and self.shared:
            processes.remove_unused(self.shared, seconds=1.0)
        # A journal of the run's own (under a user's launcher) that outlived the rank holds what
        # the files may lack, however the rank ended; rebuilding takes it away
        owned = not os.environ.get(environment.STATE)
        if self.journal and (ended_early or owned) and os.path.isdir(self.journal) \
                and not self._parent_gone():
            rebuild(self.journal)            # it may not have saved everything it measured
        if self.stop_code is not None and not self._refused_to_start(status):
            # After the job's abort every guardian leaves at once, rank 0's first: MPICH's launcher
            # ends the job's processes the moment one exits with an error, and reports the job as
            # killed by signal 9 if one was still there (as it did while rank 0's guardian was
            # rewriting the result files). So rank 0's waits for the others' ranks to end, and
            # theirs wait for it to leave.
            if self.coordinator is not None and self.coordinator.aborted:
                self.coordinator.wait_for_peers(STOP_GRACE + 2.0)
            elif self.link is not None and self.link.aborted:
                self.link.send({"t": "stopped"})
                self.link.wait_for_coordinator_exit(JOB_EXIT_WAIT)
            self._settle()
            os._exit(self.stop_code)
        self._report(status)

    def _refused_to_start(self, status: int) -> bool:
        """Whether the rank's MPI library refused to start and said why (UCX_TLS=bogus on every
        rank): the launcher then ends the job's other processes, this guardian among them, but
        the end came of this rank, and its line is due even so."""
        return self.link is None and bool(self._startup_words) and not os.WIFSIGNALED(status) \
            and os.WEXITSTATUS(status) != 0

    def _ending(self, status: int) -> tuple:
        """(how the rank ended, for a line; the exit code that says it; whether that was a
        crash): a signal, an exit code collbench does not use or did not choose
        (SHARED_EXIT_CODES), or any end after the launcher's process that started it was gone."""
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            how, code, crashed = (f"was killed by signal {sig} "
                                  f"({signal.Signals(sig).name}){self.oom.explain(sig)}"
                                  f"{shared_memory_explained(sig, in_startup=self.link is None)}",
                                  128 + sig, True)
        else:
            code = os.WEXITSTATUS(status)
            how, crashed = f"exited with code {code}", code not in RANK_EXIT_CODES
            if code in SHARED_EXIT_CODES and self.channel is not None and \
                    self.chosen_exit is None and self._server is not None:
                # the rank's last word, its exit code, may still be in the channel
                self._server.join(1.0)
            if code in SHARED_EXIT_CODES and self.channel is not None and code != self.chosen_exit:
                how += (" without collbench choosing it (a library or a plugin ended the process "
                        "before the run's end)" if code == 0 else
                        " without collbench choosing it (a library ended the process: MPICH's "
                        "fatal errors exit with the error's class, 1 for MPI_ERR_BUFFER, 2 for "
                        "MPI_ERR_COUNT)")
                crashed = True
            # not a code of collbench's: the job's code says a rank was lost
            if crashed:
                how += shared_memory_explained(0, in_startup=self.link is None)
                code = EXIT_LOST
            if not crashed and self._refused_to_start(status):     # and the launcher ended it (143)
                how, crashed = "could not start its MPI library", True
            elif self._signalled_alone_in_startup(status):
                how, crashed = f"ended by {signal.Signals(code - 128).name} with code {code}", True
        unknown = environment.netmod_unknown(os.environ)
        if crashed and self.link is None and os.WIFSIGNALED(status) and unknown:
            # MPICH's library crashes in MPI_Init, saying nothing, on a network module it lacks
            how += f" ({unknown}; unset {environment.NETMOD} or choose one of them)"
            code = EXIT_BAD_ENVIRONMENT
        elif crashed and self.link is None:     # before the rank joined: in its start-up
            limits = processes.low_limits()
            how += self._startup_said() + limits
            # MPI refused to start and said why, or a limit too low for it (ulimit -v: a rank's
            # MPI_Init at 200 MB dies of SIGSEGV at times): the environment's fault either way
            if limits or (self._startup_words and not os.WIFSIGNALED(status)):
                code = EXIT_BAD_ENVIRONMENT
        gone = self._launcher_gone()
        if gone:
            return f"{how} after {gone} ended under it (killed, or it failed)", EXIT_LOST, True
        return how, code, crashed

    def _startup_said(self) -> str:
        """" (MPI's start-up said '…'; UCX_TLS=bogus is set)" for a rank that died starting: what
        its MPI library said (``supervise.startup_output``), and the variables that tune it."""
        if self._startup_words is None:           # read once: the file is gone after
            path = notes.startup_output(os.getpid())
            self._startup_words = notes.startup_words(path)
            if not os.environ.get(environment.STATE):      # the temporary folder's: ours to remove
                with contextlib.suppress(OSError):
                    os.unlink(path)
        return notes.startup_clause(self._startup_words)

    def _launcher_gone(self) -> str:
        """The launcher's process that started this guardian, named, once it has ended under it
        (its children passed to another parent); "" while it is there."""
        if self.launcher is None or os.getppid() == self.launcher[0]:
            return ""
        pid, name = self.launcher
        return f"{name} (pid {pid}), the launcher's process that started it,"

    def _first_to_speak(self) -> bool:
        with self._speaking:
            first, self._spoken = not self._spoken, True
        return first

    def _report(self, status: int) -> None:
        how, code, crashed = self._ending(status)
        link = self.link if self.link is not None and not self.link.ended else None
        if crashed:
            # else its launcher's end was said (``_watch_launcher``)
            if self._first_to_speak():
                where = self.position.read() or "start-up"
                told = link is not None and link.tell_and_wait({"t": "died", "how": how,
                                                                "where": where, "code": code})
                if not told:              # noted first: its launcher's pipes may be gone with it
                    passed_on = self._leave_as_the_rank_did(status, code)
                    notes.say_first(f"collbench: rank {self.rank} (pid {self.child} on "
                                    f"{socket.gethostname()}) {how} during {where}; "
                                    f"{self._aftermath(passed_on)}")
                # rank 0's: the others are told before it leaves
                elif self.coordinator is not None:
                    self.coordinator.wait_for_peers(STOP_GRACE + 2.0)
                else:
                    # A launcher that ends the job's processes the moment one exits with an error
                    # (MPICH's) would end rank 0 before it had made its files whole from the
                    # journal: this guardian leaves after rank 0's has
                    link.ended = True
                    link.wait_for_coordinator_exit(JOB_EXIT_WAIT)
        elif link is not None:
            link.tell_and_wait({"t": "bye", "code": code, "where": self.position.read()},
                               3.0 if self.rank == 0 else 0.2)
            if self.coordinator is not None and self.coordinator.aborted:   # rank 0 left early: the
                # others are being stopped
                self.coordinator.wait_for_peers(STOP_GRACE + 2.0)
            elif self.coordinator is not None and code == 0 and self.leftover:
                self._remove_leftover()
            elif self.coordinator is None and code in SIGNAL_EXIT_CODES and not link.ended:
                # A signal sent to this rank alone: the coordinator names it once the others had
                # EARLY_EXIT_GRACE to follow, and stops them. Leaving now, this guardian let
                # MPICH's launcher kill the job's processes at once: no line, rank 0's files
                # left to the next run, exit 9.
                link.ended = True
                link.wait_for_coordinator_exit(JOB_EXIT_WAIT)
        self._settle()
        if crashed and self._leave_as_the_rank_did(status, code):
            processes.die_of(os.WTERMSIG(status) if os.WIFSIGNALED(status)
                             else os.WEXITSTATUS(status) - 128)
        os._exit(code)

    def _remove_leftover(self) -> None:
        """The job ended well: once every rank has ended (its guardian said goodbye or left), no
        store object of torch's holds the file of its file:// rendezvous, which torch removes only
        when the last one is destroyed; under torchrun one outlived its run now and then, and
        the next run refused the file as stale."""
        self.coordinator.wait_for_peers(LEFTOVER_WAIT)
        if all(p.settled or p.done for p in list(self.coordinator.peers.values()) if p.rank != 0):
            with contextlib.suppress(OSError):
                os.unlink(self.leftover)

    def _leave_as_the_rank_did(self, status: int, code: int) -> bool:
        """Whether this guardian ends by its rank's signal rather than an exit code: a rank killed
        in its start-up under a user's launcher, or ended there by a signal sent to it alone,
        which waits for the others there (MPICH's mpiexec ignores an exit code until every
        process has ended, 30 s later and with a second line) but ends the job at once when one
        of its processes is killed."""
        return self.link is None and code != EXIT_BAD_ENVIRONMENT \
            and (os.WIFSIGNALED(status) or self._signalled_alone_in_startup(status)) \
            and not os.environ.get(environment.STATE) and not self._launcher_gone()

    def _signalled_alone_in_startup(self, status: int) -> bool:
        """Whether the rank left in its start-up on a signal sent to it alone (its code 130, 143
        or 129, and none to this guardian): nothing told the others, which wait for it there. A
        signal to the whole job (Ctrl-C) reaches this guardian too, which then passes it on."""
        return self.link is None and self.size > 1 and self.stop_code is None \
            and os.WIFEXITED(status) and os.WEXITSTATUS(status) in SIGNAL_EXIT_CODES

    def _aftermath(self, passed_on: bool = False) -> str:
        """What the line about the rank's end says of the others and the files. Under a user's
        launcher, a rank that ended before the ranks joined the job cannot reach the others
        (they wait for it in MPI's start-up), and no result file was written yet. ``passed_on``:
        this guardian will end by its rank's signal (``_leave_as_the_rank_did``)."""
        if self.link is None and self.size > 1 and not os.environ.get(environment.LAUNCHED):
            limit = f" ({self.startup_limit:g} s)" if self.startup_limit else ""
            srun = (" (srun does with --kill-on-bad-exit)"
                    if environment.SLURM_STEP_ID in os.environ else "")
            if passed_on:
                return ("the other ranks cannot be told: its guardian ends by the same signal, for "
                        f"the launcher to end them{srun}, or they wait until their start-up "
                        f"limit{limit}")
            return ("the other ranks cannot be told, and wait for it until their start-up "
                    f"limit{limit} unless the launcher ends them{srun}")
        if not self.files and self.rank != 0 and not os.environ.get(environment.STATE):
            # rank 0's files: this guardian cannot know what they keep
            return "the job is stopped"
        return f"the job is stopped; {notes.files_clause(self.files, self.kept)}"

    def _serve_rank(self) -> None:
        """Requests from the rank: join the job (connect to the coordinator), report a timeout."""
        reader = MessageReader(self.channel)
        while True:
            messages = reader.feed()
            if messages is None:
                return
            for message in messages:
                if message.get("t") == "files":
                    self.journal = message.get("journal")
                    self.files = [str(p) for p in message.get("paths", [])]
                    self.kept = str(message.get("kept") or self.kept)
                    if self.coordinator is not None:
                        self.coordinator.files = [str(p) for p in message.get("paths", [])]
                        self.coordinator.kept = str(message.get("kept") or self.coordinator.kept)
                elif message.get("t") == "remove-after-job":
                    self.leftover = str(message.get("path", ""))
                elif message.get("t") == "startup":
                    self.startup_limit = float(message.get("limit", 0))
                    self._thread(self._watch_startup, self.startup_limit,
                                 float(message.get("stopped", 0)))
                elif message.get("t") == "join":
                    send_message(self.channel, self._join(message))
                elif message.get("t") == "exit":
                    self.chosen_exit = int(message.get("code", -1))
                    send_message(self.channel, {"t": "noted"})
                elif message.get("t") in ("timeout", "abort-job"):
                    # it may leave through MPI_Abort with it
                    if message.get("t") == "abort-job":
                        self.chosen_exit = int(message.get("code", -1))
                    stopping = self.stop_code is not None        # the job is ending already
                    taken = stopping or (self.link is not None and not self.link.ended
                                         and self.link.send(message))
                    send_message(self.channel, {"t": "taken" if taken else "refused"})

    def _thread(self, target, *args, name: Optional[str] = None) -> threading.Thread:
        """Start a watching thread. Where a limit (``ulimit -v``, ``ulimit -u``) leaves no room
        for one, the guardian cannot watch its rank: it ends the rank and says why, once for the
        job, rather than die and leave the other ranks waiting for this one in MPI's start-up."""
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        try:
            thread.start()
        except RuntimeError:
            self._signal(signal.SIGKILL)
            limits = processes.low_limits() or " (ulimit -v, ulimit -u)"
            notes.say_first(f"collbench: rank {self.rank} (on {socket.gethostname()}) cannot start "
                            f"a thread to watch it: a limit on memory or processes{limits} is too "
                            f"low; the job is stopped; {notes.files_clause(self.files, self.kept)}")
            notes.leave(f"{notes.EARLY_END_PREFIX}{self.rank}", "2")
            os._exit(2)
        return thread

    def _watch_startup(self, limit: float, stopped_for: float = 0.0) -> None:
        """The rank's own watchdog cannot fire while MPI_Init holds the interpreter (waiting for
        a rank that died during start-up, say): if the rank has not joined the job by ``limit``
        (the join limit, shorter than the watchdog's start-up limit, so the guardian speaks
        first), its guardian stops it and says why. A rank of this host seen stopped (SIGSTOP, a
        debugger) throughout ``stopped_for`` seconds ends the wait sooner: the join limit allows
        for ranks that load slowly on a busy host, and a stopped rank does not load at all."""
        began = time.monotonic()
        deadline, stopped = began + limit, processes.StoppedRanks()
        while self.link is None and self.stop_code is None and time.monotonic() < deadline:
            time.sleep(0.5)
            # what MPI's start-up has mapped so far: a rank that ends before it joins leaves it
            self.shared |= processes.mapped_shared_memory(self.child)
            if stopped_for > 0 and stopped.longest(os.getppid()) >= stopped_for:
                break
        if self.link is not None or self.stop_code is not None:
            return
        waited = f"{time.monotonic() - began:.0f} s"
        where = f"rank {self.rank} (pid {self.child} on {socket.gethostname()})"
        # the one the others wait for: it says so first
        if processes.state(self.child) in ("T", "t"):
            notes.say_first(f"collbench: {where} was stopped (SIGSTOP or a debugger) in "
                            f"{self.position.read() or 'start-up'} and had not joined the job "
                            f"after {waited}; the job is stopped; "
                            f"{notes.files_clause(self.files, self.kept)}")
        else:
            # a stopped rank's guardian names it, where there is one
            time.sleep(STOPPED_FIRST_S)
            if self.link is not None or self.stop_code is not None:
                return
            # this host's part of the job
            stopped = processes.stopped_ranks(processes.tree(os.getppid()))
            if stopped:
                pid, rank = stopped[0]
                notes.say_first(f"collbench: rank {rank} (pid {pid} on {socket.gethostname()}) was "
                                f"stopped (SIGSTOP or a debugger) in start-up: {where} waited "
                                f"{waited} for it to join the job; the job is stopped; "
                                f"{notes.files_clause(self.files, self.kept)}")
            else:
                notes.say_first(f"collbench: {where} was still in "
                                f"{self.position.read() or 'start-up'} after {waited}: another "
                                "rank may have failed while starting, or never started; stopping "
                                "it")
        # a stopped rank cannot end: the launch ends with it
        notes.leave(notes.JOB_CODE, str(EXIT_TIMEOUT))
        self.stop(EXIT_TIMEOUT)

    def _ended_before_joining(self, status: int) -> None:
        """The rank ended before the job's channel existed, so no coordinator can stop the
        others, which may wait for it inside MPI's start-up. Under self-launch, tell the
        launching process (a file in the run's state folder it watches); a user's launcher
        ends the job itself."""
        notes.leave(f"{notes.EARLY_END_PREFIX}{self.rank}", str(self._ending(status)[1]))

    def _join(self, request: dict) -> dict:
        hello = hello_message(request["token"], self.rank, self.size, self.child)
        try:
            sock, address, local, lines = connect(request["candidates"], int(request["port"]),
                                                  hello)
        except OSError as exc:
            return {"t": "join-failed", "error": str(exc)}
        self.link = Link(sock, lines, self.rank, self.child, self.position.read, self.stop)
        self.link.ending = lambda: self.stop_code is not None
        self.shared = processes.mapped_shared_memory(self.child)
        return {"t": "joined", "address": address, "local": local}

    def _watch_parent(self, pid: int) -> None:
        """A self-launched rank ends when collbench's own process is gone, however it went."""
        try:
            self._parent_fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            self._parent_fd = None
        if self._parent_fd is not None:
            select.select([self._parent_fd], [], [])
        else:
            while processes.alive(pid):
                time.sleep(0.5)
        self.stop(128 + signal.SIGHUP)

    def _watch_launcher(self) -> None:
        """The launcher's process that started this guardian ending under a running rank (mpiexec's
        proxy killed, say): the rank's output and its MPI start-up and finish went through it,
        and it will not be back, so the job is ended in a line that names it."""
        pid, _name = self.launcher
        try:
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            return
        try:
            select.select([fd], [], [])
        finally:
            os.close(fd)
        if self.stop_code is not None or not self._launcher_gone() or not self._first_to_speak():
            return
        where = self.position.read() or "start-up"
        how = f"lost {self._launcher_gone()} which ended under it (killed, or it failed)"
        link = self.link if self.link is not None and not self.link.ended else None
        if link is None or not link.tell_and_wait({"t": "died", "how": how, "where": where,
                                                   "code": EXIT_LOST}):
            notes.say_first(f"collbench: rank {self.rank} (pid {self.child} on "
                            f"{socket.gethostname()}) {how} during {where}; {self._aftermath()}")
        self.stop(EXIT_LOST)

    def _parent_gone(self) -> bool:
        """Whether the self-launching process has ended (a zombie counts as ended): then its
        stand-in rebuilds the files once this launch's processes are gone (``janitor``)."""
        parent = os.environ.get(environment.PARENT_PID, "")
        if not parent.isdigit():
            return False
        if self._parent_fd is not None:
            return bool(select.select([self._parent_fd], [], [], 0)[0])
        return not processes.alive(int(parent))
