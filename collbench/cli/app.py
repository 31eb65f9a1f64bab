"""Command line: wires options into a Plan and hands it to the launcher or the runner.

Heavy modules (rich, mpi4py, torch, matplotlib) are imported inside commands, so that
``collbench --help`` answers fast and never imports torch; numpy comes in with the collective
names (about 0.1 s for ``--help`` in all).
"""

from __future__ import annotations

import os
import signal
import sys

try:
    import click

    from collbench import __version__
    from collbench.cli.options import BenchCommand, bench_options, defaults_without
    from collbench.benchmarks.registry import NAMES, ORDER
    from collbench.cli.interrupt import interrupted
    from collbench.errors import CollbenchError, Interrupted, has_room, printable
except ImportError as _missing:        # numpy, click or rich missing or broken in this Python
    from collbench.cli.broken import refuse

    refuse(_missing)



class CommandGroup(click.Group):
    """collbench's commands in the order a user meets them, each with its whole first sentence."""

    def list_commands(self, ctx):
        first = list(NAMES) + ["pairs", "all", "env"]
        return first + sorted(name for name in self.commands if name not in first)

    def format_commands(self, ctx, formatter):
        rows = [(name, self.commands[name].get_short_help_str(limit=200))
                for name in self.list_commands(ctx)
                if name in self.commands and not self.commands[name].hidden]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=CommandGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="collbench")
@click.pass_context
def cli(ctx):
    """Benchmark collective communication across message sizes and backends.

    \b
    Examples:
      collbench allreduce --sizes 1K-1M          # launches its ranks itself
      mpiexec -n 8 collbench all                 # under your own launcher
      collbench all -n 4 --backend mpi,gloo      # backends side by side
      collbench compare base.json new.json       # exit 1 on a regression
    """
    if ctx.invoked_subcommand is None:       # bare ``collbench``: the help, not an error
        click.echo(ctx.get_help())


_argv: list = []   # the arguments main() was given: self-launched ranks re-run them


def _bench(collectives, **opts):
    from collbench.errors import HostUsageError
    from collbench.launch import processes
    from collbench.launch.origin import launcher as launch
    from collbench.launch.liveness import supervise

    launcher = launch.detect()
    problem = processes.file_size_problem()
    if problem:                      # before a guardian, which would fail on it as its rank does
        raise HostUsageError(problem)
    if launcher.name != "none":
        supervise.guard_rank(launcher)   # before heavy imports: the guardian stays small
    from collbench.run.plan import build_and_run

    sys.exit(build_and_run(collectives, opts, list(_argv), launcher))


_WHOLE_ARRAY = ("\n\n    Sizes are of the whole array over all n ranks, as in nccl-tests: each "
                "rank {part} size / n (OSU's message size), shown in the table's per-rank column.")


def _make_command(name):
    from collbench.benchmarks.registry import get_benchmark

    bench = get_benchmark(name)

    @bench_options([bench])
    def command(**opts):
        _bench((name,), **{**defaults_without([bench]), **opts})

    what = ("the time of a barrier" if not bench.moves_data
            else f"{name} across sizes (and backends)")
    command.__doc__ = (bench.summary or f"Measure {what}.") + (
        ""
        if bench.size_is_per_rank or not bench.moves_data
        else _WHOLE_ARRAY.format(part=bench.part_per_rank))
    if bench.summary:
        command.__doc__ += f"\n\n    One sample: {bench.timed_as}."
    made = cli.command(name, cls=BenchCommand)(command)
    made.benchmarks = (bench,)
    return made


for _name in NAMES:
    _make_command(_name)


def _all_command():
    from collbench.benchmarks.registry import COLLECTIVES

    benches = [b for b in COLLECTIVES.values() if b.in_all]

    @bench_options(benches)
    def all_command(**opts):
        """Measure every collective in one run, one results file.

        Options apply where they mean something: --op to the reductions, --root to the rooted
        collectives, --sizes and --dtype to every collective but barrier. The point-to-point
        benchmarks have commands of their own.
        """
        _bench(ORDER, **{**defaults_without(benches), **opts})

    made = cli.command("all", cls=BenchCommand)(all_command)
    made.benchmarks = tuple(benches)
    return made


_all_command()


def _pairs_command():
    from collbench.benchmarks.registry import get_benchmark
    from collbench.run.pairing import METRICS

    benches = [get_benchmark(name) for name in METRICS.values()]
    own = ("pair", "sizes")

    @click.option("--metric", type=click.Choice(list(METRICS)), default="latency",
                  show_default=True,
                  help="latency: pingpong's half round trip; bw: bw's window of sends, each way.")
    @click.option("-s", "--sizes", default=None,
                  help="Sizes, as for the other commands [default: 8 for latency, 1M for bw].")
    @click.option("--cross-host", is_flag=True,
                  help="Only pairs whose ranks are on different hosts.")
    @click.option("--per-host", is_flag=True,
                  help="One rank per host (the first): host-to-host links only.")
    @click.option("--serial", is_flag=True,
                  help="One pair at a time, instead of every disjoint pair at once.")
    @bench_options(benches, leave_out=own)
    @click.pass_context
    def pairs_command(ctx, metric, sizes, cross_host, per_host, serial, **opts):
        """Measure every pair of ranks and name the slow links and hosts.

        Latency (pingpong) or bandwidth (bw, each direction) between every pair of ranks, or of
        hosts; pairs that share no rank run at the same time (n - 1 steps of n / 2 pairs). The
        files hold one row per pair; the terminal shows the matrix where it fits, and the pairs
        and hosts that lie far from the median of comparable pairs (same host, across hosts);
        collbench plot draws it as a heat map.
        """
        opts = plan_options(ctx)
        _bench((opts["pairing"].benchmark,), **opts)

    def plan_options(ctx) -> dict:
        """The measuring options of a parsed ``pairs`` command line (``collbench ab`` reads them
        too)."""
        from collbench.errors import UsageError
        from collbench.run.pairing import Pairing

        opts = dict(ctx.params)
        metric, sizes = opts.pop("metric"), opts.pop("sizes")
        cross_host, per_host, serial = (opts.pop("cross_host"), opts.pop("per_host"),
                                        opts.pop("serial"))
        window_given = ctx.get_parameter_source("window") is not click.core.ParameterSource.DEFAULT
        if metric == "latency" and window_given:
            raise UsageError("--window applies to --metric bw only (pingpong sends one message at "
                             "a time)")
        select = "per-host" if per_host else "cross-host" if cross_host else "all"
        pairing = Pairing(metric=metric, select=select, serial=serial)
        return {**defaults_without(benches, leave_out=own), **opts,
                "sizes": sizes if sizes is not None else ("8" if metric == "latency" else "1M"),
                "pairing": pairing}

    made = cli.command("pairs", cls=BenchCommand)(pairs_command)
    made.benchmarks = tuple(benches)
    made.refused = {"pair": "it measures every pair (--cross-host and --per-host choose which)"}
    made.plan_options = plan_options
    return made


_pairs_command()


@cli.command("env")
def env_command():
    """Show what collbench detects: launcher, ranks, MPI, torch, usable backends."""
    from collbench.cli.env import print_report
    from collbench.launch.origin.launcher import detected_rank

    if detected_rank() == 0:        # under a launcher every rank would print the same report
        print_report()


@cli.command("schema")
def schema_command():
    """Print the JSON Schema of collbench's result files (also docs/result.schema.json)."""
    import json

    from collbench.results.schema import json_schema

    print(json.dumps(json_schema(), indent=1, ensure_ascii=False))


def main(argv=None) -> None:
    """Entry point: every failure that is not a bug is one line on stderr and an exit code. A
    rank tells its guardian the exit code it leaves with (one it did not tell is a library's)."""
    try:
        from collbench.launch.liveness.supervise import leaving

        from collbench.cli import streams
    except ImportError as exc:       # no room left to load them (ulimit -v), or a broken Python
        from collbench.cli.broken import refuse

        refuse(exc)

    try:
        _main(argv)
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        written = streams.outcome(code)      # what the user asked for on stdout reached it whole
        leaving(written)
        if written != code:
            raise SystemExit(written) from None
        raise
    except SystemError:
        # Out of room as it leaves, CPython may fail to make the SystemExit and say SystemError
        # instead (seen once beside two busy loops, after the line below was printed)
        limits = _low_limits()
        if not limits:
            leaving(1)
            raise
        _out_of_memory(limits, leave_now=True)
    except BaseException:            # a bug: Python prints the traceback and exits with 1
        leaving(1)
        raise
    written = streams.outcome(0)
    leaving(written)
    if written:
        sys.exit(written)


def _main(argv) -> None:
    from collbench.cli import streams
    from collbench.launch import processes

    streams.make_safe()          # closed, unencodable or broken output never changes the outcome
    processes.stay_small()       # before any thread: ulimit -v bounds the address space, not memory
    _argv[:] = sys.argv[1:] if argv is None else list(argv)
    try:
        cli.main(args=list(_argv), prog_name="collbench", standalone_mode=False)
    except click.exceptions.Abort:       # Ctrl-C at a prompt, or a KeyboardInterrupt click caught
        interrupted(signal.SIGINT)
    except Interrupted as exc:
        interrupted(exc.signum)
    except click.ClickException as exc:
        from collbench.launch.origin.launcher import detected_rank

        if detected_rank() == 0:          # under a launcher every rank has the same options
            print(f"collbench: error: {one_line(exc.format_message())}", file=sys.stderr)
        sys.exit(2)
    except CollbenchError as exc:
        _report(exc)
        _end_job_from_here(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:        # SIGINT's own handler, where something put it back
        interrupted(signal.SIGINT)
    # a module a command loads when it runs: missing, broken, or no room
    except ImportError as exc:
        from collbench.cli.broken import refuse

        refuse(exc)
    # a limit (ulimit -v) below what Python, MPI or torch need. Out of room inside an import,
    # CPython at times says SystemError ("error return without exception set"), seen once in a
    # whole run of the address-space test: with a low limit that is the same want of memory
    except (MemoryError, SystemError) as exc:
        limits = _low_limits()
        if isinstance(exc, SystemError) and not limits:
            raise
        _out_of_memory(limits)
    except RuntimeError as exc:
        if "can't start new thread" not in str(exc):
            raise
        print("collbench: error: cannot start a thread: a limit on memory or processes (ulimit -v, "
              "ulimit -u) is too low", file=sys.stderr)
        sys.exit(2)
    # a file that could not be read or written (a full disk, a folder gone)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        line = f"collbench: error: {one_line(where + (exc.strerror or str(exc)))}{_low_limits()}"
        try:
            from collbench.launch import notes
        except (OSError, MemoryError, ImportError):     # no room to load it (ulimit -v)
            print(line, file=sys.stderr)
            sys.exit(2)
        notes.say_first(line)     # under a launcher every rank of a host may meet the same
        sys.exit(2)


_said_out_of_memory: list = []


def _out_of_memory(limits: str, *, leave_now: bool = False) -> None:
    """One line, once, and exit 2: the process is out of room (a limit such as ulimit -v). With
    ``leave_now``, where raising SystemExit has already failed for want of room, the process
    ends at once, its output flushed."""
    if not _said_out_of_memory:
        line = ("collbench: error: out of "
                f"memory{limits or ' (a limit such as ulimit -v may be too low)'}")
        try:
            print(line, file=sys.stderr)
        # no room to make the line as collbench's other lines are made (wrapped to the terminal,
        # which loads a module): as it is
        except (MemoryError, SystemError, ImportError):
            try:
                os.write(2, (line + "\n").encode())
            except OSError:
                pass
        _said_out_of_memory.append(True)
    if not leave_now:
        sys.exit(2)
    try:
        from collbench.launch.liveness.supervise import leaving

        leaving(2)
        sys.stdout.flush()
        sys.stderr.flush()
    except (MemoryError, ImportError, SystemError, OSError, ValueError):
        pass
    os._exit(2)


#: Address space a process that ran out of room still lacks: under a low limit (ulimit -v), an
#: error of any kind at the process's edge with not even this much left to map was the want of
#: room (CPython's compiler, making a dataclass as a module loaded, said "ValueError: field
#: 'target' is required for AnnAssign" in a whole run of the address-space test).
ROOM_BYTES = 8 << 20


def left_out_of_memory(exc: BaseException) -> None:
    """``exc`` reached the process's edge, past the command line's own handlers (its exit's
    steps, or the out-of-memory line itself, ran out of room): where the process said it is out
    of memory, or a low limit and the room left explain it (a SystemError or MemoryError, or no
    ROOM_BYTES to map), it ends now with exit 2 and that one line; else it returns, and the
    error is a bug with its traceback."""
    limits = "" if _said_out_of_memory else _low_limits()
    if _said_out_of_memory or (limits and (isinstance(exc, (SystemError, MemoryError))
                                           or not has_room(ROOM_BYTES))):
        _out_of_memory(limits, leave_now=True)



def _low_limits() -> str:
    """A low limit that may explain a failure (ulimit -f 0: not even the temporary folder's test
    file can be written; ulimit -v), or "" when none or no room is left to say."""
    try:
        from collbench.launch import processes

        return processes.low_limits()
    except (MemoryError, ImportError, SystemError):
        return ""


def one_line(text: str) -> str:
    """A message as one printable line, whatever a library or a file name put into it."""
    return printable(" ".join(part.strip() for part in str(text).splitlines() if part.strip()))


def _report(exc: CollbenchError) -> None:
    # Under a launcher every rank meets the same bad input: only rank 0 says so.
    from collbench.launch.origin.launcher import detected_rank

    if not exc.every_rank or detected_rank(on_host=exc.per_host) == 0:
        from collbench.launch import notes

        # noted: the launching process says no more
        notes.say(f"collbench: error: {one_line(exc)}")
    else:
        # Leave after rank 0, which says it: a launcher such as torchrun stops every rank
        # as soon as one exits, and rank 0 must not be stopped before it has spoken.
        import time

        time.sleep(1.0)


def _end_job_from_here(exc: CollbenchError) -> None:
    """An error of this rank alone under an MPI launcher: the other ranks may be waiting for it
    inside MPI (in MPI_Init, before collbench's own job channel exists), and a launcher ends a
    job when a rank aborts, not when it exits. So abort the job (starting MPI first if need be:
    the others are waiting in its start-up)."""
    from collbench.errors import UsageError
    from collbench.launch.origin.launcher import detect

    if exc.every_rank:
        return
    try:
        launcher = detect()
    except UsageError:
        return
    if not launcher.shares_mpi_world or launcher.world_size < 2:
        return
    from collbench.backends import abort_mpi_job
    from collbench.launch.liveness.supervise import leaving

    sys.stderr.flush()
    leaving(exc.exit_code)          # MPI_Abort ends this process with it, before main could say so
    # without MPI here, the guardians' start-up deadline ends the job
    abort_mpi_job(exc.exit_code)


def _register_file_commands() -> None:
    from collbench.cli.ab import ab_command
    from collbench.cli.export import export_command
    from collbench.cli.results import register

    register(cli)
    cli.add_command(export_command)
    cli.add_command(ab_command)


_register_file_commands()
