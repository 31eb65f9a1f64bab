"""Notes a self-launched job leaves for the process that launched it, in the run's state folder
(``COLLBENCH_STATE``, which only self-launch sets).

They hold what that process needs to know about a launch that ended badly: which rank ended
before the ranks could talk, which guardian speaks for which rank, a rank orphaned by its
guardian's death, the launch's pids, the line that says why the job ended, and what MPI printed
while it started. They are files because their writers may be killed at any moment: MPICH's
mpiexec SIGKILLs every process group once one of its processes dies by a signal (each note:
docs/development.md, "Inside a launch").

Only the standard library is used (guardians and a rank's signal thread import this).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Optional

from collbench import environment
from collbench.errors import printable
from collbench.launch import processes

EARLY_END_PREFIX = "ended-before-joining-"
GUARDIAN_PREFIX = "guardian-"
ORPHANED_PREFIX = "orphaned-"
EXPLAINED = "explained"
#: the exit code the coordinator ended the job with (``job_code``)
JOB_CODE = "job-code"
SAID_FIRST = "said-first"
LAUNCHED = "launched"
#: ``collbench ab`` passed a signal it received on to a side's launch: it says the one line
PASSED_ON = "passed-on"
STARTUP_PREFIX = "startup-"
#: a mark, in the temporary folder, that a guardian of a user's launch spoke for its host
SAID_PREFIX = "collbench-said-"


def leave(name: str, text: str = "") -> None:
    """Write note ``name`` under self-launch (whole, or not at all); nothing otherwise."""
    state = os.environ.get(environment.STATE)
    if not state or not os.path.isdir(state):
        return
    path = os.path.join(state, name)
    try:
        with open(f"{path}.{os.getpid()}", "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(f"{path}.{os.getpid()}", path)
    except OSError:
        pass


#: the lines that this process said end the job (``say``)
_said_here: list = []


#: what must leave the terminal before a line that ends the job (``before_saying``)
_before_saying: list = []


def before_saying(callback) -> None:
    """Have ``callback`` run, once, before this process says the line that ends the job: a
    progress bar stops, which otherwise holds stderr (rich redirects it), so that the line went
    out unwrapped past the terminal's edge and the cursor stayed hidden."""
    _before_saying.append(callback)


def clear_terminal() -> None:
    """Run what ``before_saying`` was given (on whichever thread ends the job)."""
    while _before_saying:
        try:
            _before_saying.pop()()
        except Exception:          # the line must still be said
            pass


def say(line: str) -> None:
    """Print the line that ends the job, noted first (see EXPLAINED)."""
    clear_terminal()
    _said_here.append(line)
    leave(EXPLAINED, line)
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def say_first(line: str) -> None:
    """``say`` the line, unless a process of this self-launched job said one first (SAID_FIRST),
    or, under a user's launcher, a guardian of this host's part of the job (``_first_here``)."""
    state = os.environ.get(environment.STATE)
    if state and os.path.isdir(state):
        try:
            os.close(os.open(os.path.join(state, SAID_FIRST), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        except OSError:
            pass
    elif not _first_here():
        _wait_for_the_first()
        return
    say(line)


_held: list = []
#: how long a process that lost the word waits for the one that has it to speak and leave
FIRST_SPEAKER_WAIT = 5.0


def _first_here() -> bool:
    """Whether no other process started by this process's parent (a launcher's proxy, which
    starts the job's ranks of one host) claimed the word first. Two claims: an abstract Unix
    socket named after the parent, held until this process ends (the one that has it speaks;
    another waits for it to leave, ``_wait_for_the_first``), and a mark in the temporary folder
    that outlives it, for a process that comes to speak after it left (a launcher that does not
    end the job on an exit code: every rank's guardian reached its line in turn). Where neither
    claim can be made, or the process has no guardian, or the parent is gone (an orphan's is init,
    every orphan's), every process may speak."""
    if not _host_parent or _host_parent[0] == 1 or \
            processes.started_at(_host_parent[0], 0.0) is None:    # gone: none can be claimed
        return True
    try:
        claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return True
    try:
        claim.bind("\0" + _said_name())    # a pid is reused: the parent's start is in the name
    except OSError:
        claim.close()
        return False
    try:
        os.close(os.open(_said_mark(), os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))
    except FileExistsError:             # it spoke, and left
        claim.close()
        return False
    except OSError:
        pass
    _held.append(claim)
    return True


def spoken_here() -> bool:
    """Whether a process of this host's part of the job has claimed the word (its mark is there,
    ``_first_here``): a line a signal would add after it is its echo. Never waits."""
    return bool(_host_parent) and _host_parent[0] != 1 and os.path.exists(_said_mark())


#: the process that started this host's part of the job (``speak_for``); none for a process
#: without a guardian (a one-rank run, the launching process), which speaks for itself alone
_host_parent: list = []


def speak_for(parent: int) -> None:
    """Claim the word (``_first_here``) for the processes started by ``parent``: a guardian and
    its rank claim it for the launcher's process that started the guardian, so that a host's
    guardians and ranks say one line between them."""
    _host_parent[:] = [parent]


def _said_name() -> str:
    """"collbench-said-PARENT-START[-RESTART]": torchrun's restarts of the job are new jobs."""
    parent = _host_parent[0]
    restart = os.environ.get(environment.TORCHELASTIC_RESTART_COUNT)
    return (f"{SAID_PREFIX}{parent}-{processes.started_at(parent, 0.0)}"
            f"{f'-{restart}' if restart and restart.isdigit() else ''}")


def _said_mark() -> str:
    import tempfile
    return os.path.join(tempfile.gettempdir(), _said_name())


def _wait_for_the_first(limit: float = FIRST_SPEAKER_WAIT) -> None:
    """Stay until the process that claimed the word has left (its claim is free again), so that
    it leaves first: a launcher that ends the job's processes once one exits with an error
    (MPICH's) would otherwise end it before its line was said, when this one left first."""
    name = "\0" + _said_name()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.bind(name)
            return
        except OSError:
            time.sleep(0.05)
        finally:
            probe.close()


def launched(state: str, pids: list) -> None:
    """The launching process's own note (it has no COLLBENCH_STATE): the processes it started."""
    try:
        Path(state, LAUNCHED).write_text(" ".join(map(str, pids)))
    except OSError:
        pass


def launched_pids(state: str) -> list:
    try:
        return [int(p) for p in Path(state, LAUNCHED).read_text().split()]
    except (OSError, ValueError):
        return []


def guardian(rank: int, child: int) -> None:
    leave(f"{GUARDIAN_PREFIX}{os.getpid()}", f"{rank} {child} {socket.gethostname()}")


def orphaned(rank: int) -> None:
    leave(f"{ORPHANED_PREFIX}{rank}", f"{rank} {os.getpid()} {socket.gethostname()}")


def startup_output(guardian: int) -> str:
    """Where the rank whose guardian is ``guardian`` keeps what its MPI library prints while it
    starts: the run's state folder under self-launch, else the temporary folder."""
    state = os.environ.get(environment.STATE)
    if state and os.path.isdir(state):
        return os.path.join(state, f"{STARTUP_PREFIX}{guardian}")
    import tempfile          # none usable (ulimit -f 0: no file can take what it prints): OSError
    return os.path.join(tempfile.gettempdir(), f"collbench-{STARTUP_PREFIX}{guardian}")


def remove_stale_startup_outputs() -> None:
    """The temporary folder's start-up files whose guardian is gone, and its marks that a guardian
    spoke (``_first_here``) whose launcher's process is gone: under a user's launcher a guardian
    that the launcher killed (a job another rank aborted in MPI's start-up) could not remove its
    own, and a mark must outlive its speaker."""
    import tempfile
    folder = tempfile.gettempdir()      # none usable: OSError, which refuses the run in one line
    prefix = f"collbench-{STARTUP_PREFIX}"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            stale = not processes.alive(int(name[len(prefix):]))
        elif name.startswith(SAID_PREFIX):
            pid, _, rest = name[len(SAID_PREFIX):].partition("-")
            started = processes.started_at(int(pid), 0.0) if pid.isdigit() else None
            stale = started is None or pid == "1" or rest.split("-")[0] != str(started)
        else:
            continue
        path = os.path.join(folder, name)
        try:
            if stale and os.stat(path, follow_symlinks=False).st_uid == os.getuid():
                os.unlink(path)
        except OSError:
            pass


def startup_words(path: str) -> str:
    """The cause a library gave, in what it printed while it started (``startup_output``): UCX's
    error, or the last entry of MPICH's error stack that says something, or its PMI client's
    complaint; "" when it said nothing."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 16)
    except OSError:
        return ""
    # collbench's own lines are not the library's: a rank interrupted while its library started
    # says so into the same file ("collbench: interrupted by SIGTERM; …")
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.startswith("collbench:")]
    for line in lines:
        if " UCX  ERROR " in line:
            return "UCX: " + line.split(" UCX  ERROR ", 1)[1].strip()
    for line in lines:
        if line.startswith("[unset]:"):         # MPICH's PMI client, before its error stack
            return line[len("[unset]:"):].strip()
    stack = [line.split(":", 1)[1].strip() for line in lines
             if re.match(r"^\w+\(\d+\)\.*\s*:", line) and line.split(":", 1)[1].strip()]
    if stack:
        return stack[-1]
    return lines[-1] if lines else ""


def startup_clause(words: str) -> str:
    """" (MPI's start-up said '…'; UCX_TLS=bogus is set)" for a rank that failed in its start-up:
    its library's words, and the variables that tune the library (a bad one fails it)."""
    said = [f"MPI's start-up said {printable(words)!r}"] if words else []
    settings = environment.library_settings(os.environ)
    if settings:
        said.append(f"{', '.join(printable(s) for s in settings[:4])} "
                    f"{'is' if len(settings) == 1 else 'are'} set")
    return f" ({'; '.join(said)})" if said else ""


def startup_said(state: Optional[str]) -> str:
    """The first cause that a rank's MPI library gave in this launch's start-up (the launching
    process's side: the guardians that would have said it may have been killed with their rank)."""
    for note in sorted(Path(state).glob(f"{STARTUP_PREFIX}*")) if state else ():
        words = startup_words(str(note))
        if words:
            return words
    return ""


# What the result files keep, said in a line about an early end.

#: the position of a rank whose sizes are all done, on its way out
SHUTDOWN = "shutdown"
#: after an early end in a run's first launch, once a size finished
EVERY_SIZE = "every size finished before"
#: and before any did
NO_SIZE_YET = "no size yet (none had finished)"


def kept_after_rounds(number: int, measured: bool = True) -> str:
    """What the files hold when a self-launched run ends in its launch ``number`` (``measured``:
    a size of the first launch had finished)."""
    if number <= 1:
        return EVERY_SIZE if measured else NO_SIZE_YET
    return (f"{'round 1' if number == 2 else f'rounds 1-{number - 1}'} and what round {number} "
            "measured")


def launch_files(state: Optional[str], number: int) -> tuple:
    """(paths, what they keep) of a self-launched run, from its journal, when it ends in launch
    ``number``: ([], "") when no launch has taken files up (``--no-save``, or still starting)."""
    from collbench.launch.journal import Journal

    if not state:
        return [], ""
    try:
        journal = Journal.open(state)
        outputs = journal.of_type("outputs")
        measured = bool(outputs) and number <= 1 and bool(journal.of_type("measure"))
    except (OSError, ValueError):
        return [], ""
    return (list(outputs[0]["paths"]), kept_after_rounds(number, measured)) if outputs else ([], "")


def files_clause(paths, kept: str, side: str = "") -> str:
    """The end of a line about an early end: where what was measured is. Without ``paths`` (this
    launch's rank 0 has not taken its files up, or cannot say), a self-launched run's earlier
    launches' files, from its journal. ``side``: the label of the side of ``collbench ab`` this
    run measures (a rank finds it in its environment): the other side's files are not its own."""
    paths = [str(p) for p in paths or ()]
    if not paths:
        number = os.environ.get(environment.ROUND, "")
        paths, kept = launch_files(os.environ.get(environment.STATE),
                                   int(number) if number.isdigit() else 1)
    if not paths:            # --no-save, or stopped before any file was claimed
        side = side or _ab_side()
        return f"nothing of {side} was saved" if side else "nothing was saved"
    return f"{', '.join(paths)} keep{'s' if len(paths) == 1 else ''} {kept}"


def ab_side(env=os.environ) -> Optional[dict]:
    """This launch's side of an A/B job, as ``collbench ab`` described it; None outside one."""
    import json

    try:
        side = json.loads(env.get(environment.AB, ""))
    except ValueError:
        return None
    return side if isinstance(side, dict) else None


def _ab_side() -> str:
    """The label of the side of ``collbench ab`` this rank measures; "" outside ab."""
    return printable(str((ab_side() or {}).get("label", "")))


# The launching process's side.

def clear(state: str) -> None:
    """Before each launch: the notes of the one before go."""
    for note in Path(state).iterdir():
        if note.name.startswith((EARLY_END_PREFIX, GUARDIAN_PREFIX, ORPHANED_PREFIX, EXPLAINED,
                                 SAID_FIRST, STARTUP_PREFIX, JOB_CODE)):
            try:
                note.unlink()
            except OSError:
                pass


def ended_in_startup(state: Optional[str]) -> Optional[int]:
    """The exit code of the first rank that ended before the ranks could talk, or None: the
    others may have ended of it since (stopped: 143), their notes in any order."""
    first = first_ended_in_startup(state)
    return first[1] if first else None


def first_ended_in_startup(state: Optional[str]) -> Optional[tuple]:
    """(rank, exit code) of the first rank that ended before the ranks could talk, or None."""
    found = []
    for note in Path(state).glob(f"{EARLY_END_PREFIX}*") if state else ():
        try:
            found.append((note.stat().st_mtime_ns, note.name[len(EARLY_END_PREFIX):],
                          note.read_text().strip()))
        except OSError:
            continue
    if not found:
        return None
    _, rank, text = min(found)
    return int(rank) if rank.isdigit() else -1, int(text) if text.isdigit() else 1


def passed_on(state: str) -> None:
    """In ``collbench ab``'s process, before it passes a signal on to a side's ranks: the line
    is its own, said once for both sides (``said_elsewhere``)."""
    with contextlib.suppress(OSError):
        Path(state, PASSED_ON).touch()


def end_said() -> bool:
    """Whether this process, or under self-launch any process of the job, said why the job
    ends: a later failure is its echo (a stopped rank's guardian killed as the job is ended)."""
    state = os.environ.get(environment.STATE)
    return bool(_said_here) or (bool(state) and explanation(state) is not None)


#: How long a rank of a side of ``collbench ab`` that a signal ends waits for ab's note that it
#: passed the signal on: a Ctrl-C reaches the whole process group at once, and the rank may
#: come to its line before ab's process has run its handler.
AB_NOTE_WAIT = 1.0


def said_elsewhere() -> bool:
    """On a self-launched rank that a signal ends: whether another process says why. The job's
    end was said already (a guardian named a rank stopped in start-up, and the launching
    process stopped the others with SIGTERM), or the signal came from ``collbench ab``, which
    says it in one line for both sides."""
    state = os.environ.get(environment.STATE)
    if not state:
        return False
    if explanation(state) is not None:
        return True
    if ab_side() is None:
        return False
    deadline = time.monotonic() + AB_NOTE_WAIT
    while not os.path.exists(os.path.join(state, PASSED_ON)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def explanation(state: Optional[str]) -> Optional[str]:
    """The line that said why the job ended ("" if a rank printed its own), or None."""
    try:
        return (Path(state) / EXPLAINED).read_text() if state else None
    except OSError:
        return None


def job_code(state: Optional[str]) -> Optional[int]:
    """The code the job's coordinator ended the job with, once it did (JOB_CODE), or None."""
    try:
        return int((Path(state) / JOB_CODE).read_text()) if state else None
    except (OSError, ValueError):
        return None


def orphans(state: Optional[str], seconds: float) -> list:
    """(rank, pid, host) of the ranks whose guardian died under them, once every rank this
    launch started has ended (at most ``seconds``): a rank notes it before it leaves."""
    if not state:
        return []
    ranks = []
    for note in Path(state).glob(f"{GUARDIAN_PREFIX}*"):
        try:
            ranks.append(int(note.read_text().split()[1]))
        except (OSError, ValueError, IndexError):
            pass
    deadline = time.monotonic() + seconds
    while any(processes.alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
    found = []
    for note in sorted(Path(state).glob(f"{ORPHANED_PREFIX}*")):
        try:
            rank, pid, host = note.read_text().split(maxsplit=2)
            found.append((int(rank), int(pid), host.strip()))
        except (OSError, ValueError):
            pass
    return sorted(found)
