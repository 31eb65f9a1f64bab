"""The MPI thread level the ranks initialise MPI at (``--thread-level``).

mpi4py asks MPI_Init_thread for MPI_THREAD_MULTIPLE unless told otherwise, while Intel MPI
Benchmarks, OSU and a C program's MPI_Init run at MPI_THREAD_SINGLE; on MPICH the level alone
moves small-message latency 3x (docs/methodology.md, "The MPI thread level"). collbench asks
for the level it is given, or the default below, and records what it asked for and what the
library gave.

Below MULTIPLE only the main thread calls MPI: the ranks' helper threads (guardian, watchdog,
signals) make no MPI call but MPI_Abort, and ``abort_from_any_thread`` leaves that out of a
helper thread where the level forbids it.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Optional

from collbench import environment
from collbench.errors import UsageError

#: MPI's thread levels, weakest first, by the names mpi4py's ``rc.thread_level`` takes.
LEVELS = ("single", "funneled", "serialized", "multiple")
#: The level asked for unless --thread-level (or mpi4py's own variable) says otherwise: the
#: level of MPI_Init, IMB and OSU, and on MPICH the faster one at small sizes (methodology.md).
DEFAULT = "single"
#: What a file written before levels were recorded ran at: mpi4py's default.
ASSUMED_BEFORE = "multiple"


def user_default(env=os.environ) -> str:
    """The level asked for when --thread-level is not given: mpi4py's MPI4PY_RC_THREAD_LEVEL
    where the user set it, else ``DEFAULT``."""
    value = env.get(environment.MPI4PY_THREAD_LEVEL, "").strip().lower()
    if not value:
        return DEFAULT
    if value not in LEVELS:
        raise UsageError(f"{environment.MPI4PY_THREAD_LEVEL}={value!r:.40} is not a thread level; "
                         f"choose from: {', '.join(LEVELS)}")
    return value


def parse_levels(text: Optional[str]) -> tuple:
    """``--thread-level`` (a comma list) as levels in the order given; None: the user's default."""
    if text is None:
        return (user_default(),)
    levels = [part.strip().lower() for part in str(text).split(",") if part.strip()]
    if not levels:
        raise UsageError(f"--thread-level is empty; choose from: {', '.join(LEVELS)}")
    for level in levels:
        if level not in LEVELS:
            raise UsageError(f"unknown thread level {level!r:.40}; choose from: "
                             f"{', '.join(LEVELS)}")
    return tuple(dict.fromkeys(levels))


#: The level this process asks MPI for, once ``ask_for`` has said it; mpi4py is told when MPI
#: is imported (``_mpi.mpi_module``), where what a broken library prints is kept for the line
#: that says why the rank ended.
asked: Optional[str] = None


def ask_for(level: str) -> None:
    """Have MPI initialised at ``level`` (before MPI is imported; once it is, the level is what
    it is, and ``provided`` says which)."""
    global asked
    asked = level


def tell_mpi4py() -> None:
    """Set mpi4py's thread level to the one asked for, if any (just before MPI is imported)."""
    if asked is not None:
        import mpi4py
        mpi4py.rc.thread_level = asked


def provided(MPI) -> str:
    """The level the library gave (MPI_Query_thread), by name."""
    level = MPI.Query_thread()
    names = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
             MPI.THREAD_SERIALIZED: "serialized",
             MPI.THREAD_MULTIPLE: "multiple"}
    return names.get(level, str(level))


def abort_from_any_thread(abort: Callable[[int], None], level: str) -> Callable[[int], None]:
    """``abort`` (MPI_Abort) as a helper thread may call it: below MULTIPLE it runs on the main
    thread only; elsewhere it does nothing, and the caller ends its own process, which ends the
    job through collbench's coordinator or the launcher."""
    if level == "multiple":
        return abort

    def main_thread_only(code: int) -> None:
        if threading.current_thread() is threading.main_thread():
            abort(code)
    return main_thread_only
