"""Turn command-line options into a validated Plan, then launch ranks or run this one.

Everything a user can get wrong is checked here, before any rank starts, so that bad input is
one line and exit 2 whether or not collbench launches itself.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
from collections import Counter
from typing import Optional

from collbench.launch.origin import launcher as launch
from collbench.launch.network import rendezvous
from collbench.launch.self_launch import spawn
from collbench.launch.self_launch.mpiexec import hydra_debug_problem
from collbench.launch.origin.terminal import user_terminals
from collbench.backends import (BUILTIN_NAMES, PluginFault, asked_of, backend_class, names,
                                parse_backends, self_launch_ranks, uses_mpi)
from collbench.backends import threads
from collbench.backends.base import BackendOptions, Setup
from collbench.benchmarks import patterns
from collbench.benchmarks.base import Roles
from collbench.benchmarks.registry import get_benchmark
from collbench.benchmarks.dtypes import DTYPES, dtype_of
from collbench.benchmarks.ops import NO_OP, OPS, kinds_of, op_of, op_refusal
from collbench.errors import BackendUnavailable, SharedUsageError, UsageError
from collbench.measure import timings
from collbench.measure.harness import TimingSettings
from collbench.measure.memory import check_rank_count, user_limit
from collbench.live.files import check_output_settings, claim
from collbench.live.output import OutputSettings
from collbench.results.records import backend_label, usual_buffers
from collbench.run.groups import Split
from collbench.run.rounds import new_seed
from collbench.measure.sizes import parse_sizes


def default_nprocs(backends: list) -> int:
    """Ranks to self-launch without -n: the fewest any backend asks for (one per GPU for nccl),
    else 2 to 4, up to the cores."""
    asked = [n for n in (self_launch_ranks(b) for b in backends) if n is not None]
    return min(asked) if asked else max(2, min(os.cpu_count() or 1, 4))


def _takes(backend: type, mode: str) -> bool:
    """Whether ``backend`` measures timing ``mode``: every backend a host timing, and a device
    timing the backends that list it (their calls are queued on a GPU stream)."""
    return mode in backend.timings or not timings.on_device(mode)


def _untimed(modes: tuple, setups: list) -> tuple[frozenset, list]:
    """The (backend setup's key, timing) pairs a setup cannot time (a device timing on a backend
    whose calls are not queued on a GPU stream), with a note each; a timing none of the run's
    setups takes is refused."""
    pairs, notes = set(), []
    for mode in modes:
        cannot = [s.key for s in setups if not _takes(backend_class(s.name), mode)]
        if not cannot:
            continue
        why = (f"--timing {mode} times calls queued on a GPU stream with CUDA events and graphs "
               f"({timings.get_timing(mode).summary})"
               if timings.on_device(mode) else f"--timing {mode}")
        if len(cannot) == len(setups):
            takers = [b for b in BUILTIN_NAMES if _takes(backend_class(b), mode)]
            raise UsageError(f"{why}: {', '.join(cannot)} cannot; use "
                             f"{' or '.join(takers) or 'another timing'}")
        pairs.update((key, mode) for key in cannot)
        notes.append(f"{why}: {', '.join(cannot)} cannot; skipped there")
    return frozenset(pairs), notes


def _off_device(modes: tuple, collectives, setups: list, untimed: frozenset) -> list:
    """A note for each collective whose calls cannot be timed on a GPU's own clock (barrier) where
    the run asks a setup for a device timing: it takes the host's timings only. An error where
    it is the only collective and no host timing is asked."""
    asked = [m for m in modes
             if timings.on_device(m) and any((s.key, m) not in untimed for s in setups)]
    notes = []
    for cname in collectives if asked else ():
        why = get_benchmark(cname).not_on_device
        if not why:
            continue
        if len(collectives) == 1 and all(timings.on_device(m) for m in modes):
            raise UsageError(f"{cname} with --timing {','.join(asked)}: {why}; use --timing "
                             "latency or throughput")
        notes.append(f"{cname}: --timing {', '.join(asked)} not taken: {why}")
    return notes


def _kinds(opts: dict) -> tuple:
    """The (dtype, op) pairs a run measures: every dtype of --dtype with every op of --op (comma
    lists, as nccl-tests' -d and -o take several; ``all``: every one), in the order given, each
    once."""
    lists = []
    for name, parse, every in (("dtype", dtype_of, DTYPES), ("op", op_of, OPS)):
        given, chosen = str(opts[name]), []
        for text in given.split(","):
            if not text.strip():
                raise UsageError(f"--{name} {given:.60}: an empty name in the list")
            words = list(every) if text.strip() == "all" else [parse(text.strip()).name]
            chosen += [word for word in words if word not in chosen]
        lists.append(chosen)
    return tuple(itertools.product(*lists))


def _unsupported(collectives, setups: list, opts: dict) -> tuple[frozenset, list]:
    """The (collective, backend setup's key, dtype, op) that cannot run (the op's own dtypes
    first, then the backend's, then its setup's options), found before any rank starts: an
    error when the user named the collective, the backend, the dtype and the op, else a note."""
    kinds = _kinds(opts)
    named = (len(collectives) == 1 and len(kinds) == 1
             and "all" not in [b.strip() for b in opts["backend"].split(",")])
    # a comma list's other choices may still run
    per_backend = Counter(setup.name for setup in setups)
    left, why, placed, planned = set(), {}, {}, 0
    mismatched: dict = {}      # of several kinds: an op's dtypes it does not take, whatever ran
    asked_placement = tuple(_choices(opts.get("placement", "out-of-place"))) != ("out-of-place",)
    measured: dict = {}        # per collective, kind, backend and its other options: placements
    for cname, (dtype, op) in ((c, k) for c in collectives
                               for k in kinds_of(get_benchmark(c), kinds)):
        coll = get_benchmark(cname)
        for setup in setups:
            planned += 1
            reason, lacked = _refusal(coll, setup, dtype_of(dtype), op)
            backend = setup.key
            if reason is None:
                # a placement the collective lacks here: its only form, measured once
                asked, form = (setup.options.placement,
                               coll.placement(backend_class(setup.name).family,
                                              setup.options.placement))
                siblings = measured.setdefault((cname, dtype, op, setup.name, dataclasses.replace(
                    setup.options, placement="")), set())
                if form != asked and asked_placement:
                    names = placed.setdefault(("no buffers to place" if not form else
                                               f"only {form.replace('-', ' ')}", cname), [])
                    names += [setup.name] * (setup.name not in names)
                if form in siblings:
                    left.add((cname, backend, dtype, op))
                siblings.add(form)
                continue
            if named and per_backend[setup.name] == 1:
                raise UsageError(f"{cname} on {backend} with {opts['dtype']}"
                                 f"{' ' + op if coll.reduces else ''}: {reason}")
            left.add((cname, backend, dtype, op))
            if len(kinds) > 1 and op_refusal(op, dtype):
                dtypes = mismatched.setdefault((op, reason), [])
                dtypes += [dtype] * (dtype not in dtypes)
                continue
            entries = why.setdefault((setup.name if lacked else backend, reason), [])
            entries += [(cname, dtype, op)] * ((cname, dtype, op) not in entries)
    said = [f"--op {op} with {', '.join(dtypes)}: {reason}"
            for (op, reason), dtypes in mismatched.items()] + [
        f"{_skipped(entries, collectives, kinds)} on {backend}: {reason}"
        for (backend, reason), entries in why.items()]
    if len(left) == planned:
        raise UsageError("nothing to measure: " + "; ".join(said))
    # one line per reason and set of backends: "allreduce, reduce on gloo: only in place; measured
    # once"
    once: dict = {}
    for (reason, cname), names in placed.items():
        once.setdefault((reason, ", ".join(names)), []).append(cname)
    return frozenset(left), [line + "; skipped" for line in said] + [
        f"{_every(cnames, collectives)} on {backends}: {reason}; measured once"
        for (reason, backends), cnames in once.items()]


def _every(names: list, collectives) -> str:
    """``names`` of the run's ``collectives``, or "every collective" (that moves data)."""
    moving = [c for c in collectives if get_benchmark(c).moves_data]
    if len(names) == len(collectives) > 1:
        return "every collective"
    if set(names) == set(moving) and len(names) > 1:
        return "every collective that moves data"
    return ", ".join(names)


def _skipped(entries: list, collectives, kinds: tuple) -> str:
    """What a note's (collective, dtype, op) entries skip, as briefly as they allow: the
    collectives alone where each lost every kind of the run its op could take; with the dtypes,
    the ops or both where each lost every such kind that has them; else each with its kind."""
    lost: dict = {}
    for cname, dtype, op in entries:
        lost.setdefault(cname, set()).add((dtype, op))
    names = _every(list(lost), collectives)
    if len(kinds) == 1:
        return names
    runnable = {c: {k for k in kinds_of(get_benchmark(c), kinds) if not op_refusal(k[1], k[0])}
                for c in lost}
    dtypes = list(dict.fromkeys(d for _, d, _ in entries))
    ops = list(dict.fromkeys(o for _, _, o in entries if o != NO_OP))
    for said, keep in (("", lambda k: True),
                       (f" with {', '.join(dtypes)}", lambda k: k[0] in dtypes),
                       (f" with {', '.join(ops)}", lambda k: k[1] in ops),
                       (f" with {', '.join(dtypes)} and {', '.join(ops)}",
                        lambda k: k[0] in dtypes and k[1] in ops)):
        if all(lost[c] == {k for k in runnable[c] if keep(k)} for c in lost):
            return names + said
    return ", ".join(f"{c} ({d}{'' if o == NO_OP else ' ' + o})" for c, d, o in entries)


def _refusal(coll, setup: Setup, dtype, op: str) -> tuple:
    """(why ``coll`` cannot run on ``setup`` with ``dtype`` and ``op``, or None; whether its
    library lacks the call whatever the setup's options): the refusals of a whole setup first (no
    persistent calls on gloo), then a call its library lacks (said once for the backend), then
    the setup's options."""
    whole = (op_refusal(op, dtype.name)
             or coll.api_refusal(setup.options.api, backend_class(setup.name).family)
             or _ungrouped(coll, setup.options))
    lacked = None if whole else _answer(setup.name, "supports", collective=coll, dtype=dtype,
                                        op=op)
    return (whole or lacked or _answer(setup.name, "options_problem", options=setup.options,
                                       collective=coll, dtype=dtype, op=op)), lacked


def _answer(name: str, method: str, **kwargs):
    """A backend's answer to whether it runs a combination: a plugin whose method fails cannot,
    and that is the reason (a note under ``all``, one line when named)."""
    try:
        return asked_of(name, method, **kwargs)
    except PluginFault as exc:
        return str(exc).replace(f"backend plugin {name}: ", "", 1)


def _choices(value) -> tuple:
    """An option's choices: a comma list's tuple (``params.Choices``), or one value."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _setups(backends: list, opts: dict) -> tuple[list, list]:
    """(the backend setups the run measures, notes on those skipped): each backend once for each
    combination of the choices it takes (``--buffers numpy,mpi``: mpi twice, side by side), as
    long as it can run so (``options_problem``). A choice that none of the run's backends takes
    (``--payload list`` without mpi-pickle) is refused."""
    choices = {f.name: _choices(opts.get(f.name, f.default))
               for f in dataclasses.fields(BackendOptions)}
    if choices["coalesce"] != (1,):              # --coalesce K: beside the calls one at a time
        choices["coalesce"] = (1, *choices["coalesce"])
    for f in dataclasses.fields(BackendOptions):
        others = [value for value in choices[f.name] if value != f.default]
        if not others or any(f.name in backend_class(b).takes_options for b in backends):
            continue
        takers = [b for b in BUILTIN_NAMES if f.name in backend_class(b).takes_options]
        raise UsageError(f"--{f.name.replace('_', '-')} {','.join(map(str, others))} is for "
                         f"{' and '.join(takers)}, which this run does not measure (--backend "
                         f"{','.join(backends)})")
    kept, notes = [], []
    for name in backends:
        takes = backend_class(name).takes_options
        axes = [[(f.name, value)
                 for value in (choices[f.name] if f.name in takes else (f.default,))]
                for f in dataclasses.fields(BackendOptions) if f.name != "init_method"]
        for combination in itertools.product(*axes):
            options = _grouped(BackendOptions(**dict(combination),
                                              init_method=choices["init_method"][0]))
            setup = Setup(name, options, _setup_key(name, options, takes))
            # a group's calls: nonblocking already asked
            if any(setup.key == other.key for other in kept):
                continue
            reason = asked_of(name, "options_problem", options=options) or _group_problem(options)
            if reason is None:
                kept.append(setup)
            else:
                notes.append(f"skipping backend {setup.key}: {reason}")
    if not kept:
        raise UsageError("nothing to measure: " + "; ".join(notes))
    return kept, notes


def _grouped(options: BackendOptions) -> BackendOptions:
    """A setup whose calls go in groups (``--coalesce``) issues them in two steps, all started
    and then completed: non-blocking where blocking was asked (the row says so)."""
    if options.coalesce > 1 and options.api == "blocking":
        return dataclasses.replace(options, api="nonblocking")
    return options


def _ungrouped(coll, options: BackendOptions) -> Optional[str]:
    """Why ``coll``'s calls are not measured in a setup's groups (``--coalesce``), or None."""
    if options.coalesce > 1 and (coll.kind != "collective" or not coll.moves_data):
        return "measured one call at a time only (--coalesce groups the collectives that move data)"
    return None


def _group_problem(options: BackendOptions) -> Optional[str]:
    """Why a setup's calls cannot go in groups, or None."""
    if options.coalesce > 1 and options.cache == "cold":
        return "a group of calls on a cold pool is not measured: --coalesce with --cache hot"
    return None


def _refuse_levels_without_mpi(opts: dict) -> None:
    """--thread-level with only backends that do not use MPI named (gloo, nccl) is refused
    before their usability is asked (nccl without a GPU would say that instead)."""
    named = [b.strip() for b in str(opts["backend"]).split(",") if b.strip()]
    if (opts.get("thread_level") is None or not named or "all" in named
        or any(b not in names() for b in named)):
        return
    if not any(uses_mpi(b) for b in named):
        raise UsageError("--thread-level is for the MPI backends (mpi, mpi-pickle); "
                         f"{', '.join(named)} {'has' if len(named) == 1 else 'have'} no MPI thread "
                         "level")


def _thread_levels(opts: dict, backends: list, launcher: launch.Launcher) -> tuple:
    """The MPI thread levels the run measures at (``--thread-level``), in the order given."""
    given = opts.get("thread_level")
    levels = threads.parse_levels(given)
    # --backend all found no MPI
    if given is not None and not any(uses_mpi(b) for b in backends):
        raise UsageError("--thread-level is for the MPI backends (mpi, mpi-pickle); "
                         f"{', '.join(backends)} {'has' if len(backends) == 1 else 'have'} no MPI "
                         "thread level")
    if len(levels) > 1 and not launcher.by_collbench:
        raise UsageError(f"--thread-level {','.join(levels)}: MPI starts at one level per launch "
                         f"and {launcher.name} launched these ranks once; give one level, or let "
                         "collbench launch its ranks (no launcher) to measure several")
    return levels


def _patterns(opts: dict) -> tuple:
    """The canonical names of the patterns a v-collective spreads its bytes by (--pattern, a
    comma list measured side by side), in the order given, each once."""
    given = opts.get("pattern") or patterns.UNIFORM
    names = []
    for text in given.split(","):
        if not text.strip():
            raise UsageError(f"--pattern {given:.60}: an empty name in the list")
        try:
            name = patterns.parse(text).name
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        names += [name] * (name not in names)
    if len(names) > patterns.MAX_PATTERNS:
        raise UsageError(f"--pattern: {len(names)} patterns; at most {patterns.MAX_PATTERNS} "
                         "in one run")
    return tuple(names)


def _bind(opts: dict, launcher: launch.Launcher) -> str:
    """How collbench's own launch binds its ranks (``--bind``); under a user's launcher, what
    that launcher did is recorded and nothing is changed, so --bind is refused there."""
    bind = opts.get("bind")
    if bind is not None and not launcher.by_collbench:
        raise UsageError(f"--bind is for collbench's own launch; {launcher.name} placed these "
                         "ranks: bind with it (mpiexec -bind-to core, srun --cpu-bind=cores)")
    return bind or "none"


def _setup_key(name: str, options: BackendOptions, takes: tuple) -> str:
    """How a setup is named: as the rows it measures are labelled (``records.backend_label``)."""
    row = {"backend": name,
           "buffers": options.buffers if "buffers" in takes else usual_buffers(name),
           "payload": options.payload if "payload" in takes else "", "api": options.api,
           "placement": options.placement,
           "thread_level": options.thread_level if "thread_level" in takes else "",
           "cache": options.cache, "coalesce": options.coalesce}
    return backend_label(row)


def build_plan(collectives, opts: dict, argv: list, launcher: launch.Launcher):
    from collbench.run.runner import Plan  # numpy and friends: only once options parsed

    sizes = parse_sizes(opts["sizes"])
    user_limit()                     # COLLBENCH_MEMORY_LIMIT: a bad value is bad input too
    kinds = _kinds(opts)
    if opts["root"] < 0:
        raise UsageError(f"--root must be 0 or more, got {opts['root']}")
    spreads = _patterns(opts)
    roles = Roles(root=opts["root"], pairs=(opts["pair"],), window=opts["window"],
                  pattern=spreads[0])
    if opts["nprocs"] is not None and opts["nprocs"] < 1:
        raise UsageError(f"-n/--np must be at least 1, got {opts['nprocs']}")
    _refuse_levels_without_mpi(opts)
    backends, notes = parse_backends(opts["backend"])
    if launcher.name in ("torchrun", "env") and not launcher.shares_mpi_world:
        mpi_here = [b for b in backends if uses_mpi(b)]
        if mpi_here and opts["backend"].strip() != "all":
            raise UsageError(f"backend {', '.join(mpi_here)} needs an MPI launcher (mpiexec, "
                             f"srun); under {launcher.name} use gloo or nccl")
        backends = [b for b in backends if not uses_mpi(b)]
        notes += [f"skipping backend {b}: needs an MPI launcher" for b in mpi_here]
        if not backends:
            raise UsageError("no usable backend under " + launcher.name)
    if not all(uses_mpi(b) for b in backends):
        rendezvous.check_variables(os.environ)
        rendezvous.check_init_method(opts.get("init_method", "env://"),
                                     here=launcher.name == "none")
    levels = _thread_levels(opts, backends, launcher)
    bind = _bind(opts, launcher)
    setups, more = _setups(backends, {**opts, "thread_level": levels})
    notes += more
    backends = list(dict.fromkeys(setup.name for setup in setups))
    unsupported, more = _unsupported(collectives, setups, opts)
    notes += more
    modes = timings.timing_modes(_choices(opts["timing"]))
    if "graph" in modes and any(setup.options.cache == "cold" for setup in setups):
        raise UsageError("--cache cold with --timing graph: a graph replays the calls it captured "
                         "on the buffers they were captured with; time cold buffers with latency, "
                         "throughput or device timing")
    if "graph" in modes and any(setup.options.coalesce > 1 for setup in setups):
        raise UsageError("--coalesce with --timing graph: a graph replays one captured call; time "
                         "groups with latency, throughput or device timing")
    untimed, more = _untimed(modes, setups)
    notes += more + _off_device(modes, collectives, setups, untimed)
    if opts["output"] and opts["no_save"]:
        raise UsageError("--output and --no-save contradict each other; give one")
    if opts["iters"] is not None and opts["min_iters"] > opts["iters"] and "--min-iters" in argv:
        raise UsageError("--min-iters is larger than --iters; with --iters the count is fixed")
    timing = TimingSettings(iters=opts["iters"], warmup=opts["warmup"], min_iters=opts["min_iters"],
                            max_time=opts["max_time"], precision=opts["precision"])
    output = OutputSettings(outputs=tuple(opts["output"]), results_dir=opts["results_dir"],
                            save=not opts["no_save"], force=opts["force"], quiet=opts["quiet"],
                            print_format=opts["print_format"], terminals=user_terminals())
    if launcher.name == "none":      # under a launcher, rank 0 checks and tells the others (runner)
        check_output_settings(output)
    split = Split.of(opts.get("split"), opts.get("split_mask"))
    return Plan(collectives=tuple(collectives), backends=tuple(backends), sizes=tuple(sizes),
                dtype=",".join(dict.fromkeys(d for d, _ in kinds)),
                op=",".join(dict.fromkeys(o for _, o in kinds)), kinds=kinds, roles=roles,
                pairing=opts.get("pairing"),
                timing_modes=modes, untimed=untimed,
                timing_settings=timing, check=opts["check"], output=output, argv=tuple(argv),
                notes=tuple(notes),
                verbose=opts["verbose"], timeout=opts["timeout"], rounds=opts["rounds"],
                seed=opts["seed"],
                shuffle=opts["shuffle"], unsupported=unsupported, setups=tuple(setups), split=split,
                thread_levels=levels if any(uses_mpi(b) for b in backends) else (), bind=bind,
                pages=opts.get("pages") or "small", patterns=spreads)


def build_and_run(collectives, opts: dict, argv: list, launcher: launch.Launcher) -> int:
    try:
        plan = build_plan(collectives, opts, argv, launcher)
    # a library missing on one node: each rank says so
    except (SharedUsageError, BackendUnavailable):
        raise
    except UsageError as exc:      # the same options meet the same verdict on every rank
        raise SharedUsageError(str(exc)) from None
    from collbench.run.runner import roles_problem
    if launcher.name == "none":
        n = opts["nprocs"] if opts["nprocs"] is not None else default_nprocs(list(plan.backends))
        problem = roles_problem(plan, n)
        if problem:
            raise UsageError(problem)
        check_rank_count(n, torch=not all(uses_mpi(b) for b in plan.backends))
        if n > 1:
            use_mpi = any(uses_mpi(b) for b in plan.backends)
            seed = plan.seed if plan.seed is not None else new_seed()
            # rank 0's document reaches stdout through us
            if plan.output.print_format != "table":
                problem = use_mpi and hydra_debug_problem(os.environ, plan.output.print_format)
                if problem:
                    raise UsageError(problem)
                mark = getattr(sys.stdout, "asked_for", None)
                if mark is not None:
                    mark(f"-f {plan.output.print_format}")
            # The files are claimed before the first launch: a run started beside this one with
            # the same -o is refused now, not after it has measured (live.files).
            return spawn.self_launch(n, list(argv), use_mpi=use_mpi, verbose=plan.verbose,
                                     rounds=plan.rounds,
                                     seed=seed, claim=lambda noted: claim(plan.output, noted),
                                     levels=plan.thread_levels, bind=plan.bind)
    elif opts["nprocs"] is not None and opts["nprocs"] != launcher.world_size:
        raise SharedUsageError(f"-n {opts['nprocs']} conflicts with the {launcher.world_size} "
                               f"ranks started by {launcher.name}; drop -n under a launcher")
    from collbench.run.runner import run
    return run(plan, launcher)
