"""A Python environment in which collbench cannot even be imported (numpy, click or rich
missing or broken on one node, a ``PYTHONPATH`` that shadows them): one line instead of a
traceback, exit 2, and under an MPI launcher the whole job ends at once — the other ranks would
otherwise wait for this one inside MPI's start-up. Only the standard library and the launcher
detection (itself standard library) are used here.
"""

from __future__ import annotations

import sys

from collbench.errors import address_limit


def _failing_module(exc: ImportError) -> str:
    """The package whose own code raised the error (a broken install raises it from inside)."""
    frame, name = exc.__traceback__, ""
    while frame is not None:
        module = str(frame.tb_frame.f_globals.get("__name__", ""))
        if module and not module.startswith("collbench"):
            name = name or module.split(".")[0]
        frame = frame.tb_next
    return name


#: what the dynamic loader says when the address space (ulimit -v) has no room for a library
NO_ROOM = ("failed to map segment", "cannot map zero-fill pages", "cannot allocate memory")


def _no_room(exc: ImportError) -> bool:
    """Whether the import failed for want of address space: the loader could not map the
    library (numpy repeats the loader's words in its own message)."""
    text = " ".join(str(e) for e in (exc, exc.__cause__, exc.__context__) if e is not None).lower()
    return any(words in text for words in NO_ROOM)


def refuse(exc: ImportError) -> None:
    """Say which module could not be imported, on which rank, and end (exit 2)."""
    launcher = None
    if not _no_room(exc):              # with no room, loading more only fails again (and noisily)
        try:
            from collbench.launch.origin.launcher import detect

            launcher = detect()
        except Exception:              # stray variables: say it as rank 0 would
            launcher = None
    name = getattr(exc, "name", None) or _failing_module(exc) or "a module"
    who = f"rank {launcher.rank} " if launcher is not None and launcher.world_size > 1 else ""
    if _no_room(exc):                  # not a broken install: the address space ran out
        print(f"collbench: error: {who}out of memory while loading {name} ({address_limit()})",
              file=sys.stderr, flush=True)
    else:
        print(f"collbench: error: {who}cannot import {name}: {' '.join(str(exc).split())} (Python "
              f"{sys.executable}; install collbench's requirements there, or fix PYTHONPATH)",
              file=sys.stderr, flush=True)
    if (launcher is not None and launcher.shares_mpi_world and launcher.world_size > 1
            and name != "mpi4py"):
        try:
            from mpi4py import MPI

            MPI.COMM_WORLD.Abort(2)
        except Exception:
            pass
    sys.exit(2)
