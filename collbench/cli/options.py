"""The options of the measuring commands, and which of them each benchmark takes.

An option a benchmark has no use for is left off its command and refused, when named, with
the reason (``BenchCommand``); ``all`` takes every option some collective uses and applies each
where it means something.
"""

from __future__ import annotations

import click

from collbench.cli import params
from collbench.measure import timings
from collbench.measure.stop import MAX_SAMPLES
from collbench.run.rounds import DEFAULT_ROUNDS, MAX_ROUNDS

#: --window: beyond this many requests in flight, MPI libraries and gloo queue them anyway
MAX_WINDOW = 4096
#: the most calls --coalesce groups: each has buffers of its own
MAX_COALESCE = 64
# the keys of collbench.render.exporters.STDOUT_FORMATS
FORMATS = ("table", "markdown", "csv", "json")


# The options of a measuring command; those a collective has no use for are left off its
# command (and refused when named, with the reason), and under ``all`` they apply where they mean
# something. The value a command without the option runs with is its default here.
_OPTIONS = (
    ("backend", click.option(
        "-b", "--backend", default="mpi", show_default=True,
        help="Comma list of mpi, mpi-pickle, gloo, nccl, installed plugins (collbench env lists "
             "them), or all (every usable one).")),
    ("sizes", click.option(
        "-s", "--sizes", default="8-1M", show_default=True,
        help="Sizes: 1K-1G (powers of 2), 8-1M:x4, 1K-64K:+8K, 8,1K,1M; K/M/G are 1024-based.")),
    ("nprocs", click.option(
        "-n", "--np", "nprocs", type=params.Whole(), default=None,
        help="Ranks to launch when no launcher is used [default: GPUs for nccl, else min(cpus, 4), "
             "at least 2].")),
    ("dtype", click.option(
        "-d", "--dtype", default="float32", show_default=True,
        help="float32, float64, float16, bfloat16 (gloo, nccl), int32, int64, int8, uint8; a "
             "comma list measures each side by side (all: every one).")),
    ("op", click.option("--op", default="sum", show_default=True,
                        help="Reduction: sum, max, min, prod; land, lor, band, bor (integer "
                             "dtypes); maxloc, minloc (mpi, mpi-pickle); avg (gloo, nccl); a "
                             "comma list measures each (all: every one).")),
    ("root",
     click.option("--root", type=params.Whole(), default=0, show_default=True, help="Root rank.")),
    ("pair", click.option(
        "--pair", type=params.PAIR, default=(0, 1), show_default=True,
        help="The two ranks that exchange messages; the first starts each exchange and is timed.")),
    ("window", click.option(
        "--window", type=params.Whole(min=1, max=MAX_WINDOW), default=64, show_default=True,
        help="Messages in flight per sample, closed by one acknowledgement (OSU's window).")),
    ("split", click.option(
        "--split", type=params.SPLIT, default=None,
        help="Measure in groups at once: intra (a group per host), inter (a rank of each host per "
             "group), or N equal groups of consecutive ranks; rows per group, tables show the "
             "slowest and the spread.")),
    ("split_mask", click.option(
        "--split-mask", type=params.MASK, default=None,
        help="Groups of the ranks r with the same r & MASK, as nccl-tests' NCCL_TESTS_SPLIT_MASK "
             "(e.g. 0x7).")),
    ("pattern", click.option(
        "--pattern", default="uniform", show_default=True,
        help="How a v-collective spreads a rank's bytes over the ranks: uniform; spread:F "
             "(nccl-tests' distance-weighted blend, 0 <= F <= 1); zipf:S[:SEED] (a "
             "mixture-of-experts router: the ranks of a seeded shuffle receive by a Zipf law of "
             "exponent S); matrix:FILE (n rows of n numbers: what rank i sends rank j, scaled). "
             "The size is what a rank sends on average; a comma list measures each side by side.")),
    ("buffers", click.option(
        "--buffers", type=params.Choices(("numpy", "mpi", "cuda")), default="numpy",
        show_default=True,
        help="What the mpi backend's buffers are: numpy arrays, memory from MPI.Alloc_mem, or GPU "
             "memory (a CUDA-aware MPI only); a comma list (numpy,mpi) measures each "
             "side by side.")),
    ("payload", click.option(
        "--payload", type=params.Choices(("array", "bytes", "list", "dict")), default="array",
        show_default=True,
        help="What mpi-pickle sends: a numpy array, bytes, a list of numbers, or a dict of them; "
             "the size is the data's bytes; a comma list measures each side by side.")),
    ("init_method", click.option(
        "--init-method", default="env://", show_default=True, metavar="URL",
        help="How gloo and nccl ranks meet, as init_process_group takes it: env://, "
             "tcp://HOST:PORT, or file:///PATH (a path every host sees).")),
    ("api", click.option(
        "--api", type=params.Choices(("blocking", "nonblocking", "persistent")), default="blocking",
        show_default=True,
        help="How calls are issued: blocking; nonblocking (MPI's I... calls, torch's async_op), "
             "timed alone and with compute between start and wait (the overlap); persistent "
             "(MPI-4's ..._init); a comma list measures each side by side.")),
    ("placement", click.option(
        "--placement", type=params.Choices(("out-of-place", "in-place")), default="out-of-place",
        show_default=True,
        help="Where each collective's result goes: a receive buffer of its own, or in place of its "
             "input (MPI.IN_PLACE); a comma list measures both side by side, as nccl-tests prints "
             "them.")),
    ("cache", click.option(
        "--cache", type=params.Choices(("hot", "cold")), default="hot", show_default=True,
        help="hot: every call on one set of buffers, as most benchmarks do; cold: each call on the "
             "next of a pool of buffer sets spanning twice the last-level cache (a GPU's L2 for "
             "its buffers), so that no call finds its data in cache (IMB's -off_cache); a comma "
             "list measures both side by side.")),
    ("coalesce", click.option(
        "--coalesce", type=params.Whole(min=1, max=MAX_COALESCE), default=1, show_default=True,
        metavar="K",
        help="Also issue K calls as one group (torch's coalescing manager, one NCCL group; MPI's "
             "non-blocking calls started together, then completed), each on buffers of its own, "
             "beside the uncoalesced calls: rows give the time per call, so a table shows what "
             "grouping saves (nccl-tests' -m).")),
    ("thread_level", click.option(
        "--thread-level", default=None, metavar="LEVEL",
        help="MPI thread level the ranks initialise MPI at (mpi, mpi-pickle): single, funneled, "
             "serialized or multiple; a comma list measures each side by side, each launch at one "
             "level [default: single, or MPI4PY_RC_THREAD_LEVEL].")),
    ("bind", click.option(
        "--bind", type=click.Choice(("none", "core")), default=None,
        help="How collbench's own launch binds its ranks: none (free to move), core (one core "
             "each) [default: none]; under your launcher, bind with it (mpiexec -bind-to core, "
             "srun --cpu-bind=cores).")),
    ("pages", click.option(
        "--pages", type=click.Choice(("small", "huge")), default="small", show_default=True,
        help="The pages under the ranks' buffers in main memory, whatever their size: small (as a "
             "C benchmark's malloc gets them) or huge (transparent huge pages, where the kernel "
             "has them).")),
    ("iters", click.option(
        "--iters", type=params.Whole(min=1, max=MAX_SAMPLES), default=None,
        help=f"Fixed timed iterations per size and round, at most {MAX_SAMPLES:,} (each one's time "
             "is kept) [default: adaptive].")),
    ("warmup", click.option(
        "--warmup", type=params.Whole(min=0, max=MAX_SAMPLES), default=5, show_default=True,
        help=f"Untimed iterations per size, after the first call, at most {MAX_SAMPLES:,}.")),
    ("min_iters", click.option(
        "--min-iters", type=params.Whole(min=1), default=10, show_default=True,
        help="Fewest timed iterations in adaptive mode, where --max-time allows (the row says when "
             "not).")),
    ("max_time", click.option(
        "--max-time", type=params.MAX_TIME, default=1.0, show_default=True,
        help="Seconds per size in adaptive mode, shared among the rounds: warm-up and samples keep "
             "to it, a slow pair's window shrinks to fit it.")),
    ("precision", click.option(
        "--precision", type=params.PRECISION, default=0.02, show_default=True,
        help="Stop when the median's 95% CI half-width is this fraction of the median.")),
    ("rounds", click.option(
        "--rounds", type=params.Whole(min=1, max=MAX_ROUNDS), default=DEFAULT_ROUNDS,
        show_default=True,
        help="Measure the whole sweep this many times: fresh launches when collbench starts the "
             "ranks, fresh communicators and buffers under your launcher.")),
    ("seed", click.option(
        "--seed", type=params.Whole(min=0, max=2**31 - 1), default=None,
        help="Seed of the shuffled measurement order [default: random, recorded].")),
    ("shuffle", click.option(
        "--shuffle/--no-shuffle", default=True, show_default=True,
        help="Shuffle the order of collectives, backends and sizes within each round.")),
    ("timing", click.option(
        "--timing", type=params.Choices(timings.BUILTIN_CHOICES, timings.choices),
        default="latency", show_default=True,
        help="latency: barrier + one call; throughput: back-to-back calls; graph: calls replayed "
             "from a CUDA graph; device: one call on the GPU's clock (graph, device: nccl); a "
             "comma list, both = latency,throughput.")),
    ("check", click.option(
        "--check/--no-check", default=True, show_default=True,
        help="Verify every size's result once, outside the timed region.")),
    ("output", click.option(
        "-o", "--output", multiple=True, metavar="FILE",
        help="Write results to FILE (.json, .csv or .md); repeatable [default: JSON+CSV in "
             "results/].")),
    ("results_dir", click.option(
        "--results-dir", default="results", show_default=True, metavar="DIR",
        help="Folder for the default result files.")),
    ("no_save", click.option("--no-save", is_flag=True, help="Write no result files.")),
    ("force", click.option("--force", is_flag=True, help="Overwrite existing output files.")),
    ("quiet", click.option("-q", "--quiet", is_flag=True,
                           help="Print nothing but errors (and what -f asks for on stdout).")),
    ("print_format", click.option(
        "-f", "--format", "print_format", type=click.Choice(FORMATS), default="table",
        show_default=True, help="What to print on stdout.")),
    ("timeout", click.option(
        "--timeout", type=params.TIMEOUT, default=300.0, show_default=True,
        help="Abort the whole job if one size takes longer than this many seconds; 0 = never.")),
    ("verbose", click.option("-v", "--verbose", is_flag=True,
                             help="Print the launch command and more detail.")),
)

_FLAGS = {"sizes": ("-s", "--sizes"), "dtype": ("-d", "--dtype"), "op": ("--op",),
          "root": ("--root",),
          "check": ("--check", "--no-check"), "pair": ("--pair",), "window": ("--window",),
          "pattern": ("--pattern",),
          "split": ("--split",), "split_mask": ("--split-mask",), "buffers": ("--buffers",),
          "payload": ("--payload",), "api": ("--api",),
          "placement": ("--placement",), "pages": ("--pages",), "cache": ("--cache",),
          "coalesce": ("--coalesce",)}


def _why_not(name: str, bench) -> str:
    """Why option ``name`` has no meaning for benchmark ``bench`` ("" when it has one)."""
    if name in ("sizes", "dtype", "check", "buffers", "payload", "placement", "pages",
                "cache") and not bench.moves_data:
        return "it moves no data"
    if name == "placement" and bench.kind != "collective":
        return "a message has no in-place form"
    if name == "op" and not bench.reduces:
        return "it reduces nothing"
    if name == "root" and not bench.rooted:
        return "it has no root rank"
    if name == "pair" and not bench.paired:
        return "every rank takes part"
    if name == "coalesce" and (bench.kind != "collective" or not bench.moves_data):
        return "only collectives that move data are grouped"
    if name == "pattern" and not bench.patterned:
        return "its pieces all have one length"
    if name == "window" and not bench.windowed:
        return "it has no window of messages"
    if name in ("split", "split_mask") and bench.paired:
        return "it measures one pair (--pair); collbench pairs measures many at once"
    return ""


def _unused(name: str, benches) -> str:
    """Why none of ``benches`` uses option ``name`` ("" when one does)."""
    reasons = [_why_not(name, bench) for bench in benches]
    return reasons[0] if all(reasons) else ""


def _default(decorator):
    return decorator(lambda: None).__click_params__[0].default


def defaults_without(benches, leave_out=()) -> dict:
    """The values a command runs with for the options it leaves off."""
    return {name: _default(decorator) for name, decorator in _OPTIONS
            if _unused(name, benches) or name in leave_out}


def bench_options(benches, leave_out=()):
    """The options of the command measuring ``benches``: those at least one of them uses, less
    ``leave_out`` (options the command replaces with its own)."""
    def apply(f):
        for name, decorator in reversed(_OPTIONS):
            if not _unused(name, benches) and name not in leave_out:
                f = decorator(f)
        return f
    return apply


class BenchCommand(click.Command):
    """A measuring command: an option it has no use for is refused with the reason."""

    benchmarks: tuple = ()
    refused: dict = {}        # option name: why this command takes no such option

    def parse_args(self, ctx, args):
        given = list(args)            # click consumes ``args`` as it parses
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            words = given[:given.index("--")] if "--" in given else given
            if any(word in ctx.help_option_names for word in words):    # help first, as click does
                click.echo(self.get_help(ctx), color=ctx.color)
                ctx.exit(0)
            for name, flags in _FLAGS.items():
                why = self.refused.get(name) or (_unused(name, self.benchmarks)
                                                 if self.benchmarks else "")
                if why and exc.option_name in flags:
                    raise click.UsageError(f"{self.name} takes no "
                                           f"{flags[-1] if name != 'check' else exc.option_name}: "
                                           f"{why}", ctx) from None
            raise
