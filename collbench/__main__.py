"""``python -m collbench`` and the ``collbench`` command. Signals are taken first, before
anything heavy is imported: a Ctrl-C while Python loads collbench, MPI or torch is one line,
not a traceback."""

import sys

from collbench.errors import Interrupted, address_limit, check_interrupted, interrupt_on_signals


def main(argv=None) -> None:
    interrupt_on_signals()
    try:
        from collbench.cli.app import main as run
    except Interrupted as exc:      # while Python loads collbench
        from collbench.cli.interrupt import interrupted
        interrupted(exc.signum)
    except MemoryError:          # a memory limit (ulimit -v) too low for Python to load collbench
        sys.stderr.write(f"collbench: error: out of memory while starting ({address_limit()})\n")
        sys.exit(2)
    try:
        check_interrupted()
        run(argv)
    except Interrupted as exc:      # where the command line's own handling does not reach
        from collbench.cli.interrupt import interrupted
        interrupted(exc.signum)


if __name__ == "__main__":
    main()
