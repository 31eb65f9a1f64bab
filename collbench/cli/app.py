"""Command line: wires options into a Plan and hands it to the launcher or the runner.

Heavy modules (pandas, rich, mpi4py, torch, matplotlib) are imported inside commands, so that
``collbench --help`` answers fast and never imports torch; numpy comes in with the collective
names (about 0.1 s for ``--help`` in all).
"""

from __future__ import annotations

import sys

import click

from collbench import __version__
from collbench.cli import params
from collbench.collectives.registry import ORDER
from collbench.errors import CollbenchError
from collbench.run.rounds import DEFAULT_ROUNDS, MAX_ROUNDS

TIMINGS = ("latency", "throughput", "both")
FORMATS = ("table", "markdown", "csv", "json")      # the keys of collbench.results.exporters.STDOUT_FORMATS


def _positive_int(name):
    def check(ctx, param, value):
        if value is not None and value < 1:
            raise click.BadParameter(f"must be at least 1, got {value}", param_hint=name)
        return value
    return check


def bench_options(f):
    """Options shared by every collective command and ``all``."""
    decorators = [
        click.option("-b", "--backend", default="mpi", show_default=True,
                     help="Comma list of mpi, mpi-pickle, gloo, nccl, installed plugins (collbench env lists them), or all (every usable one)."),
        click.option("-s", "--sizes", default="8-1M", show_default=True,
                     help="Sizes: 1K-1G (powers of 2), 8-1M:x4, 1K-64K:+8K, 8,1K,1M; K/M/G are 1024-based."),
        click.option("-n", "--np", "nprocs", type=int, default=None,
                     help="Ranks to launch when no launcher is used [default: GPUs for nccl, else min(cpus, 4), at least 2]."),
        click.option("-d", "--dtype", default="float32", show_default=True,
                     help="float32, float64, float16, bfloat16 (gloo, nccl), int32, int64."),
        click.option("--op", default="sum", show_default=True, help="Reduction: sum, max, min, prod."),
        click.option("--root", type=int, default=0, show_default=True, help="Root rank of rooted collectives."),
        click.option("--iters", type=int, default=None, callback=_positive_int("--iters"),
                     help="Fixed timed iterations per size and round [default: adaptive]."),
        click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True,
                     help="Untimed iterations per size, after the first call."),
        click.option("--min-iters", type=click.IntRange(min=1), default=10, show_default=True,
                     help="Fewest timed iterations in adaptive mode."),
        click.option("--max-time", type=params.MAX_TIME, default=1.0, show_default=True,
                     help="Seconds of timed work per size in adaptive mode, shared among the rounds."),
        click.option("--precision", type=params.PRECISION, default=0.02,
                     show_default=True,
                     help="Stop when the median's 95%% CI half-width is this fraction of the median."),
        click.option("--rounds", type=click.IntRange(min=1, max=MAX_ROUNDS), default=DEFAULT_ROUNDS,
                     show_default=True,
                     help="Measure the whole sweep this many times: fresh launches when collbench starts "
                          "the ranks, fresh communicators and buffers under your launcher."),
        click.option("--seed", type=click.IntRange(min=0, max=2**31 - 1), default=None,
                     help="Seed of the shuffled measurement order [default: random, recorded]."),
        click.option("--shuffle/--no-shuffle", default=True, show_default=True,
                     help="Shuffle the order of collectives, backends and sizes within each round."),
        click.option("--timing", type=click.Choice(TIMINGS), default="latency", show_default=True,
                     help="latency: barrier + one call; throughput: back-to-back calls; both."),
        click.option("--check/--no-check", default=True, show_default=True,
                     help="Verify every size's result once, outside the timed region."),
        click.option("-o", "--output", multiple=True,
                     help="Write results to FILE (.json, .csv or .md); repeatable [default: JSON+CSV in results/]."),
        click.option("--results-dir", default="results", show_default=True,
                     help="Folder for the default result files."),
        click.option("--no-save", is_flag=True, help="Write no result files."),
        click.option("--force", is_flag=True, help="Overwrite existing output files."),
        click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors."),
        click.option("-f", "--format", "print_format", type=click.Choice(FORMATS), default="table",
                     show_default=True, help="What to print on stdout."),
        click.option("--timeout", type=params.TIMEOUT, default=300.0, show_default=True,
                     help="Abort the whole job if one size takes longer than this many seconds; 0 = never."),
        click.option("-v", "--verbose", is_flag=True, help="Print the launch command and more detail."),
    ]
    for decorator in reversed(decorators):
        f = decorator(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="collbench")
def cli():
    """Benchmark collective communication across message sizes and backends.

    \b
    Examples:
      collbench allreduce --sizes 1K-1M               # self-launches ranks through mpiexec
      mpiexec -n 8 collbench all                      # under your own launcher
      collbench all -n 4 --backend mpi,mpi-pickle     # one table, two backends
    """


_argv: list = []   # the arguments main() was given: self-launched ranks re-run them


def _bench(collectives, **opts):
    from collbench.launch import launcher as launch
    from collbench.launch import supervise

    launcher = launch.detect()
    if launcher.name != "none":
        supervise.guard_rank(launcher.rank)   # before heavy imports: the guardian stays small
    from collbench.run.plan import build_and_run

    sys.exit(build_and_run(collectives, opts, list(_argv)))


def _make_command(name):
    @bench_options
    def command(**opts):
        _bench((name,), **opts)

    command.__doc__ = f"Measure {name} across sizes (and backends)."
    return cli.command(name)(command)


for _name in ORDER:
    _make_command(_name)


@cli.command("all")
@bench_options
def all_command(**opts):
    """Measure every collective in one run, one results file."""
    _bench(ORDER, **opts)


@cli.command("env")
def env_command():
    """Show what collbench detects: launcher, ranks, MPI, torch, usable backends."""
    from collbench.cli.env import print_report

    print_report()


def main(argv=None) -> None:
    """Entry point: every failure that is not a bug is one line on stderr and an exit code."""
    from collbench.cli import streams

    streams.make_safe()          # closed, unencodable or broken output never changes the outcome
    _argv[:] = sys.argv[1:] if argv is None else list(argv)
    try:
        cli.main(args=list(_argv), prog_name="collbench", standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        from collbench.launch.launcher import detected_rank

        if detected_rank() == 0:          # under a launcher every rank has the same options
            print(f"collbench: error: {one_line(exc.format_message())}", file=sys.stderr)
        sys.exit(2)
    except CollbenchError as exc:
        _report(exc)
        _end_job_from_here(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("collbench: interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as exc:         # a file that could not be read or written (a full disk, a folder gone)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"collbench: error: {where}{exc.strerror or one_line(exc)}", file=sys.stderr)
        sys.exit(2)


def one_line(text: str) -> str:
    """A message as one line, whatever a library put into it."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _report(exc: CollbenchError) -> None:
    # Under a launcher every rank meets the same bad input: only rank 0 says so.
    from collbench.launch.launcher import detected_rank

    if not exc.every_rank or detected_rank() == 0:
        print(f"collbench: error: {one_line(exc)}", file=sys.stderr)
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
    from collbench.launch.launcher import detect

    if exc.every_rank:
        return
    try:
        launcher = detect()
    except UsageError:
        return
    if not launcher.mpi or launcher.world_size < 2:
        return
    try:
        from mpi4py import MPI

        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(exc.exit_code)
    except Exception:      # no usable MPI here: the guardians' start-up deadline ends the job
        pass


def _register_file_commands() -> None:
    from collbench.cli.results import register

    register(cli)


_register_file_commands()
