"""Launching ranks ourselves when no launcher did.

collbench re-runs its own command line N times: through ``mpiexec`` (the one beside the
Python interpreter first, then PATH) when an MPI backend is involved, or as N local processes
with a TCP rendezvous on 127.0.0.1 for runs that use torch backends only.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from collbench import environment
from collbench.errors import UsageError, interrupted_by, printable
from collbench.launch import notes, processes
from collbench.launch.journal import Journal, rebuild, release_claims
from collbench.launch.liveness.wire import (EARLY_EXIT_GRACE, EXIT_BAD_ENVIRONMENT, EXIT_LOST,
                                            JOB_EXIT_CODES, STOP_GRACE)
from collbench.launch.network import rendezvous
from collbench.launch.network.addresses import free_port
from collbench.launch.origin.terminal import END_PROGRESS_LINE, mark_terminals
from collbench.launch.self_launch.janitor import Janitor
from collbench.launch.self_launch.mpiexec import (find_mpiexec, mpiexec_command,
                                                  remove_orphaned_mpich_files, MPICH_LEFTOVERS)
from collbench.launch.self_launch.relay import Relay


#: Seconds the ranks get to end after SIGTERM before SIGKILL.
KILL_GRACE = 8.0
#: Seconds the job's coordinator gets to end a job whose rank failed before we stop it.
COORDINATOR_GRACE = 2.0


def _lingering(procs: list) -> str:
    """What keeps a launch whose ranks have finished from ending, for a line."""
    stopped = [(pid, _name(pid)) for p in procs if p.poll() is None for pid in processes.tree(p.pid)
               if processes.state(pid) in ("T", "t")]
    if stopped:
        return "stopped (SIGSTOP or a debugger): " + ", ".join(f"{name} (pid {pid})"
                                                               for pid, name in stopped)
    return "still running: " + ", ".join(f"{_name(p.pid)} (pid {p.pid})" for p in procs
                                         if p.poll() is None)


def _name(pid: int) -> str:
    return processes.name(pid) or "a process"


#: Seconds a launch may take to end after its rank 0 recorded the round as complete.
LINGER_S = 15.0
#: Seconds a launch may take to end after the job's coordinator ended the job: its ranks' own
#: grace (STOP_GRACE) and the launcher's (KILL_GRACE). A rank stopped with its guardian (SIGSTOP
#: to both) cannot end, and mpiexec waited for it for ever after the line that ended the job.
ABORT_LINGER_S = STOP_GRACE + KILL_GRACE


#: How long a launch waited for on another thread gives the main thread to note a signal that
#: ended its mpiexec (``_Waiter.late_signal``).
LATE_SIGNAL_S = 0.5


def _wait_forwarding(procs: list, relay: Optional[Relay], saved: Callable[[], str], state: str,
                     completed: Callable[[], bool] = lambda: False, noted: list = (),
                     share: bool = False, ab: bool = False) -> int:
    """Wait for all children, passing SIGINT, SIGTERM and SIGHUP on; the first failure stops
    the rest (also a rank that ended during start-up, which MPI would not notice), and whatever
    has not ended ``KILL_GRACE`` seconds after it was told to (a stopped rank, a stuck
    launcher) is killed. A launch that does not end ``LINGER_S`` seconds after it ``completed``
    its round (a stopped mpiexec or guardian) is ended, in one line: its files are whole.
    Returns the launch's exit code, with one line where nobody else could say what ended it
    (``_ending``). ``ab``: the launch is a side of ``collbench ab``, which says the line of a
    signal it passed on, once for both sides."""
    # Signals reach the main thread only: a launch waited for on another one (the other side of
    # an ab pair, launched at the same time) learns of them from ``noted``, which they join.
    on_main = threading.current_thread() is threading.main_thread()
    waiter = _Waiter(procs, relay, state, completed, noted, share and on_main, on_main, ab)
    old = {s: signal.signal(s, waiter.forward)
           for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)} \
        if on_main else {}
    try:
        # a signal that came as the launch started, before this took over: the ranks
        if noted:
            waiter.passed_on(noted[0], signal.SIGTERM)     # may be starting Python, to which SIGINT
        # means a traceback each; SIGTERM ends them quietly
        while waiter.pending:
            waiter.look(on_main)
            waiter.reap()
        if relay is not None:
            relay.join()
        if waiter.ended and not waiter.received:
            return 0
        return _ending(waiter, saved)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


class _Waiter:
    """One launch's processes as ``_wait_forwarding`` watches them: the signals it passed on, the
    failures it saw, what it stopped and when."""

    def __init__(self, procs: list, relay: Optional[Relay], state: str,
                 completed: Callable[[], bool],
                 noted: list, share: bool, on_main: bool = True, ab: bool = False) -> None:
        self.procs, self.relay, self.state, self.completed = procs, relay, state, completed
        self.noted, self.share, self.seen, self.on_main = noted, share, len(noted), on_main
        self.pending = list(procs)
        self.received: list = []          # signals passed on, the first deciding the exit code
        self.kill_at: Optional[float] = None
        # mpiexec's children (its proxies): pid -> name, as they came
        self.proxies: dict = {}
        self.finished_at: Optional[float] = None
        self.ended = False                # the launch was ended after it completed (LINGER_S)
        self.looked_at = 0.0
        self.code = 0                     # the first failure's exit code
        self.killed: list = []            # (rank, pid, signal) of local ranks killed outright
        self.stop_at: Optional[float] = None
        # a rank's exit code in its start-up (notes.ended_in_startup)
        self.early: Optional[int] = None
        self.early_stop_at: Optional[float] = None
        self.aborted_at: Optional[float] = None   # when the coordinator's end of the job was seen
        # its code, where the launch was killed for not ending
        self.abandoned: Optional[int] = None
        self.ab = ab                      # a side of collbench ab, which says a signal's line

    def stop_all(self, signum: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except OSError:
                    pass
        if self.kill_at is None:
            self.kill_at = time.monotonic() + KILL_GRACE

    def passed_on(self, received: int, signum: int) -> None:
        self.received.append(received)
        if self.ab:
            notes.passed_on(self.state)
        if self.relay is not None:        # what the ranks print as they die of it is no news
            self.relay.quiet = True
        self.stop_all(signum)

    def forward(self, signum, _frame) -> None:
        self.passed_on(signum, signum)
        # a launch waited for on another thread sees it there, and ab says it
        if self.share or self.ab:
            self.noted.append(signum)

    def _kill_trees(self) -> None:
        for p in self.pending:
            for pid in reversed(processes.tree(p.pid)):      # a stopped descendant dies too
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def look(self, on_main: bool) -> None:
        """Once per turn of the wait: signals from the main thread, mpiexec's proxies, a start-up
        that failed, what is overdue."""
        now = time.monotonic()
        if not on_main and len(self.noted) > self.seen:
            self.seen = len(self.noted)
            if not self.received:
                self.passed_on(self.noted[-1], self.noted[-1])
        relay, procs = self.relay, self.procs
        if relay is not None and procs[0].poll() is None:
            for pid in processes.children(procs[0].pid):
                name = processes.name(pid)
                # not a fork of it yet to exec
                if name and name != processes.name(procs[0].pid):
                    self.proxies[pid] = name
        if self.early is None:
            self.early = notes.ended_in_startup(self.state) or None
            if self.early is not None:       # the others may wait for it inside MPI_Init for ever:
                # let them say their own piece, then stop them
                self.early_stop_at = now + COORDINATOR_GRACE
        if self.early_stop_at is not None and now > self.early_stop_at:
            self.early_stop_at = None
            self.stop_all(signal.SIGTERM)
        if self.kill_at is not None and now > self.kill_at:
            self._kill_trees()
        if self.finished_at is None and now - self.looked_at > 1.0:
            self.looked_at = now
            if self.completed():
                self.finished_at = now
            self._abort_overdue(now)
        if (self.finished_at is not None and self.kill_at is None
                and now - self.finished_at > LINGER_S):
            print(f"collbench: the ranks finished, but the launch did not end {LINGER_S:g} s later "
                  f"({_lingering(self.pending)}); it is ended, and the result files are whole",
                  file=sys.stderr, flush=True)
            self._kill_trees()            # nothing is left to save: woken, a stopped process would
            self.ended = True             # only report its peers gone
        if self.stop_at is not None and now > self.stop_at:
            self.stop_at = None            # the coordinator did not end the job: we do
            for rank, pid, sig in self.killed[:1]:
                print(f"collbench: rank {rank} (pid {pid}) was killed by signal {sig}; stopping "
                      "the other ranks", file=sys.stderr, flush=True)
            self.stop_all(signal.SIGTERM)

    def _abort_overdue(self, now: float) -> None:
        """The job's coordinator ended the job (its line is said), and the launch has not ended
        ABORT_LINGER_S later: what keeps it is stopped or stuck, and is killed; the launch ends
        with the coordinator's code."""
        if self.aborted_at is None:
            if notes.job_code(self.state) is not None:
                self.aborted_at = now
        elif self.abandoned is None and now - self.aborted_at > ABORT_LINGER_S:
            self.abandoned = notes.job_code(self.state)
            self._kill_trees()

    def late_signal(self) -> None:
        """A launch waited for on another thread (the other side of an ab pair) whose mpiexec
        failed, or passed on a rank's death by a signal, as a signal to the terminal's process
        group reached its proxies and ranks: the main thread notes that signal a moment later,
        and the launch ended of it, not of a lost proxy or rank (MPICH may crash as it is
        interrupted: a rank's SIGSEGV, exit 139, while both sides of a job took Ctrl-C; a rank
        interrupted in its start-up ended the launch with 2, as a refusal to start)."""
        if self.received or self.on_main:
            return
        deadline = time.monotonic() + LATE_SIGNAL_S
        while len(self.noted) <= self.seen and time.monotonic() < deadline:
            time.sleep(0.02)
        if len(self.noted) > self.seen:
            self.received.append(self.noted[-1])

    def reap(self) -> None:
        """The processes that ended within a tenth of a second each."""
        for p in list(self.pending):
            try:
                rc = p.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
            self.pending.remove(p)
            if rc < 0 and len(self.procs) > 1:   # a local rank killed outright, guardian and all
                self.killed.append((self.procs.index(p), p.pid, -rc))
            if rc != 0 and self.code == 0:
                self.code = rc
                # Do not leave the others hanging; but the job's coordinator usually ends it first,
                # and better: it names the rank's position and host. A rank that a signal of its
                # own ended is named once the others had EARLY_EXIT_GRACE to follow it (a signal
                # to the whole job ends them all).
                signalled = rc - 128 in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)
                self.stop_at = (time.monotonic() + COORDINATOR_GRACE
                                + (EARLY_EXIT_GRACE if signalled else 0))


def _ending(w: _Waiter, saved: Callable[[], str]) -> int:
    """The exit code of a launch that ended, with one line where nobody else said what ended it:
    a proxy of mpiexec lost, a rank's start-up, a signal passed on, mpiexec killed or failing."""
    if w.abandoned is not None and not w.received:
        # the coordinator's line said why; the launch would not end
        return w.abandoned
    if w.code != 0:          # a rank refused to start, or died, as a Ctrl-C reached it too
        w.late_signal()
    relay, state, code, received = w.relay, w.state, w.code, w.received
    early = w.early or notes.ended_in_startup(state)       # noted as the launch ended
    said = notes.explanation(state)
    # mpiexec's own failure (255) with one of its proxies gone: the proxy was killed (or
    # failed), mpiexec ended at once, and the ranks it started outlive it for a while. Not
    # after a signal to this process: Ctrl-C reaches the proxies too (one process group).
    proxy_gone = next(((pid, name) for pid, name in w.proxies.items() if not processes.alive(pid)),
                      None) \
        if relay is not None and not received and code not in JOB_EXIT_CODES and code >= 64 \
        and not relay.spoke else None
    startup = _startup_clause(state)
    if proxy_gone is not None:
        pid, name = proxy_gone
        print(f"collbench: mpiexec's {name} (pid {pid}), which started ranks of the job, ended "
              "under it (killed, or it failed), and mpiexec with code "
              f"{code}{startup}{processes.low_limits()}; the job is stopped; {saved()}",
              file=sys.stderr, flush=True)
        # a limit too low for mpiexec's own processes (ulimit -f 1) is the environment's fault
        return EXIT_BAD_ENVIRONMENT if processes.low_limits() else EXIT_LOST
    # A line noted but never seen: its writer was killed before mpiexec passed it on.
    lost_line = relay is not None and bool(said) and not relay.saw(said)
    if early and not received:    # (ranks that ended starting because we passed a signal on: below)
        if lost_line:                # its writer's pipe was gone
            print(said, file=sys.stderr, flush=True)
        elif not said and not (relay is not None and relay.spoke):   # its writer was killed first
            first = notes.first_ended_in_startup(state)
            who = f"rank {first[0]}" if first and first[0] >= 0 else "a rank"
            print(f"collbench: {who} ended during its start-up with code {early}{startup}"
                  f"{processes.low_limits()}; the job is stopped; {saved()}",
                  file=sys.stderr, flush=True)
        # MPI refused to start and said why (its words are in the line): the environment is
        # at fault, as with a bad option, and nothing ran (exit 2), not a lost rank
        return EXIT_BAD_ENVIRONMENT if notes.startup_said(state) else early
    if received:
        # Rank 0 got the signal from us and said so (noting it first), unless it was still
        # starting (no handler yet) or mpiexec did not pass the signal on: then we say it.
        if not w.ab and (lost_line or not ((relay is not None and relay.spoke)
                                           or said is not None)):
            if sys.stderr.isatty():
                sys.stderr.write(END_PROGRESS_LINE)
            print(said if lost_line else "collbench: interrupted by "
                                         f"{signal.Signals(received[0]).name}; {saved()}",
                  file=sys.stderr, flush=True)
        return 128 + received[0]
    if relay is None:
        return 128 - code if code < 0 else code
    return _launcher_ending(w, said, startup, saved)


def _launcher_ending(w: _Waiter, said: Optional[str], startup: str,
                     saved: Callable[[], str]) -> int:
    """``_ending`` under mpiexec, where mpiexec's own code says what happened: killed, failed
    itself, or passing on a rank's death by a signal."""
    relay, code = w.relay, w.code
    if code < 0:
        if not relay.spoke:     # mpiexec itself killed: nobody else can say it
            print(f"collbench: mpiexec (pid {w.procs[0].pid}) was killed by signal {-code} "
                  f"({_signal_name(-code)}); the job is stopped; {saved()}", file=sys.stderr,
                  flush=True)
        return 128 - code
    if code not in JOB_EXIT_CODES and code >= 64 and not relay.spoke:
        # mpiexec's own failure (255: it could not start the ranks, or one of its proxies died
        # unseen)
        if said and not relay.saw(said):       # its writer was killed before it could print it
            print(said, file=sys.stderr, flush=True)
            return code
        why = f": it said {printable(relay.launcher_said)!r}" if relay.launcher_said else \
            " (its proxy was killed, or it could not start the ranks)"
        print(f"collbench: mpiexec ended with code {code} before any rank could say "
              f"why{why}{startup}{processes.low_limits()}; {saved()}", file=sys.stderr, flush=True)
        return code
    if code not in JOB_EXIT_CODES and 0 < code < 64:
        # mpiexec passes on a rank's death by signal N as exit code N
        if said is None:
            print(f"collbench: {_lost_rank(w.state, code)}; the job is stopped; {saved()}",
                  file=sys.stderr, flush=True)
        elif said and not relay.saw(said):     # its writer was killed before it could print it
            print(said, file=sys.stderr, flush=True)
        return 128 + code
    if code not in JOB_EXIT_CODES and code >= 64 and said is not None:
        # a code of mpiexec's own after the line that ended the job (253 once a rank stopped in
        # start-up was named and killed): the job's
        return notes.job_code(w.state) or EXIT_LOST
    return code


def _startup_clause(state: Optional[str]) -> str:
    """" (MPI's start-up said '…'; UCX_TLS=bogus is set)" after a launch that failed in a rank's
    start-up (``notes.startup_clause``)."""
    return notes.startup_clause(notes.startup_said(state))


def _lost_rank(state: Optional[str], code: int) -> str:
    """What ended a launch that mpiexec ended for a process killed by signal ``code``, when no
    one could say it (mpiexec kills every process at once, rank 0's guardian and its
    coordinator included): the ranks whose guardian died under them, if they noted it."""
    how = f"signal {code} ({_signal_name(code)})"
    lost = notes.orphans(state, STOP_GRACE)
    if not lost:
        return f"a rank was killed by {how} before collbench could say where"
    named = "; ".join(f"rank {rank} (pid {pid} on {host})" for rank, pid, host in lost)
    return (f"{named} was lost: its guardian was killed by {how}, and mpiexec ended the job before "
            "the others could say where it was")


def _result_paths(state: str) -> list:
    """The result files rank 0 claimed, from the run's journal; [] if it did not get that far."""
    try:
        entries = Journal.open(Path(state)).of_type("outputs")
        return list(entries[0]["paths"]) if entries else []
    except Exception:          # a journal cut short: the line goes without the names
        return []


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def _die_with_parent(signum: int, core: Optional[int] = None):
    """For Popen: the child gets ``signum`` when this process dies, however it dies; bound to
    ``core`` where one is given (``--bind core`` for local ranks)."""
    def prepare() -> None:
        processes.die_with_parent(signum)
        if core is not None:
            os.sched_setaffinity(0, {core})
    return prepare


def _start(base: list, n: int, env: dict, *, use_mpi: bool, verbose: bool,
           bind: str = "none", stdout=None) -> tuple:
    """Start one launch of n ranks; returns the processes to wait for, and the relay of
    mpiexec's output (None for local processes, which write straight to ours). ``stdout``: where
    the relay copies mpiexec's stdout (ours by default)."""
    if use_mpi:
        mpiexec = find_mpiexec(base[0])
        if mpiexec is None:
            raise UsageError('no mpiexec found beside Python or on PATH; install one with: pip '
                             'install "collbench[mpich]", or start collbench under your own '
                             'launcher')
        env[environment.LAUNCHED] = "mpi"
        cmd = mpiexec_command(mpiexec, n, base, env, coordinated=True, bind=bind)
        if verbose:
            print("collbench: launching: " + " ".join(cmd), file=sys.stderr, flush=True)
        process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL,
                                   preexec_fn=_die_with_parent(signal.SIGTERM))
        columns = env.get(environment.COLUMNS, "")
        wraps = env.get(environment.STDERR_TTY) == "1" and columns.isdigit()
        return [process], Relay(process, int(columns) if wraps else None, stdout or sys.stdout)
    env.update({environment.LAUNCHED: "local", environment.WORLD_SIZE: str(n),
                environment.LOCAL_WORLD_SIZE: str(n)})
    if verbose:
        print(f"collbench: launching {n} local processes: " + " ".join(base)
              + f" (rendezvous {env[environment.MASTER_ADDR]}:{env[environment.MASTER_PORT]})",
              file=sys.stderr, flush=True)
    cores = sorted(os.sched_getaffinity(0)) if bind == "core" else []
    return [subprocess.Popen(base,
                             env={**env, environment.RANK: str(r), environment.LOCAL_RANK: str(r)},
                             preexec_fn=_die_with_parent(signal.SIGTERM,
                                                         cores[r % len(cores)] if cores else None))
            for r in range(n)], None


@dataclass
class RoundLauncher:
    """One command launched as n ranks, once per round: the ranks learn their round and the seed
    from the environment, and rank 0 of each launch finds the earlier rounds in a journal in a
    temporary folder (``state``), which goes with ``close`` (or, if this process is killed,
    with its stand-in: ``janitor``). ``python``: the interpreter whose
    collbench the ranks run (and beside which mpiexec is looked for first)."""

    n: int
    argv: list
    use_mpi: bool
    rounds: int
    seed: int
    python: str = sys.executable
    extra_env: dict = field(default_factory=dict)
    bind: str = "none"                 # --bind: how each launch binds its ranks
    side: str = ""                     # under ab: the label of the side it measures
    #: under ab, sides launched at once: a signal this launch's wait receives on the main
    #: thread is noted in ``stopped_by``, which the other side's wait (on another thread) watches
    shares_signals: bool = False
    #: claims the run's result files (``live.files.claim``), once the stand-in watches the
    #: state folder, noting each in the journal before it is made: a run killed at once then
    #: leaves no empty file behind
    claim: Callable[[Callable], list] = lambda noted: []
    state: str = field(init=False, default="")            # the journal's folder, made at start
    check_failed: bool = field(init=False, default=False)  # a round's result check failed

    def __post_init__(self) -> None:
        self.base = [self.python, "-m", "collbench"] + list(self.argv)
        self.rendezvous_file = _rendezvous_file(self.argv)
        env = dict(os.environ)
        env.update(self.extra_env)
        # the ranks end when this process does, however it ends
        env[environment.PARENT_PID] = str(os.getpid())
        mark_terminals(env)             # the ranks write through the launcher's pipes
        problem = processes.open_files_problem(self.n)     # mpiexec needs them too: it failed first
        if problem:
            raise UsageError(problem)
        if self.use_mpi and find_mpiexec(self.python) is None:
            raise UsageError('no mpiexec found beside Python or on PATH; install one with: pip '
                             'install "collbench[mpich]", or start collbench under your own '
                             'launcher')
        if not self.use_mpi:
            rendezvous.check_local_master(env)
        self.user_port = env.get(environment.MASTER_PORT)
        self.janitor = Janitor()           # first: it finishes the folder if this process is killed
        try:
            self.state = self.janitor.folder()
        except BaseException:
            self.janitor.close()
            raise
        journal = Journal(Path(self.state))
        try:
            claimed = self.claim(lambda path: journal.append({"type": "claiming",
                                                              "path": str(path),
                                                              "pid": os.getpid()}))
        except BaseException:
            journal.close()
            self.close()
            raise
        if claimed:                # rank 0 of the first launch takes them up (launch.journal)
            journal.append({"type": "claimed", "paths": [str(p) for p in claimed]})
        journal.close()
        env.update({environment.ROUNDS: str(self.rounds), environment.SEED: str(self.seed),
                    environment.STATE: self.state})
        self.env = env
        # Between launches a signal is only noted, and the next launch is not started: during
        # one, _wait_forwarding passes it on to the ranks.
        self.stopped_by: list = []
        self._handlers = {s: signal.signal(s, lambda signum, _frame: self.stopped_by.append(signum))
                          for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        self.stopped_by.extend(interrupted_by())     # one that something swallowed before

    def extend(self, total: int, ab_description: Optional[str] = None) -> None:
        """Plan ``total`` rounds where fewer were planned (an A/B job's added pairs): the launches
        from now on say so, and each keeps the budget of the rounds first planned."""
        self.env.setdefault(environment.BUDGET_ROUNDS, str(self.rounds))
        self.rounds = total
        self.env[environment.ROUNDS] = str(total)
        if ab_description is not None:
            self.env[environment.AB] = ab_description

    def stopped(self, completed: int) -> Optional[int]:
        """After ``completed`` rounds: the exit code of a signal that came between launches, said
        in one line with what the files keep; None when none came."""
        if not self.stopped_by:
            return None
        if self.side:                   # collbench ab says it, once for both sides
            return 128 + self.stopped_by[0]
        kept = ("nothing measured" if completed == 0 else "round 1"
                if completed == 1 else f"rounds 1-{completed}")
        paths = _result_paths(self.state)
        kept_files = (notes.files_clause(paths, kept, self.side) if paths and completed
                      else self._nothing())
        print(f"collbench: interrupted by {signal.Signals(self.stopped_by[0]).name}; {kept_files}",
              file=sys.stderr, flush=True)
        return 128 + self.stopped_by[0]

    def launch(self, number: int, *, verbose: bool = False,
               env: Optional[dict] = None) -> Optional[int]:
        """Round ``number``; None when it completed (a wrong result included: reported, and the
        rounds go on), else the exit code that ends the run."""
        stopped = self.stopped(number - 1)
        if stopped is not None:
            return stopped
        env = {**self.env, **(env or {}), environment.ROUND: str(number)}
        notes.clear(self.state)
        if not self.use_mpi:
            env[environment.MASTER_ADDR] = env.get(environment.MASTER_ADDR, "127.0.0.1")
            env[environment.MASTER_PORT] = self.user_port or str(free_port())
        began = time.time()
        # a side of ab prints nothing on stdout (-q, -o), which is ab's: what its mpiexec says
        # there (HYDRA_DEBUG) goes to stderr
        procs, relay = _start(self.base, self.n, env, use_mpi=self.use_mpi, verbose=verbose,
                              bind=self.bind, stdout=sys.stderr if self.side else None)
        notes.launched(self.state, [p.pid for p in procs])    # for the stand-in, should we die
        code = _wait_forwarding(procs, relay,
                                lambda: notes.files_clause(*notes.launch_files(self.state, number),
                                                           self.side),
                                self.state, lambda: self._completed(number), self.stopped_by,
                                self.shares_signals, ab=bool(self.side))
        for proc in procs:                    # the relay has read them to their end
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        _remove_made_since(self.rendezvous_file, began)
        if self.use_mpi:             # its shared memory only after a launch that did not end well
            remove_orphaned_mpich_files(began, MPICH_LEFTOVERS if code else MPICH_LEFTOVERS[:1])
        completed = self._completed(number)
        if code not in (0, 1, 2):     # the files hold all the journal does, rank 0 killed or not
            rebuild(self.state, python=self.python)
        if code == 1 and completed:
            self.check_failed = True
            return None
        if code != 0:
            paths = _result_paths(self.state)
            # an interruption is said as it happens, by rank 0 or here (_wait_forwarding)
            interrupted = code - 128 in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            explained = ((relay is not None and relay.spoke)
                         or notes.explanation(self.state) is not None)
            if number > 1 and paths and not (explained or interrupted):
                # nobody said how it ended (the ranks say it with what the files keep)
                print(f"collbench: stopped in round {number} of {self.rounds}; "
                      f"{notes.files_clause(*notes.launch_files(self.state, number))}",
                      file=sys.stderr, flush=True)
            return code
        return None

    def _nothing(self) -> str:
        return f"nothing of {self.side} was saved" if self.side else "nothing was saved"

    def _completed(self, number: int) -> bool:
        """Whether rank 0 recorded round ``number`` as complete in the run's journal."""
        return any(e["record"]["round"] == number
                   for e in Journal.open(Path(self.state)).of_type("round"))

    def close(self) -> None:
        for signum, handler in getattr(self, "_handlers", {}).items():
            signal.signal(signum, handler)
        release_claims(Journal.open(Path(self.state)))
        shutil.rmtree(self.state, ignore_errors=True)
        self.janitor.close()


def _rendezvous_file(argv: list) -> Optional[str]:
    """The file of the ranks' file:// rendezvous (``--init-method``), or None. Before the first
    launch the plan found no file there, so what a launch leaves there is its own: torch removes
    it only when every rank's store object is destroyed, and a rank does not always get to that
    (seen under load: the next launch, a round or ab's other side, refused it as stale)."""
    for i, arg in enumerate(argv):
        url = argv[i + 1] if arg == "--init-method" and i + 1 < len(argv) else \
            arg.partition("=")[2] if arg.startswith("--init-method=") else None
        if url is not None:
            try:
                method = rendezvous.parse_init_method(url)
            except UsageError:
                return None
            return method.path if method.scheme == "file://" else None
    return None


def _remove_made_since(path: Optional[str], began: float) -> None:
    """``path`` removed if a launch that began at ``began`` (time.time()) made it."""
    try:
        if path and os.lstat(path).st_mtime >= began - 1.0:
            os.unlink(path)
    except OSError:
        pass


def level_order(rounds: int, levels: tuple, seed: int) -> list:
    """The MPI thread level of each launch: every round once at each level, the levels of a
    round in an order drawn from the seed (so that neither always goes first)."""
    out = []
    for number in range(rounds):
        turn = list(levels)
        random.Random(f"{seed}-{number}").shuffle(turn)
        out += turn
    return out


def self_launch(n: int, argv: list, *, use_mpi: bool, verbose: bool, rounds: int = 1, seed: int = 0,
                claim: Callable[[], list] = list, levels: tuple = (), bind: str = "none") -> int:
    """Run ``python -m collbench ARGV`` as n ranks, once per round and MPI thread level, and
    return their exit code.

    Every round is a launch of its own (new processes, communicators and buffers), one for each
    of ``levels`` (``--thread-level``), each launch numbered as a round of its own. A round
    whose result check failed (exit 1 after completing) does not stop the rounds after it; any
    other failure does.
    """
    order = level_order(rounds, levels, seed) if levels else [""] * rounds
    launcher = RoundLauncher(n, list(argv), use_mpi, len(order), seed, claim=claim, bind=bind)
    try:
        for number, level in enumerate(order, 1):
            code = launcher.launch(number, verbose=verbose and number == 1,
                                   env={environment.THREAD_LEVEL: level} if level else None)
            if code is not None:
                return code
        # after the last launch, before this process ends
        stopped = launcher.stopped(len(order))
        return stopped if stopped is not None else 1 if launcher.check_failed else 0
    finally:
        launcher.close()
