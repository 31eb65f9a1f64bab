"""``collbench ab``: two setups of one measuring command, interleaved in one job, then compared."""

from __future__ import annotations

import contextlib
import datetime
import sys
from pathlib import Path

import click

from collbench.cli import params

#: Options of the measuring command that ``ab`` sets itself for each side.
_OWNED = {"-o": "ab writes one file per side (its own -o PREFIX)",
          "--output": "ab writes one file per side",
          "--no-save": "ab keeps both sides' files", "-q": "ab prints its own progress (ab -q)",
          "--quiet": "ab prints its own progress (ab -q)", "-f": "ab prints the comparison (ab -f)",
          "--format": "ab prints the comparison (ab -f)",
          "--seed": "ab chooses the seed of both sides (ab --seed)"}


def _side_options(letter: str):
    def apply(f):
        f = click.option(f"--{letter.lower()}-label", default=letter.lower(), show_default=True,
                         help=f"Name of side {letter} in files and tables.")(f)
        f = click.option(f"--{letter.lower()}-backend", default=None,
                         help=f"Backend of side {letter} [default: the command's].")(f)
        f = click.option(f"--{letter.lower()}-python", default=None, metavar="PYTHON",
                         help=f"Interpreter of side {letter}, with collbench installed [default: "
                              "this one].")(f)
        f = click.option(f"--{letter.lower()}-env", multiple=True, metavar="NAME=VALUE",
                         help=f"Variable set for side {letter}'s ranks only; repeatable.")(f)
        return f
    return apply


@click.command("ab",
               context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_side_options("A")
@_side_options("B")
@click.option("-o", "--output", "prefix", default=None, metavar="PREFIX",
              help="Files PREFIX-LABEL.json, one per side [default: results/ab-DATE-TIME].")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
@click.option("--threshold", default="5%", show_default=True,
              help="Smallest change that counts (5% or 0.05).")
@click.option("--metric", type=click.Choice(("time_us_p50", "busbw_gbps")), default="time_us_p50",
              show_default=True, help="Median time or bus bandwidth.")
@click.option("--alpha", type=params.ALPHA, default=0.05, show_default=True,
              help="Family-wise significance level (max-T over the rows).")
@click.option("--seed", type=params.Whole(min=0, max=2**31 - 1), default=None,
              help="Seed of the pair order and of the sizes' order [default: random, recorded].")
@click.option("-f", "--format", "fmt", type=click.Choice(("table", "markdown", "json")),
              default="table",
              show_default=True, help="How the comparison is printed.")
@click.option("--allow-missing", is_flag=True,
              help="Let rows that B lacks or could not measure pass; without it they fail, as in "
                   "compare.")
@click.option("--fail-on-inconclusive", is_flag=True,
              help="Fail (exit 1) when any row is inconclusive, as in compare.")
@click.option("--min-decided", type=params.SHARE, default="80%", show_default=True,
              help="The share of rows that must be decided to pass; below it, exit 3 (undecided), "
                   "as in compare.")
@click.option("--max-rounds", type=params.Whole(min=1, max=1000), default=None, metavar="N",
              help="Pairs the job may go to where rows are undecided: after the command's "
                   "--rounds, and after twice as many and so on, it judges, and adds pairs while "
                   "fewer than --min-decided of the rows are decided [default: 4 x --rounds; "
                   "equal to --rounds adds none].")
@click.option("--turns", type=click.Choice(("size", "launch")), default="size", show_default=True,
              help="How a pair's two launches take turns: at once, size by size (what moves the "
                   "machine in a second moves both), or one launch after the other.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines; the comparison only.")
@click.option("-v", "--verbose", is_flag=True, help="Print the launch commands.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def ab_command(command, prefix, force, threshold, metric, alpha, seed, fmt, allow_missing,
               fail_on_inconclusive,
               min_decided, max_rounds, turns, quiet, verbose, **sides) -> None:
    """Measure two setups of COMMAND in one job, taking turns size by size, then compare B with A.

    COMMAND is a measuring command as you would type it after `collbench`, without -o:
    `ab --b-env UCX_TLS=tcp -- allreduce -n 2 --sizes 8-1M --rounds 10`. Each round of side A
    and the same round of side B form a pair, launched together and taking turns size by
    size, so that what moves a shared machine moves both. Sides differ by --a-env/--b-env,
    --a-python/--b-python (another build of mpi4py or MPI) or --a-backend/--b-backend.
    Where rows are undecided after --rounds pairs, the job adds pairs, up to --max-rounds,
    judging each look at alpha / looks.

    \b
    Exit status: 0 no regression (B is not slower than A), 1 regression (or rows B could
    not measure, unless --allow-missing, or rows not decided, with --fail-on-inconclusive),
    2 bad input, 3 undecided (fewer rows decided than --min-decided); the
    result files are ordinary runs that compare, report and plot read.
    How it is judged: docs/compare.md, "A/B in one job".
    """
    from collbench.analysis.compare import compare_runs, parse_threshold
    from collbench.errors import UsageError
    from collbench.launch.origin import launcher as launch
    from collbench.backends import uses_mpi
    from collbench.run import interleaved
    from collbench.run.plan import default_nprocs
    from collbench.run.rounds import new_seed
    from collbench.results.loader import load_result

    threshold_value = parse_threshold(threshold)
    here = launch.detect()
    if here.name != "none":
        raise UsageError("collbench ab launches its ranks itself, round by round: run it outside "
                         "mpiexec/srun")
    name, args, target = _measuring_command(command)
    labels, made = _sides(sides)
    paths, new_folder = _outputs(prefix, labels, force)
    try:
        opts, backends_of, plan = _plans(target, name, args, paths, force, made, here)
        rounds = opts["rounds"]
        max_rounds = _max_rounds(max_rounds, rounds)
    except BaseException:
        if new_folder is not None:
            with contextlib.suppress(OSError):        # only while it is empty
                new_folder.rmdir()
        raise
    n = opts.get("nprocs") or min(default_nprocs(b) for b in backends_of)
    seed = seed if seed is not None else new_seed()
    looks = interleaved.looks(rounds, max_rounds)
    judged = dict(_at_looks(alpha, len(looks)), metric=metric, threshold=threshold_value,
                  baseline_name=labels[0],
                  new_name=labels[1], allow_missing=allow_missing,
                  fail_on_inconclusive=fail_on_inconclusive,
                  # sides may differ in level on purpose
                  across_levels=True, min_decided=min_decided)
    if not quiet:
        print(f"collbench ab: {rounds} pair{'s' * (rounds != 1)} of {name} on {n} ranks"
              f"{f', up to {max_rounds} where rows are undecided' if max_rounds > rounds else ''}; "
              f"A ({labels[0]}): {made[0].describe()}; B ({labels[1]}): {made[1].describe()}; seed "
              f"{seed}",
              file=sys.stderr, flush=True)
    turns = _turns(turns, args, made)

    def more(done: int) -> int:
        return _more_pairs(done, looks,
                           lambda: compare_runs(load_result(paths[0]), load_result(paths[1]),
                                                **judged),
                           quiet)

    code = interleaved.run_interleaved(tuple(made), [name] + args, paths, n=n, bind=plan.bind,
                              use_mpi=tuple(any(uses_mpi(b) for b in bs) for bs in backends_of),
                              rounds=rounds, seed=seed, quiet=quiet, verbose=verbose, turns=turns,
                                       more=more)
    _judge_and_exit(code, paths, judged, fmt, quiet)


def _judge_and_exit(code: int, paths: tuple, judged: dict, fmt: str, quiet: bool) -> None:
    """The end of an ab job whose launches returned ``code``: that code where the job failed,
    else the two result files compared (``judged``: compare's settings), printed in ``fmt``,
    and the exit status the comparison calls for."""
    from collbench.analysis.compare import compare_runs
    from collbench.cli.results import COMPARE_FORMATS, _warn
    from collbench.results.loader import load_result

    if code not in (0, 1):
        sys.exit(code)
    comparison = compare_runs(load_result(paths[0]), load_result(paths[1]), **judged)
    for warning in comparison.warnings:
        _warn(warning)
    COMPARE_FORMATS[fmt](comparison)
    if not quiet:
        print(f"collbench ab: wrote {paths[0]} and {paths[1]}", file=sys.stderr)
    sys.stdout.flush()
    if not comparison.passed or code == 1:
        sys.exit(1)
    if comparison.status:
        sys.exit(comparison.status)


def _at_looks(alpha: float, looks: int) -> dict:
    """compare's alpha and confidence at each of ``looks`` looks: alpha / looks, and CIs at
    1 - (1 - CONFIDENCE) / looks, so that over every look the job may stop at a false call
    (slower, faster or same) stays within alpha."""
    from collbench.stats.calibration import CONFIDENCE

    return {"alpha": alpha / looks, "confidence": 1.0 - (1.0 - CONFIDENCE) / looks}


def _turns(turns: str, args: list, made: list) -> str:
    """How the pairs take turns: as asked, but launch by launch (said) where a rendezvous the
    user fixed would be the same for both sides."""
    from collbench.run import interleaved

    why_not = interleaved.why_not_at_once(args, tuple(made)) if turns == "size" else ""
    if why_not:
        print(f"collbench ab: the sides take turns launch by launch: {why_not}", file=sys.stderr,
              flush=True)
        return "launch"
    return turns


def _max_rounds(given, rounds: int) -> int:
    """--max-rounds, checked against the command's --rounds; 4x --rounds where not given."""
    from collbench.errors import UsageError
    from collbench.run.rounds import MAX_ROUNDS

    if given is None:
        return min(4 * rounds, max(MAX_ROUNDS, rounds))
    if given < rounds:
        raise UsageError(f"--max-rounds {given} is below the command's --rounds {rounds}: give at "
                         f"least {rounds}")
    return given


def _more_pairs(done: int, looks: list, judge, quiet: bool) -> int:
    """After ``done`` pairs (a look of ``looks``): how many pairs to add, judged now. None are
    added after the last look; where the gate fails on rows the new side lacks; once enough rows
    are decided (``--min-decided``; every row, with ``--fail-on-inconclusive``), slower ones
    included: a row called slower fails the gate, but the rows left undecided beside it are
    what the job could not see; or where no undecided row can be decided within the last look."""
    from collbench.errors import UsageError

    if done >= looks[-1]:
        return 0
    try:
        c = judge()
    except UsageError:               # said by the final comparison
        return 0
    left = c.undecided
    reachable = [r for r in left if (r.rounds_needed is not None and r.rounds_needed <= looks[-1])
                 or (r.rounds_needed is None and r.cause in ("pairs", "family"))]
    enough = not c.fail_on_inconclusive and c.decided >= c.min_decided * len(c.compared) - 1e-9
    step = next(k for k in looks if k > done) - done
    why = ("rows the new side lacks fail the gate" if c.unjudged and not c.allow_missing else
           "every row is decided" if not left else
           f"enough are (--min-decided {c.min_decided:.0%})" if enough else
           f"the {len(left)} undecided need more than {looks[-1]} pairs" if not reachable else "")
    if not quiet:
        said = (f"{c.decided} of {len(c.compared)} rows decided at alpha {c.alpha:.3g} "
                f"(look {looks.index(done) + 1} of {len(looks)})")
        print(f"collbench ab: after {done} pairs, {said}; "
              f"{why or f'{len(left)} undecided: {step} more pairs'}",
              file=sys.stderr, flush=True)
    return 0 if why else step


def _measuring_command(command) -> tuple:
    """(its name, its arguments, its click command) of the measuring command ab was given;
    UsageError where it is not one, or sets what ab owns."""
    from collbench.errors import UsageError

    args = list(command)
    if args and args[0] == "--":
        args = args[1:]
    name = args[0] if args else ""
    context = click.get_current_context()
    group = context.find_root().command          # the collbench group, which holds the command
    target = group.get_command(context, name) if name and isinstance(group, click.Group) else None
    if target is None or not getattr(target, "benchmarks", ()):
        raise UsageError("ab needs a measuring command (a benchmark such as allreduce or pingpong, "
                         f"or all) after its options, got {name!r}")
    for arg in args[1:]:
        flag = arg.split("=", 1)[0]
        if flag in _OWNED:
            raise UsageError(f"{flag} in the measured command: {_OWNED[flag]}")
    return name, args[1:], target


def _sides(sides: dict) -> tuple:
    """(the two labels, the two ``interleaved.Side``) from the --a-*/--b-* options, checked."""
    from collbench.errors import UsageError
    from collbench.run import interleaved

    labels = (sides["a_label"], sides["b_label"])
    for label in labels:
        if not label or not all(c.isalnum() or c in "-_." for c in label):
            raise UsageError(f"bad side label {label!r}: use letters, digits, '-', '_' or '.'")
    if labels[0] == labels[1]:
        raise UsageError(f"both sides are labelled {labels[0]!r}: give --a-label and --b-label "
                         "different names")
    made = [interleaved.Side(label, interleaved.parse_assignments(sides[f"{x}_env"], f"--{x}-env"),
                    sides[f"{x}_python"] or sys.executable, sides[f"{x}_backend"])
            for x, label in zip("ab", labels)]
    for x, side in zip("ab", made):
        if side.python != sys.executable:
            interleaved.check_interpreter(side.python, f"--{x}-python")
    return labels, made


def _outputs(prefix, labels: tuple, force: bool) -> tuple:
    """(each side's result file, the default folder made for them or None): PREFIX-LABEL.json,
    refused where one exists without --force."""
    from collbench.errors import UsageError

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    # the default folder, made as a plain run makes it (and gone on bad input)
    new_folder = None
    if prefix is None:
        prefix = str(Path("results") / f"ab-{stamp}")
        new_folder = None if Path("results").exists() else Path("results")
    paths = tuple(Path(f"{prefix}-{label}.json") for label in labels)
    for path in paths:
        if path.exists() and not force:
            raise UsageError(f"output {path} exists; use --force to overwrite it")
    if new_folder is not None:
        try:
            new_folder.mkdir()
        except OSError as exc:
            raise UsageError(f"cannot make the folder {str(new_folder)!r}: "
                             f"{exc.strerror or exc}") from None
    return paths, new_folder


def _plans(target, name: str, args: list, paths: tuple, force: bool, made: list, here) -> tuple:
    """(the command's options, each side's backends, the last side's plan): every bad input of
    the measured command, found once per side before anything is launched."""
    from collbench.backends import parse_backends
    from collbench.cli.options import defaults_without
    from collbench.errors import UsageError
    from collbench.run.plan import build_plan

    ctx = target.make_context(name,
                              list(args) + ["-o", str(paths[0])] + (["--force"] if force else []))
    benches = target.benchmarks
    opts, collectives = {**defaults_without(benches), **ctx.params}, tuple(b.name for b in benches)
    if hasattr(target, "plan_options"):            # pairs: its own options make the plan's
        opts = target.plan_options(ctx)
        collectives = (opts["pairing"].benchmark,)
    backends_of = []
    for side in made:
        side_opts = {**opts, "backend": side.backend or opts["backend"]}
        # every bad input, once per side
        plan = build_plan(collectives, side_opts, [name] + list(args), here)
        backends_of.append(parse_backends(side_opts["backend"])[0])
        if len(plan.thread_levels) > 1:
            raise UsageError(f"--thread-level {','.join(plan.thread_levels)}: ab measures one "
                             "setup a side; give each side its level (--a-env "
                             "MPI4PY_RC_THREAD_LEVEL=single --b-env "
                             "MPI4PY_RC_THREAD_LEVEL=multiple)")
    return opts, backends_of, plan
