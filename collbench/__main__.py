"""``python -m collbench`` and the ``collbench`` command. Signals are taken first, before
anything heavy is imported: a Ctrl-C while Python loads collbench, MPI or torch is one line,
not a traceback."""

import os
import sys

from collbench.environment import BLAS_THREADS
from collbench.errors import (Interrupted, address_limit, check_interrupted, has_room,
                              interrupt_on_signals)

#: Address space that numpy and collbench's modules take as they load: 91 MiB on x86-64 with one
#: BLAS thread. With less left, OpenBLAS ends the process with its own message (exit 1).
LOADING_BYTES = 96 << 20


def _one_blas_thread() -> None:
    """collbench does no linear algebra, but numpy's OpenBLAS starts a thread per core in every
    process that imports it, each with about 40 MiB of address space: one thread, unless the user
    chose a number."""
    if not any(name in os.environ for name in BLAS_THREADS):
        os.environ[BLAS_THREADS[0]] = "1"


def _out_of_memory() -> None:
    sys.stderr.write(f"collbench: error: out of memory while starting ({address_limit()})\n")
    sys.exit(2)


def main(argv=None) -> None:
    interrupt_on_signals()
    _one_blas_thread()
    # a limit (ulimit -v) too low to load numpy: said before it is tried
    if not has_room(LOADING_BYTES):
        _out_of_memory()
    try:
        from collbench.cli.app import main as run
    except Interrupted as exc:      # while Python loads collbench
        from collbench.cli.interrupt import interrupted
        interrupted(exc.signum)
    except MemoryError:          # a memory limit (ulimit -v) too low for Python to load collbench
        _out_of_memory()
    try:
        check_interrupted()
        run(argv)
    except Interrupted as exc:      # where the command line's own handling does not reach
        from collbench.cli.interrupt import interrupted
        interrupted(exc.signum)
    # out of room past the command line's own handlers (whole runs of the address-space test:
    # "error return without exception set" from the exit's own steps, a ValueError from the
    # compiler as a module loaded): the out-of-memory line and exit 2, no traceback
    except Exception as exc:
        from collbench.cli.app import left_out_of_memory

        left_out_of_memory(exc)
        raise


if __name__ == "__main__":
    main()
