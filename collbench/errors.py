"""Exceptions that end a run with a one-line message instead of a traceback, and ``printable``:
text collbench did not write (a result file's metadata, a library's message) made safe to
show in such a line."""


class CollbenchError(Exception):
    """A failure explained in one line; ``exit_code`` is what the process returns."""

    exit_code = 1
    #: Under a launcher, every rank met this same error (options, a decision rank 0 broadcast):
    #: rank 0 alone says it. Errors of one rank (its rendezvous, its environment) are said by it.
    every_rank = False


class UsageError(CollbenchError):
    """Bad input: a value, an option combination or an environment we cannot use."""

    exit_code = 2


class BackendUnavailable(UsageError):
    """A backend that cannot run here (missing package, missing device)."""


class BackendDeclined(BackendUnavailable):
    """Raised by a backend's ``setup`` when it cannot run as the user set it up here, and every
    rank finds the same (an MPI library that cannot take GPU memory): the run goes on without
    it, with a note."""


class SharedUsageError(UsageError):
    """Bad input that every rank of a job meets alike (its options, or a decision rank 0
    broadcast): under a launcher only rank 0 says it."""

    every_rank = True
    #: said by the first rank of each host rather than by rank 0 (``HostUsageError``)
    per_host = False


class HostUsageError(SharedUsageError):
    """Bad input that every rank of one host meets alike (its /dev/shm), which other hosts may
    not: the first rank of each host that meets it says it, naming the host."""

    per_host = True


def address_limit() -> str:
    """The limit that most likely ran out, read without importing anything (no room for that)."""
    try:
        with open("/proc/self/limits", encoding="ascii") as fh:
            line = next((row for row in fh if row.startswith("Max address space")), "")
        soft = line.split()[3]
    except (OSError, MemoryError, IndexError):
        soft = ""
    return (f"ulimit -v is {int(soft) // 1024} KiB: raise it"
            if soft.isdigit() else "a limit such as ulimit -v is too low")


def has_room(nbytes: int) -> bool:
    """Whether ``nbytes`` of address space can still be mapped (a mapping reserved and given
    back, never touched), asked without importing anything."""
    import mmap

    try:
        mmap.mmap(-1, nbytes, prot=mmap.PROT_READ).close()
    except (OSError, MemoryError, ValueError):
        return False
    return True


def printable(text: str) -> str:
    """``text`` as a terminal shows it, on one line and changing nothing on the terminal: a line
    end, a tab or another space that is not a plain one becomes a space; any other character
    that is not printable (ESC and the escape sequences it starts, BEL, DEL, C1 controls such as
    the one-byte CSI, bidirectional overrides, zero-width characters) becomes its visible escape,
    ``\\x1b``, ``\\u202e``. Printable text comes back as it is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else " "
                   if c.isspace() else c.encode("unicode_escape").decode("ascii") for c in text)


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP before the run's own handling of signals took over (while
    Python imports collbench, or the plan is made), or after it: raised where the program is,
    and said in one line by the command line. Not a KeyboardInterrupt, which click would turn
    into a blank line and a silent exit."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


#: the signals Interrupted was raised for: C code that clears a pending exception (an import's
#: fallback) can swallow it, and the places that go on to start work look here
#: (``check_interrupted``)
_interrupted_by: list = []


def check_interrupted() -> None:
    """Raise Interrupted again if a signal raised it before and something swallowed it."""
    if _interrupted_by:
        raise Interrupted(_interrupted_by[0])


def interrupted_by() -> list:
    """The signals that raised Interrupted in this process (a launch notes them as its own)."""
    return list(_interrupted_by)


def interrupt_on_signals() -> None:
    """From now on SIGINT, SIGTERM and SIGHUP raise Interrupted, unless they are ignored (nohup's
    SIGHUP); once one came, the others are ignored while the process says so and ends. The run
    replaces this with its own handling while it measures."""
    import signal

    def interrupted(signum, _frame):
        # a second Ctrl-C: the first is
        for other in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(other, signal.SIG_IGN)                         # being said already
        _interrupted_by.append(signum)
        raise Interrupted(signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, interrupted)
    _quiet_when_swallowed()


def _quiet_when_swallowed() -> None:
    """Where Python cannot raise an exception — a weak reference's callback, such as the lock of
    a module being imported, or a ``__del__`` — it prints "Exception ignored in …" and goes on.
    An Interrupted lost so is recorded (``_interrupted_by``) and raised again by
    ``check_interrupted``; the report of it would be a second line, so it is left out. Every
    other such report is printed as Python prints it."""
    import sys

    if getattr(sys.unraisablehook, "collbench", False):
        return
    default = sys.unraisablehook

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            default(unraisable)

    hook.collbench = True
    sys.unraisablehook = hook
